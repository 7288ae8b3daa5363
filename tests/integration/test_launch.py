"""sparkpair launch / status / logs / stop on the simulated pair: TP=2 across both nodes for real."""

from __future__ import annotations

import json
import time
from pathlib import Path

import openai
import pytest
import yaml
from conftest import run_sparkpair
from openai import OpenAI

MODEL = "nvidia/Qwen3-235B-A22B-FP4"
HEAD_URL = "http://198.18.0.11:8355/v1"


def _containers(bed, node: str) -> str:
    return bed.exec(node, "docker ps -a --format '{{.Names}} {{.Status}}'").stdout


def _variant(bed, tmp_path: Path, **changes) -> Path:
    data = yaml.safe_load(Path(bed.inventory).read_text())
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        data[section][key] = value
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_launch_serves_completions_and_streamed_chat_across_both_nodes(stopped, sparkpair) -> None:
    run = sparkpair("launch", "--timeout", "120")
    assert run.code == 0, run.text
    assert f"serving: {HEAD_URL}" in run.out and "ready in" in run.out
    client = OpenAI(base_url=HEAD_URL, api_key="none")
    completion = client.completions.create(model=MODEL, prompt="Paris is great because", max_tokens=16)
    assert completion.choices[0].text.strip() and completion.usage.completion_tokens == 16
    stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hello"}],
                                            max_tokens=12, stream=True)
    pieces = [chunk.choices[0].delta.content for chunk in stream if chunk.choices and chunk.choices[0].delta.content]
    assert len("".join(pieces).split()) == 12
    status = sparkpair("status", "--json")
    assert status.code == 0, status.text
    data = json.loads(status.out)
    assert data["state"] == "serving" and data["model"] == MODEL and data["health"] == "ok"
    assert data["requests"] >= 2 and 0 < data["acceptance_rate"] < 1
    assert all(node["ranks_alive"] > 0 for node in data["nodes"].values())
    logs = sparkpair("logs", "--tail", "50")
    assert "==> spark-a (rank 0) <==" in logs.out and "Application startup complete." in logs.out
    again = sparkpair("launch", "--timeout", "60")
    assert again.code == 0 and "already running with this configuration" in again.out, again.text


def test_a_dead_worker_rank_shows_as_degraded_and_stop_cleans_both_nodes(stopped, sparkpair) -> None:
    assert sparkpair("launch", "--timeout", "120").code == 0
    stopped.exec("spark-b", "docker exec trtllm-multinode pkill -KILL -f '[t]rtllm-serve'")
    request = OpenAI(base_url=HEAD_URL, api_key="none", max_retries=0, timeout=15)
    with pytest.raises((openai.APIConnectionError, openai.APITimeoutError, openai.InternalServerError)):
        request.completions.create(model=MODEL, prompt="x", max_tokens=4)
    status = stopped.wait_until(lambda: (lambda r: r if json.loads(r.out)["state"] == "degraded" else None)(
        sparkpair("status", "--json")), 30, "status to say degraded")
    assert status.code == 1 and "rank gone on" in json.loads(status.out)["reason"]
    first, second = sparkpair("stop"), sparkpair("stop")
    assert first.code == 0 and "spark-b: removed trtllm-multinode" in first.out
    assert second.code == 0 and "spark-b: no trtllm-multinode container" in second.out
    for node in ("spark-a", "spark-b"):
        assert "trtllm-multinode" not in _containers(stopped, node)
        assert stopped.exec(node, "test -d /home/nvidia/.cache/huggingface/hub/models--nvidia--Qwen3-235B-A22B-FP4",
                            check=False).returncode == 0
    assert json.loads(sparkpair("status", "--json").out)["state"] == "stopped"


@pytest.mark.parametrize("fault,node,check,expected", [
    ("port-busy", "spark-a", "ports.serving", "port 8355 held by python3"),
    ("image-mismatch", "spark-b", "docker.image-match", "different image IDs under one tag"),
    ("peer-key-missing", "spark-b", "trust.ssh", "Permission denied (publickey"),
    ("gpu-missing", "spark-b", "platform.gpu", "no GPU visible"),
])
def test_launch_critical_faults_fail_fast_with_their_cause(stopped, sparkpair, fault, node, check, expected) -> None:
    stopped.fault(fault, node=node)
    started = time.monotonic()
    run = sparkpair("launch", "--timeout", "60")
    assert run.code == 1
    assert check in run.out and expected in run.out, run.text
    assert "launch-critical check(s) FAIL; nothing was started" in run.err
    assert time.monotonic() - started < 20
    for name in ("spark-a", "spark-b"):
        assert "trtllm-multinode" not in _containers(stopped, name)


