"""sparkpair on the real vLLM (its CPU build) across the simulated pair: TP=2 over both nodes with the Eagle3
draft, then status, bench, a second launch, stop; and real faults named by launch and by diagnose.

Each vLLM start takes a minute or more here, so the healthy start is shared by the module (`served`) and
the faults are few and chosen to fail early. `testbed_vllm` puts the image in both nodes' engines and the
tiny target and draft in the head's HF cache (scripts/testbed vllm). The module's profile gives vLLM an API key
(`serve_args.api_key`, issue 33 item 5): every test here talks to an engine that refuses requests without it, and
one searches both nodes for the key.
"""

from __future__ import annotations

import json
import tarfile
import uuid
from pathlib import Path

import pytest
import yaml
from conftest import WithInventory, engine_cache_files, ensure_networked, run_sparkpair, variant_inventory

TARGET = "Qwen/Qwen3-235B-A22B-GPTQ-Int4"
CONTAINER = "vllm-multinode"
RAY_IMAGE = "sparkpair/vllm-cpu-ray:0.32.0"  # the vLLM image with Ray, as NVIDIA's playbook installs it
LAUNCH = ("launch", "qwen3-235b", "--runtime", "vllm", "--timeout", "900")
API_KEY = f"sk-canary-{uuid.uuid4().hex[:16]}"   # never on a command line here either: searched with grep -f
KEY_FILE = "/home/nvidia/.sparkpair/secrets/VLLM_API_KEY"
NODES = ("spark-a", "spark-b")


def _containers(bed, node: str) -> str:
    return bed.exec(node, "docker ps -a --format '{{.Names}} {{.Status}}'").stdout


def _variant(bed, tmp_path: Path, changes: dict) -> Path:
    """The pair's inventory with changes merged in (nested mappings merged key by key)."""
    return variant_inventory(bed.inventory, tmp_path, changes)


@pytest.fixture(scope="module")
def served(testbed, testbed_vllm, tmp_path_factory):
    """One vLLM start across both nodes for the module's tests, with an API key; stopped at the end. Eager, as every
    real-vLLM start of the suite: on this CPU build torch.compile's Dynamo trace and Inductor C++ took 55-64 s of the
    start (124 s cold against about 60) and prove vLLM's compiler, not sparkpair; on a Spark the compiled path is
    CUDA graphs, which no CPU exercises. Every serve argument of the profile is checked against vllm_serve.json, which
    test_the_serve_definitions_sparkpair_checks_against_are_the_real_vllms proves is the real vLLM's."""
    ensure_networked(testbed)
    keyed = WithInventory(testbed, _variant(testbed, tmp_path_factory.mktemp("keyed"), {"models": {"qwen3-235b": {
        "variants": {"vllm": {"serve_args": {"api_key": API_KEY, "enforce_eager": True}}}}}}))
    run_sparkpair(keyed.inventory, "stop")
    run = run_sparkpair(keyed.inventory, *LAUNCH, timeout=1200)
    yield keyed, run
    run_sparkpair(keyed.inventory, "stop")
    for node in NODES:
        testbed.exec(node, f"rm -f {KEY_FILE}")


@pytest.fixture(scope="module")
def first_inspections(served):
    """vLLM's model inspections on each node's engine-cache volume once the module's first start serves."""
    bed, _ = served
    return {node: engine_cache_files(bed, node, ("*/modelinfos/*",)) for node in NODES}


@pytest.mark.usefixtures("first_inspections")  # taken here, before any later start of the module can touch them
def test_launch_reaches_ready_at_tp2_across_both_nodes_with_the_draft(served) -> None:
    bed, run = served
    assert run.code == 0, run.text
    assert "--node-rank 1" in run.err and "--headless" in run.err and '"method":"eagle3"' in run.err
    for node in ("spark-a", "spark-b"):
        assert f"{CONTAINER} Up" in _containers(bed, node)
    worker = bed.exec("spark-b", f"docker exec {CONTAINER} cat /var/log/sparkpair/serve.log").stdout
    assert "world_size=2 rank=1" in worker and "backend=gloo" in worker  # the worker is rank 1 of the TP group
    state = json.loads(bed.exec("spark-a", "cat ~/.sparkpair/state/launch.json", user="nvidia").stdout)
    assert state["runtime"] == "vllm" and state["nodes"] == ["spark-a", "spark-b"]


def test_status_says_serving_and_shows_the_draft_counters(served) -> None:
    bed, _ = served
    run = run_sparkpair(bed.inventory, "status", "--json")
    status = json.loads(run.out)
    assert run.code == 0 and status["state"] == "serving", run.text
    assert status["model"] == TARGET and status["generation"].startswith("ok")
    assert all(node["ranks_alive"] > 0 for node in status["nodes"].values())
    # vllm:spec_decode_num_draft_tokens_total and ..._accepted_tokens_total as the real server prints them: a
    # random draft proposes tokens and the target accepts few, so the rate is a number, not absent.
    assert status["acceptance_rate"] is not None and 0.0 <= status["acceptance_rate"] <= 1.0
    assert status["requests"] and status["requests"] >= 1


