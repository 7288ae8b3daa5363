"""The stand-in SGLang's parts that need neither the pair nor the sglang package: NCCL's settings and
the nccl.conf trap, the address the MessageQueue advertises, gloo's interface check, the settings
taken from SGLang's ServerArgs, /metrics in SGLang's names, and the launcher that swaps run_server.
(The whole stand-in, with SGLang's own parser, runs on the pair: test_sglang.py.)"""
from __future__ import annotations

import socket
from types import SimpleNamespace

from simengine import sglang_launch, sglang_world
from simengine.knobs import Timing
from simengine.sglang_http import SglangStats
from simengine.sglang_server import SimConfig

ARGS = dict(model_path="Qwen/Qwen3-235B-A22B-FP8", revision=None, served_model_name=None, host="0.0.0.0", port=8355,
            tp_size=2, pp_size=1, nnodes=2, node_rank=0, dist_init_addr="198.19.1.11:25000", enable_metrics=True,
            context_length=None, max_running_requests=None, speculative_algorithm="EAGLE3",
            speculative_draft_model_path="lmsys/Qwen3-235B-A22B-EAGLE3", speculative_num_steps=None,
            speculative_eagle_topk=None, speculative_num_draft_tokens=None)


def test_nccl_conf_is_read_and_the_environment_wins(tmp_path):
    conf = tmp_path / "nccl.conf"
    conf.write_text("# leftover\nNCCL_IB_USE_INLINE=1\nNCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS = 1\nOTHER=2\n")
    settings = sglang_world.nccl_settings({"NCCL_IB_USE_INLINE": "0", "PATH": "/bin"}, files=(str(conf),))
    assert settings == {"NCCL_IB_USE_INLINE": "0", "NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS": "1"}


def test_the_warm_up_freezes_only_on_ib_with_both_settings(tmp_path):
    devices = tmp_path / "infiniband"
    devices.mkdir()
    both = {"NCCL_IB_USE_INLINE": "1", "NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS": "1"}
    assert not sglang_world.warmup_freezes(both, str(devices))           # no RDMA device: NCCL uses sockets
    (devices / "uverbs0").touch()
    assert sglang_world.warmup_freezes(both, str(devices))
    assert not sglang_world.warmup_freezes({**both, "NCCL_IB_USE_INLINE": "0"}, str(devices))
    assert not sglang_world.warmup_freezes({**both, "NCCL_IB_DISABLE": "1"}, str(devices))
    assert not sglang_world.warmup_freezes({**both, "NCCL_NET": "Socket"}, str(devices))


def test_the_message_queue_address_follows_sglang_host_ip():
    assert sglang_world.local_ip_auto({"SGLANG_HOST_IP": "198.19.1.11", "HOST_IP": "x"}) == "198.19.1.11"
    assert sglang_world.local_ip_auto({"HOST_IP": "198.19.1.12"}) == "198.19.1.12"
    assert sglang_world.local_ip_auto({"SGLANG_LOCAL_IP_NIC": "lo", "SGLANG_HOST_IP": "198.19.1.12"}) == "198.19.1.12"


def test_gloo_refuses_an_interface_without_an_address():
    assert sglang_world.gloo_problem({}) is None
    assert sglang_world.gloo_problem({"GLOO_SOCKET_IFNAME": "lo"}) is None
    missing = sglang_world.gloo_problem({"GLOO_SOCKET_IFNAME": "enp9s9f9np9"})
    assert missing.endswith("ifa != nullptr. Unable to find address for: enp9s9f9np9")


def test_eagle3_settings_default_as_sglang_chooses_them():
    spec = SimConfig.from_server_args(SimpleNamespace(**ARGS)).speculative
    assert (spec.max_draft_len, spec.topk, spec.num_draft_tokens) == (3, 1, 4)
    explicit = SimConfig.from_server_args(SimpleNamespace(**{**ARGS, "speculative_num_steps": 5,
                                                             "speculative_eagle_topk": 1})).speculative
    assert (explicit.max_draft_len, explicit.num_draft_tokens) == (5, 6)
    assert SimConfig.from_server_args(SimpleNamespace(**{**ARGS, "speculative_algorithm": None})).speculative is None