def test_model_missing_on_worker_is_copied_back_or_refused_with_cached(stopped, sparkpair) -> None:
    assert sparkpair("launch", "--timeout", "120").code == 0
    assert sparkpair("stop").code == 0
    stopped.fault("model-missing-on-worker")
    refused = sparkpair("launch", "--model-source", "cached", "--timeout", "60")
    assert refused.code == 1
    assert f"spark-b: {MODEL} is missing on spark-b; --model-source cached copies nothing" in refused.err
    healed = sparkpair("launch", "--timeout", "120")
    assert healed.code == 0, healed.text
    assert f"spark-b: {MODEL} missing; copying from spark-a" in healed.err


def test_wrong_interface_is_diagnosed_from_the_ranks_logs_and_torn_down(stopped, tmp_path: Path) -> None:
    inventory = _variant(stopped, tmp_path, container__env={"NCCL_SOCKET_IFNAME": "enp9s9np9"})
    run = run_sparkpair(inventory, "launch", "--timeout", "60")
    assert run.code == 1
    assert "NCCL WARN Bootstrap : no socket interface found" in run.err
    assert "error: cause fabric.interface: NCCL, Gloo, UCX or Open MPI was told to use a network interface" in run.err
    assert "fix: name the Up QSFP twins (ibdev2netdev)" in run.err and "docs/runbooks.md#fabric-interface" in run.err
    for node in ("spark-a", "spark-b"):
        assert "trtllm-multinode" not in _containers(stopped, node)


def test_sshd_transport_serves_too(stopped, tmp_path: Path) -> None:
    inventory = _variant(stopped, tmp_path, container__mpi_transport="sshd")
    try:
        run = run_sparkpair(inventory, "launch", "--timeout", "120")
        assert run.code == 0, run.text
        listening = stopped.exec("spark-b", "ss -Htln 'sport = :2233' | wc -l").stdout.strip()
        assert int(listening) > 0, "no sshd listens on the worker's sshd_port"
        mpi_sessions = stopped.exec("spark-b", "ss -Htn state established 'sport = :2233' | wc -l").stdout.strip()
        assert int(mpi_sessions) > 0, "mpirun did not reach the worker through the container's sshd"
        # the worker's rank came through sshd: its own NCCL settings reach it from the container's environment
        # (the variant inventory lists the twins in yaml's sorted order: NCCL_IB_HCA follows the inventory)
        assert sorted(_rank_env(stopped, "spark-b", "NCCL_IB_HCA").split(",")) == ["roceP2p1s0f1", "rocep1s0f1"]
        answer = OpenAI(base_url=HEAD_URL, api_key="none").completions.create(model=MODEL, prompt="a", max_tokens=4)
        assert answer.usage.completion_tokens == 4
    finally:
        run_sparkpair(inventory, "stop")


def test_air_gapped_launch_from_a_staged_cache(stopped, sparkpair) -> None:
    assert sparkpair("launch", "--timeout", "120").code == 0
    assert sparkpair("stop").code == 0
    stopped.exec("spark-a", "rm -rf /home/nvidia/staged && mkdir -p /home/nvidia/staged && "
                            "mv /home/nvidia/.cache/huggingface/hub/models--nvidia--Qwen3-235B-A22B-* /home/nvidia/staged/ && "
                            "chown -R nvidia: /home/nvidia/staged")
    stopped.exec("spark-b", "rm -rf /home/nvidia/.cache/huggingface/hub/models--nvidia--Qwen3-235B-A22B-*")
    run = sparkpair("launch", "--model-source", "local:/home/nvidia/staged", "--timeout", "120")
    assert run.code == 0, run.text
    assert "copied from /home/nvidia/staged/models--nvidia--Qwen3-235B-A22B-FP4" in run.err
    assert "hf download" not in run.text and "Fetching" not in run.text