def test_bench_runs_against_it(served, tmp_path: Path) -> None:
    bed, _ = served
    run = run_sparkpair(bed.inventory, "bench", "qwen3-235b", "--concurrency", "1", "--requests", "2",
                        "--max-tokens", "8", "--out", str(tmp_path), "--json", timeout=600)
    assert run.code == 0, run.text
    record = json.loads((tmp_path / "results.json").read_text())
    assert record["provenance"]["runtime"] == "vllm" and record["provenance"]["target"] == TARGET
    row = record["rows"][0]
    assert row["requests"] - row["errors"] >= 1 and row["output_tokens"] >= 1
    assert row["draft_tokens"] and row["acceptance_rate"] is not None  # from vLLM's spec-decode counters


def test_a_second_launch_with_nothing_changed_downloads_and_copies_nothing(served) -> None:
    bed, _ = served
    run = run_sparkpair(bed.inventory, *LAUNCH, timeout=600)
    assert run.code == 0, run.text
    assert "already running with this configuration" in run.text
    assert "copying" not in run.text and "download" not in run.text.lower()


def test_the_serve_definitions_sparkpair_checks_against_are_the_real_vllms(served) -> None:
    """sparkpair/data/vllm_serve.json is what scripts/vllm_schema/derive.py derives from the vLLM in the image."""
    bed, _ = served
    root = Path(__file__).resolve().parents[2]
    for name, source in (("derive.py", root / "scripts/vllm_schema/derive.py"),
                         ("vllm_serve.json", root / "sparkpair/data/vllm_serve.json")):
        put = bed.exec("spark-a", f"docker exec -i {CONTAINER} sh -c 'cat > /tmp/{name}' <<'SPARKPAIR_EOF'\n"
                                  f"{source.read_text()}SPARKPAIR_EOF\n", check=False)
        assert put.returncode == 0, put.stderr
    check = bed.exec("spark-a", f"docker exec {CONTAINER} python3 /tmp/derive.py --check --out /tmp/vllm_serve.json",
                     check=False, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "matches vLLM 0.32.0" in check.stdout


def test_logs_show_each_nodes_rank(served) -> None:
    bed, _ = served
    run = run_sparkpair(bed.inventory, "logs", "--tail", "5000")
    assert run.code == 0 and "==> spark-a (rank 0) <==" in run.out and "==> spark-b (rank 1) <==" in run.out
    assert "world_size=2 rank=0" in run.out and "world_size=2 rank=1" in run.out


def _key_leaks(bed) -> list[str]:
    """Where on the nodes the key appears: a command line, ps, docker inspect, a container's logs or log files, any
    file but its own and the operator's inventory (in /tmp and /var/tmp: those of the last hour); and any process
    outside the engine containers holding it in its environment (only vLLM's own, in the container, may: it reads
    the key from there)."""
    engines = " ".join(bed.exec(node, f"readlink /proc/$(docker inspect -f '{{{{.State.Pid}}}}' {CONTAINER})/ns/mnt"
                                ).stdout.strip() for node in NODES)
    found = []
    for node in NODES:
        search = bed.exec(node, f"""
            k={KEY_FILE}
            test -s $k || {{ echo "NO KEY FILE"; exit 0; }}
            grep -lsF -f $k /proc/[0-9]*/cmdline | sed 's/^/command line: /'
            ps -eww -o args | grep -sF -f $k | sed 's/^/ps: /'
            for p in $(grep -lsF -f $k /proc/[0-9]*/environ); do
              d=${{p%/environ}}; case " {engines} " in *" $(readlink $d/ns/mnt) "*) ;;
                *) echo "environment outside the engine containers: $(tr '\\0' ' ' < $d/cmdline | head -c 120)";; esac
            done
            for c in $(docker ps -aq); do
              docker inspect $c | grep -sqF -f $k && echo "docker inspect: $c"
              docker logs $c 2>&1 | grep -sqF -f $k && echo "docker logs: $c"
              docker exec $c sh -c 'cat /var/log/sparkpair/* 2>/dev/null' | grep -sqF -f $k && echo "logs in $c"
            done
            {{ grep -rlsF -D skip -f $k /home /root /etc /var/log
               find /tmp /var/tmp -xdev -type f -mmin -60 -exec grep -lsF -f $k {{}} +; }} \\
              | grep -vxF -e $k -e {bed.inventory} | sed 's/^/file: /'
            true
        """, timeout=300)
        found += [f"{node}: {line}" for line in search.stdout.splitlines() if line.strip()]
    return found


def test_the_api_key_reaches_vllm_from_its_file_and_nowhere_else(served, tmp_path: Path) -> None:
    bed, run = served
    assert API_KEY not in run.text and "--api-key" not in run.text
    assert _key_leaks(bed) == []
    state = bed.exec("spark-a", "cat ~/.sparkpair/state/launch.json", user="nvidia").stdout
    assert API_KEY not in state
    for node in NODES:  # a private file on each node; what `ps` shows of the serve command: the file, not the value
        assert bed.exec(node, f"stat -c %a {KEY_FILE}").stdout.strip() == "600", node
        args = bed.exec(node, "ps -eww -o args").stdout
        assert "/sparkpair/secrets/VLLM_API_KEY" in args and API_KEY not in args and "--api-key" not in args, node
    port = yaml.safe_load(Path(bed.inventory).read_text())["server"]["port"]
    asked = bed.exec("spark-a", f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/v1/models; echo; "
                                f"curl -s -o /dev/null -w '%{{http_code}}' -H \"Authorization: Bearer $(cat {KEY_FILE})\" "
                                f"http://127.0.0.1:{port}/v1/models").stdout.split()
    assert asked == ["401", "200"], asked  # the engine wants the key; sparkpair's own requests carry it
    chat = json.loads(bed.exec("spark-a", f"curl -s -m 120 -H \"Authorization: Bearer $(cat {KEY_FILE})\" -H "
                                          "'Content-Type: application/json' -d '{\"model\": \"" + TARGET + "\", "
                                          "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 4}' "
                                          f"http://127.0.0.1:{port}/v1/chat/completions").stdout)
    assert chat["choices"][0]["message"]["role"] == "assistant", chat   # the target's chat template, across TP=2
    for command in (("status",), ("logs", "--tail", "5000"), ("inventory", "show")):
        shown = run_sparkpair(bed.inventory, "-vv", *command)
        assert shown.code == 0 and API_KEY not in shown.text, command
    bundled = run_sparkpair(bed.inventory, "bundle", "--out", str(tmp_path / "b.tar.gz"), timeout=600)
    assert bundled.code == 0, bundled.text
    with tarfile.open(tmp_path / "b.tar.gz") as archive:
        for member in archive.getmembers():
            data = archive.extractfile(member)
            assert data is None or API_KEY.encode() not in data.read(), member.name


GUARD_LINE = "stopped by the memory guard on spark-b: MemAvailable 2.8 GiB < 4 GiB floor, pressure full avg10 41%"


def _image(bed) -> str:
    """The vLLM image the pair's inventory names (its `vllm.image`)."""
    return yaml.safe_load(Path(bed.inventory).read_text())["vllm"]["image"]


def _guards(bed, node: str) -> str:
    """The memory guard processes running in a node (pgrep's lines; empty when none runs)."""
    return bed.exec(node, "pgrep -af '[m]emguard.py' || true").stdout


def test_the_memory_guard_stops_the_served_vllm_when_a_nodes_memory_runs_out(served) -> None:
    """The last test of the served engine: spark-b's memory figures fall while the real vLLM serves; spark-b's
    guard stops its engine container, status and logs --diagnose say why, nothing else on the node is touched."""
    bed, _ = served
    for node in ("spark-a", "spark-b"):
        assert "memguard.py" in _guards(bed, node)
    bystander = "memguard-bystander"
    bed.exec("spark-b", f"docker rm -f {bystander} >/dev/null 2>&1; "
                        f"docker run -d --name {bystander} --entrypoint sleep {_image(bed)} 600")
    try:
        bed.fault("memory-exhausted", node="spark-b")
        status = bed.wait_until(lambda: (lambda run: run if json.loads(run.out).get("memory_guard") and json.loads(
            run.out)["nodes"]["spark-b"]["container"] == "exited" else None)(
            run_sparkpair(bed.inventory, "status", "--json")), 90, "status to name the memory guard's stop")
        data = json.loads(status.out)
        assert status.code == 1 and data["state"] == "degraded" and data["memory_guard"] == [GUARD_LINE], data
        assert data["reason"].startswith(GUARD_LINE) and data["nodes"]["spark-b"]["container"] == "exited"
        assert data["nodes"]["spark-a"]["container"] == "running"
        assert f"{bystander} Up" in _containers(bed, "spark-b") and "memguard.py" not in _guards(bed, "spark-b")
        diagnosed = run_sparkpair(bed.inventory, "logs", "--diagnose")
        assert diagnosed.code == 1 and diagnosed.out.startswith("1. memory.guard: the memory guard stopped"), \
            diagnosed.text
    finally:
        bed.heal("memory-exhausted")
        bed.exec("spark-b", f"docker rm -f {bystander} >/dev/null 2>&1 || true")


def test_stop_leaves_nothing_running(served) -> None:
    bed, _ = served
    run = run_sparkpair(bed.inventory, "stop")
    assert run.code == 0, run.text
    assert "memory guard ended (pid" in run.out  # spark-a's: spark-b's ended once it stopped its engine
    for node in ("spark-a", "spark-b"):
        assert CONTAINER not in _containers(bed, node) and _guards(bed, node) == ""
    assert json.loads(run_sparkpair(bed.inventory, "status", "--json").out)["state"] == "stopped"


# --- real faults on the real engine: named by launch's failure report and by diagnose from the saved logs ---

def _diagnosed_from_saved_logs(bed) -> list[str]:
    """The causes `sparkpair diagnose` names from the failed launch's logs kept on the head."""
    text = bed.exec("spark-a", "cat ~/.sparkpair/logs/failed-launch/*.log", user="nvidia").stdout
    run = run_sparkpair(bed.inventory, "diagnose", "--json", "-", input_text=text)
    return [item["cause"] for item in json.loads(run.out)["findings"]]


@pytest.mark.parametrize(("changes", "cause"), [
    ({"vllm": {"env": {"GLOO_SOCKET_IFNAME": "enp9s9f9np9"}}}, "fabric.interface"),
    ({"models": {"qwen3-235b": {"variants": {"vllm": {"serve_args": {"max_model_len": 1048576,
                                                                                 "enforce_eager": True}}}}},
      "vllm": {"env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}}}, "memory.kvcache"),
], ids=["gloo-interface", "kv-cache"])
def test_a_real_fault_is_named_by_launch_and_by_diagnose(served, tmp_path: Path, changes: dict, cause: str) -> None:
    bed, _ = served
    run_sparkpair(bed.inventory, "stop")
    inventory = _variant(bed, tmp_path, changes)
    run = run_sparkpair(inventory, *LAUNCH[:-1], "300", timeout=900)
    assert run.code == 1, run.text
    assert f"cause {cause}" in run.err and f"docs/runbooks.md#{cause.replace('.', '-')}" in run.err
    assert cause in _diagnosed_from_saved_logs(bed)
    for node in ("spark-a", "spark-b"):
        assert CONTAINER not in _containers(bed, node)  # the failed launch was torn down


def test_the_later_starts_loaded_the_model_inspections_the_first_start_made(served, first_inspections) -> None:
    """The engine-cache volume outlives the container: the faults' starts read vLLM's inspections of the target and
    the draft (about 10 s each in a subprocess otherwise) from it instead of redoing and rewriting them."""
    bed, _ = served
    assert any(path.endswith("Qwen3MoeForCausalLM.json") for path in first_inspections["spark-a"]), first_inspections
    assert {node: engine_cache_files(bed, node, ("*/modelinfos/*",)) for node in NODES} == first_inspections


def test_the_serving_port_taken_is_named(served, tmp_path: Path) -> None:
    bed, _ = served
    run_sparkpair(bed.inventory, "stop")
    bed.fault("port-busy", node="spark-a", port=8355)
    run = run_sparkpair(bed.inventory, *LAUNCH[:-1], "300", timeout=900)
    assert run.code == 1, run.text
    assert "ports.serving" in run.text and "8355" in run.text and "nothing was started" in run.err


def test_ray_mode_forms_the_cluster_and_reports_the_cpu_builds_refusal(served, tmp_path: Path) -> None:
    bed, _ = served
    run_sparkpair(bed.inventory, "stop")
    inventory = _variant(bed, tmp_path, {"vllm": {"multinode": "ray", "image": RAY_IMAGE}})
    run = run_sparkpair(inventory, *LAUNCH[:-1], "300", "--keep-on-failure", timeout=900)
    assert run.code == 1, run.text
    assert "ray start" in run.err and "the Ray cluster has 2 nodes" in run.err   # formed over both nodes
    assert "cause engine.ray" in run.err and "does not support ray" in run.err
    status = json.loads(run_sparkpair(inventory, "status", "--json").out)     # kept: the cluster is still there
    assert status["runtime"] == "vllm" and status["cluster"] == "ray: 2 nodes" and status["state"] != "serving"
    assert run_sparkpair(inventory, "stop").code == 0
    for node in ("spark-a", "spark-b"):
        assert CONTAINER not in _containers(bed, node)


def test_without_ray_in_the_image_ray_mode_says_so_in_one_line(served, tmp_path: Path) -> None:
    bed, _ = served
    run_sparkpair(bed.inventory, "stop")
    inventory = _variant(bed, tmp_path, {"vllm": {"multinode": "ray"}})  # the image without Ray, like NVIDIA's
    run = run_sparkpair(inventory, *LAUNCH[:-1], "300", timeout=900)
    assert run.code == 1 and "nothing was started" in run.err, run.text
    assert "docker.image-mode" in run.out and "has no ray on its PATH" in run.out   # doctor asked the image