def test_metrics_carry_sglang_names_and_acceptance():
    config = SimConfig.from_server_args(SimpleNamespace(**ARGS))
    stats = SglangStats(config, {"model_type": "qwen3_moe"})
    stats.count_draft_tokens(30, 12)
    stats.record_iteration({"specDecodingStats": {"numRequestsWithDraftTokens": 10, "acceptanceLength": 2.2,
                                                  "draftOverhead": 0.2}})
    text = stats.sglang_text("Qwen/Qwen3-235B-A22B-FP8")
    labels = 'model_name="Qwen/Qwen3-235B-A22B-FP8",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"'
    assert f"sglang:spec_accept_length{{{labels}}} 2.2" in text        # (12 accepted + 10 verifies) / 10
    assert f"sglang:spec_accept_rate{{{labels}}} 0.4" in text          # 12 of 30 drafts
    assert f"sglang:spec_verify_calls_total{{{labels}}} 10.0" in text
    assert "# TYPE sglang:generation_tokens counter" in text and "sglang:generation_tokens_total{" in text
    assert Timing().expected_accepted(3) > 0


def test_the_launcher_keeps_the_wheel_module_but_its_run_server():
    source = ("import sys\ndef run_server(a):\n    raise SystemExit('wheel')\n"
              "if __name__ == '__main__':\n    run_server(sys.argv)\n")
    seen = []
    code = sglang_launch.without_run_server(source, "launch_server.py")
    exec(code, {"__name__": "__main__", "run_server": seen.append})  # noqa: S102
    assert len(seen) == 1


def test_a_store_client_retries_until_the_rank_0_listens():
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    import threading

    result = {}
    client = threading.Thread(target=lambda: result.update(world=sglang_world.SglangWorld.rendezvous(
        1, 2, "127.0.0.1", port)))
    client.start()
    leader = sglang_world.SglangWorld.rendezvous(0, 2, "127.0.0.1", port)
    client.join(timeout=30)
    assert leader.bcast_object({"x": 1}) == {"x": 1}
    assert result["world"].bcast_object(None) == {"x": 1}


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return probe.getsockname()[1]


def test_two_ranks_on_loopback_serve_with_a_draft(tmp_path):
    """The whole stand-in but SGLang's parser (run_server on the settings it would get), two ranks on
    loopback: rendezvous, NCCL's bootstrap, the MessageQueue, HTTP, acceptance in /metrics."""
    import json
    import os
    import subprocess
    import sys
    import time
    import urllib.request

    from simengine import hf_cli

    cache = tmp_path / "hub"
    for repo in (ARGS["model_path"], ARGS["speculative_draft_model_path"]):
        assert hf_cli.main(["download", repo, "--cache-dir", str(cache), "--quiet"]) == 0
    port, dist = free_port(), free_port()
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "SGLANG_HOST_IP": "127.0.0.1",
           "NCCL_SOCKET_IFNAME": "lo", "SIM_LOAD_SECONDS": "0.2"}
    runner = ("import json, sys; from types import SimpleNamespace; from simengine.sglang_server import run_server; "
              "sys.exit(run_server(SimpleNamespace(**json.loads(sys.argv[1]))))")
    procs, logs = [], []
    for rank in (0, 1):
        args = {**ARGS, "host": "127.0.0.1", "port": port, "node_rank": rank, "dist_init_addr": f"127.0.0.1:{dist}",
                "tokenizer_path": None}
        logs.append(tmp_path / f"rank{rank}.log")
        with open(logs[-1], "wb") as out:
            procs.append(subprocess.Popen([sys.executable, "-c", runner, json.dumps(args)], env=env, stdout=out,
                                          stderr=subprocess.STDOUT))
    try:
        deadline = time.monotonic() + 60
        while "The server is fired up and ready to roll!" not in logs[0].read_text():
            assert time.monotonic() < deadline and procs[0].poll() is None, logs[0].read_text()[-2000:]
            time.sleep(0.2)
        assert f"world_size=2 rank=1 local_rank=0 distributed_init_method=tcp://127.0.0.1:{dist}" in logs[1].read_text()
        base = f"http://127.0.0.1:{port}"
        request = urllib.request.Request(base + "/generate", data=json.dumps(
            {"text": "hi", "sampling_params": {"max_new_tokens": 30}}).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=30) as answer:
            meta = json.load(answer)["meta_info"]
        assert meta["completion_tokens"] == 30 and meta["spec_verify_ct"] >= 8
        with urllib.request.urlopen(base + "/metrics", timeout=30) as answer:
            metrics = answer.read().decode()
        assert "sglang:spec_accept_length{" in metrics and "sglang:spec_verify_calls_total{" in metrics
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)