def test_single_node_profile_serves_on_the_chosen_node(stopped, sparkpair) -> None:
    run = sparkpair("launch", "gpt-oss-120b", "--node", "spark-b", "--timeout", "120")
    assert run.code == 0, run.text
    assert "serving: http://198.18.0.12:8355/v1" in run.out
    answer = OpenAI(base_url="http://198.18.0.12:8355/v1", api_key="none").completions.create(
        model="openai/gpt-oss-120b", prompt="a", max_tokens=3)
    assert answer.usage.completion_tokens == 3
    assert "trtllm-multinode" not in _containers(stopped, "spark-a")


def test_dry_run_starts_nothing(stopped, sparkpair) -> None:
    run = sparkpair("launch", "--dry-run")
    assert run.code == 0, run.text
    assert "serve: mpirun -np 2" in run.out and "trtllm-llmapi-launch trtllm-serve" in run.out
    for node in ("spark-a", "spark-b"):
        assert "trtllm-multinode" not in _containers(stopped, node)


def _engine_env(bed, node: str, name: str) -> str:
    """NAME in the environment of the node's engine container (what `docker run --env-file` gave it)."""
    return bed.exec(node, f"docker exec trtllm-multinode printenv {name}", check=False).stdout.strip()


def _rank_env(bed, node: str, name: str) -> str:
    """NAME in the environment of the node's rank (the trtllm-serve process inside its engine container)."""
    script = f"pid=$(pgrep -f '[t]rtllm-serve' | head -n 1); tr '\\0' '\\n' < /proc/$pid/environ | sed -n 's/^{name}=//p'"
    return bed.exec(node, ["docker", "exec", "trtllm-multinode", "sh", "-c", script]).stdout.strip()


def test_each_node_runs_with_its_own_roce_gid_index(stopped, sparkpair) -> None:
    """With the IPv4 RoCE v2 GID at index 3 on the head and 5 on the worker, doctor says so and a launch gives each
    node's container and rank its own NCCL_IB_GID_INDEX and NCCL_IB_HCA, asked of that node."""
    stopped.fault("roce-gid-differs")
    found = json.loads(sparkpair("doctor", "--only", "links.roce", "--json").out)["findings"]
    pair_rows = [f for f in found if f["node"] == "pair"]
    assert [f["status"] for f in pair_rows] == ["WARN"] and "index 3 on spark-a and 5 on spark-b" in pair_rows[0]["detail"]
    run = sparkpair("launch", "--timeout", "120")
    assert run.code == 0, run.text
    for node, index in (("spark-a", "3"), ("spark-b", "5")):
        assert _engine_env(stopped, node, "NCCL_IB_GID_INDEX") == index, node
        assert _engine_env(stopped, node, "NCCL_IB_HCA") == "rocep1s0f1,roceP2p1s0f1", node
        assert _rank_env(stopped, node, "NCCL_IB_GID_INDEX") == index, node   # never the head's value through -x
    state = json.loads(stopped.exec("spark-a", "cat /home/nvidia/.sparkpair/state/launch.json").stdout)
    assert state["fabric"]["nodes"]["spark-b"]["NCCL_IB_GID_INDEX"] == "5" and state["fabric"]["proof"] is None


def test_one_gid_index_for_nodes_that_differ_is_refused_with_the_per_node_values(stopped, tmp_path: Path) -> None:
    stopped.fault("roce-gid-differs")
    inventory = _variant(stopped, tmp_path, container__env={"NCCL_IB_GID_INDEX": "3"})
    run = run_sparkpair(inventory, "launch", "--timeout", "60")
    assert run.code == 1 and "launch-critical check(s) FAIL; nothing was started" in run.err
    for token in ("links.roce", "NCCL_IB_GID_INDEX=3", "NCCL_IB_GID_INDEX=5", "container.env"):
        assert token in run.out, token
    for node in ("spark-a", "spark-b"):
        assert "trtllm-multinode" not in _containers(stopped, node)


def test_check_fabric_stops_a_socket_fallback_before_any_model_loads(stopped, sparkpair) -> None:
    run = sparkpair("launch", "--check-fabric", "--timeout", "60")
    assert run.code == 1
    assert "--check-fabric: NCCL over RoCE is not proven" in run.err and "no model was loaded" in run.err
    assert "deep.nccl" in run.out and "Socket" in run.out and "FAIL" in run.out
    assert "proving the fabric" in run.err and "starting: mpirun" not in run.err
    for node in ("spark-a", "spark-b"):
        assert "trtllm-multinode" not in _containers(stopped, node)   # neither the engine nor the -doctor one


# --- the memory guard beside the engine, and the launch watch's own check before it -----------------------------

GUARD_LINE = "stopped by the memory guard on spark-b: MemAvailable 2.8 GiB < 4 GiB floor, pressure full avg10 41%"
BYSTANDER = "memguard-bystander"


def _guards(bed, node: str) -> str:
    """The memory guard processes running in a node (pgrep's lines; empty when none runs)."""
    return bed.exec(node, "pgrep -af '[m]emguard.py' || true").stdout


def _guard_stopped(sparkpair):
    """status --json once it names a stop by the memory guard, else None."""
    run = sparkpair("status", "--json")
    data = json.loads(run.out)
    return run if data.get("memory_guard") and data["nodes"]["spark-b"]["container"] == "exited" else None


def test_the_memory_guard_stops_the_engine_when_a_nodes_memory_runs_out(stopped, sparkpair) -> None:
    """While the stand-in serves, spark-b's memory figures fall (MemAvailable 2.8 GiB, every task stalled 41 % of
    the time): its guard stops that node's engine container and says why, status and diagnose name it, nothing
    else on the node is touched, and stop leaves no guard behind."""
    image = yaml.safe_load(Path(stopped.inventory).read_text())["container"]["image"]
    run = sparkpair("launch", "--timeout", "120")
    assert run.code == 0, run.text
    assert "memory guard watching trtllm-multinode (floor 4 GiB of MemAvailable" in run.err
    for node in ("spark-a", "spark-b"):  # alive after launch's SSH sessions ended
        assert "memguard.py" in _guards(stopped, node)
    stopped.exec("spark-b", f"docker rm -f {BYSTANDER} >/dev/null 2>&1; "
                            f"docker run -d --name {BYSTANDER} --entrypoint sleep {image} 600")
    try:
        stopped.fault("memory-exhausted", node="spark-b")
        status = stopped.wait_until(lambda: _guard_stopped(sparkpair), 60, "status to name the memory guard's stop")
        data = json.loads(status.out)
        assert status.code == 1 and data["state"] == "degraded" and data["memory_guard"] == [GUARD_LINE], data
        assert data["reason"].startswith(GUARD_LINE) and "engine container not running on spark-b" in data["reason"]
        assert data["nodes"]["spark-b"]["container"] == "exited"
        assert data["nodes"]["spark-b"]["memory_guard"] == "stopped the engine"
        assert data["nodes"]["spark-a"]["container"] == "running"   # each guard stops its own node's engine only
        assert f"{BYSTANDER} Up" in _containers(stopped, "spark-b")  # nothing else on the node is touched
        assert "memguard.py" not in _guards(stopped, "spark-b")      # its work done, the guard ended
        text = " ".join(sparkpair("status").out.split())  # the table may wrap the reason
        assert GUARD_LINE in text and "memory guard stopped the engine" in text, text
        diagnosed = sparkpair("logs", "--diagnose")
        assert diagnosed.code == 1 and diagnosed.out.startswith("1. memory.guard: the memory guard stopped"), \
            diagnosed.text
        assert GUARD_LINE in diagnosed.out and "docs/runbooks.md#memory-guard" in diagnosed.out
        log = stopped.exec("spark-b", "cat /home/nvidia/.sparkpair/guard/memguard.log").stdout
        offline = sparkpair("diagnose", "--json", "-", input_text=log)
        assert [item["cause"] for item in json.loads(offline.out)["findings"]][:1] == ["memory.guard"], offline.text
    finally:
        stopped.heal("memory-exhausted")
        stopped.exec("spark-b", f"docker rm -f {BYSTANDER} >/dev/null 2>&1 || true")
    done = sparkpair("stop")
    assert done.code == 0 and "spark-a: removed trtllm-multinode; memory guard ended (pid" in done.out, done.text
    for node in ("spark-a", "spark-b"):
        assert _guards(stopped, node) == "" and "trtllm-multinode" not in _containers(stopped, node)


def test_a_load_that_would_end_under_the_floor_is_stopped_before_the_guard_has_to(stopped, tmp_path: Path) -> None:
    """spark-b has 9 GiB left and the floor is 9 GiB: the preflight passes (the profile says it needs 3 GiB: its
    real sizes are not on a fresh worker yet), the guard has nothing to do (not under the floor), but what the rank
    still has to load would take it under: the launch watch stops the launch, names memory.overshoot, and tears it
    down. (slow-load: the stand-in's rank loads for about 40 s instead of an instant, so the watch sees it loading.)"""
    data = yaml.safe_load(Path(stopped.inventory).read_text())
    data["memory_guard"] = {"floor_gib": 9}
    data.setdefault("models", {})["qwen3-235b"] = {"target_gib": 2, "draft_gib": 1, "headroom_gib": 1}
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(data))
    stopped.fault("memory-low", node="spark-b", gib=9)
    stopped.fault("slow-load", node="spark-b")
    try:
        run = run_sparkpair(inventory, "launch", "--timeout", "120")
    finally:
        stopped.heal("memory-low")
        stopped.heal("slow-load")
    assert run.code == 1, run.text
    assert "the load will overshoot the memory floor on spark-b: MemAvailable 9.0 GiB now and " in run.err
    assert "cause memory.overshoot" in run.err and "docs/runbooks.md#memory-overshoot" in run.err
    assert "(seen: spark-b)" in run.err
    for node in ("spark-a", "spark-b"):
        assert "trtllm-multinode" not in _containers(stopped, node) and _guards(stopped, node) == ""


def test_a_newer_catalog_naming_a_nodes_kernel_stops_doctor_launch_and_setup_network(stopped, sparkpair,
                                                                                       tmp_path: Path) -> None:
    """`--catalog FILE`: sparkpair's catalog with one more entry (hand-made for this test) naming the kernel spark-b
    reports under the kernel-string fault: doctor FAILs spark-b's known.* row, launch starts nothing and setup-network
    refuses before any change; spark-a is not named."""
    data = json.loads((Path(__file__).resolve().parents[2] / "sparkpair" / "data" / "known_bad.json").read_text())
    data["entries"].append({"id": "kernel-under-test", "component": "kernel", "versions": {"is": ["6.11.0-1099"]},
                            "severity": "FAIL", "symptom": "a kernel this test names as known-bad",
                            "fix": "boot another kernel", "sources": [{"url": "https://github.com/example/issues/1",
                                                                     "date": "2026-09-20"}]})
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps(data))
    stopped.fault("kernel-string", node="spark-b")
    try:
        doctor = sparkpair("doctor", "--json", "--only", "known", "--catalog", str(catalog))
        rows = {(row["check"], row["node"]): row for row in json.loads(doctor.out)["findings"]}
        assert doctor.code == 1 and rows[("known.kernel-under-test", "spark-b")]["status"] == "FAIL", doctor.text
        assert ("known.kernel-under-test", "spark-a") not in rows
        assert rows[("known.catalog", "spark-a")]["detail"].startswith(f"{catalog} catalog of 2026-09-20, 6 entries")
        launch = sparkpair("launch", "--timeout", "60", "--catalog", str(catalog))
        assert launch.code == 1 and "known.kernel-under-test" in launch.out, launch.text
        assert "launch-critical check(s) FAIL; nothing was started" in launch.err
        setup = sparkpair("setup-network", "--dry-run", "--catalog", str(catalog))
        assert setup.code == 1 and "spark-b: known.kernel-under-test: kernel 6.11.0-1099-nvidia-drifted" in setup.text
        assert sparkpair("doctor", "--only", "known").code == 0   # sparkpair's own catalog: nothing applies here
    finally:
        stopped.heal("kernel-string")
    for node in ("spark-a", "spark-b"):
        assert "trtllm-multinode" not in _containers(stopped, node)
