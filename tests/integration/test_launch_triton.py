"""sparkpair on the real Triton Inference Server (2.51, with the stand-in vllm backend: the testbed's
triton_image/NOTES.md) across the simulated pair: `launch qwen3-235b --runtime triton` renders the model
repository, starts tritonserver on the head (its vLLM engine rank 0) and `vllm serve --headless` on the worker
(rank 1), TP=2 with the Eagle3 draft, then status, bench (no acceptance: Triton reports none), logs, Triton's own
endpoints and metrics port, stop.

One start is shared by the module (`served`). The profile runs in eager mode here (the vLLM backend's own sample
model.json does too): torch.compile would add about two minutes of two cores to the start and proves nothing
about sparkpair.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import bundle_contents, ensure_networked, run_sparkpair

pytestmark = pytest.mark.integration

TARGET = "Qwen/Qwen3-235B-A22B-GPTQ-Int4"
MODEL = "Qwen--Qwen3-235B-A22B-GPTQ-Int4"   # its name in Triton's model repository
CONTAINER = "triton-multinode"
SERVING_PORT, METRICS_PORT = 8355, 8002
LAUNCH = ("launch", "qwen3-235b", "--runtime", "triton", "--timeout", "900")
EAGER = {"models": {"qwen3-235b": {"variants": {"triton": {"serve_args": {
    "max_model_len": 8192, "gpu_memory_utilization": 0.85, "max_num_seqs": 4, "enforce_eager": True}}}}}}


def _containers(bed, node: str) -> str:
    return bed.exec(node, "docker ps -a --format '{{.Names}} {{.Status}}'").stdout


def _http(bed, method: str, path: str, body: dict | None = None, port: int = SERVING_PORT) -> tuple[int, str]:
    """One request from the head itself (status, body)."""
    data = f"-H 'Content-Type: application/json' -d '{json.dumps(body)}'" if body is not None else ""
    out = bed.exec("spark-a", f"curl -s -m 60 -w '\\n%{{http_code}}' -X {method} {data} "
                              f"http://127.0.0.1:{port}{path}", check=False).stdout
    text, _, status = out.rpartition("\n")
    return int(status or 0), text


def _metric(text: str, name: str) -> float:
    match = re.search(rf'^{re.escape(name)}{{model="{MODEL}",version="1"}} ([0-9.e+-]+)$', text, re.M)
    assert match, f"{name} not on the metrics port"
    return float(match.group(1))


@pytest.fixture(scope="module")
def served(testbed, testbed_triton, tmp_path_factory):
    """One Triton start across both nodes for the module's tests (eager: EAGER); stopped at the end."""
    ensure_networked(testbed)
    data = yaml.safe_load(Path(testbed.inventory).read_text()) | EAGER
    inventory = tmp_path_factory.mktemp("triton") / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(data))
    run_sparkpair(inventory, "stop")
    run = run_sparkpair(inventory, *LAUNCH, timeout=1200)
    yield testbed, inventory, run
    run_sparkpair(inventory, "stop")


def test_launch_reaches_serving_at_tp2_with_rank_0_inside_triton(served) -> None:
    bed, _, run = served
    assert run.code == 0, run.text
    assert "tritonserver --model-repository" in run.err and "--load-model " + MODEL in run.err
    assert "--node-rank 1" in run.err and "--headless" in run.err and '"method":"eagle3"' in run.err
    for node in ("spark-a", "spark-b"):
        assert f"{CONTAINER} Up" in _containers(bed, node)
    head = bed.exec("spark-a", f"docker exec {CONTAINER} cat /var/log/sparkpair/serve.log").stdout
    worker = bed.exec("spark-b", f"docker exec {CONTAINER} cat /var/log/sparkpair/serve.log").stdout
    assert f"successfully loaded '{MODEL}'" in head and "world_size=2 rank=0" in head
    assert "world_size=2 rank=1" in worker and "headless multiproc executor" in worker
    model_json = json.loads(bed.exec("spark-a", f"cat ~/.sparkpair/config/model_repository/{MODEL}/1/model.json",
                                     user="nvidia").stdout)
    assert model_json["nnodes"] == 2 and model_json["node_rank"] == 0 and model_json["enforce_eager"] is True
    state = json.loads(bed.exec("spark-a", "cat ~/.sparkpair/state/launch.json", user="nvidia").stdout)
    assert state["runtime"] == "triton" and state["nodes"] == ["spark-a", "spark-b"]


def test_status_says_serving_through_tritons_endpoints(served) -> None:
    bed, inventory, _ = served
    run = run_sparkpair(inventory, "status", "--json")
    status = json.loads(run.out)
    assert run.code == 0 and status["state"] == "serving", run.text
    assert status["model"] == TARGET and status["generation"].startswith("ok")
    assert all(node["ranks_alive"] > 0 for node in status["nodes"].values())
    assert status["requests"] and status["requests"] >= 1   # nv_inference_request_success on the metrics port


def test_the_model_is_the_vllm_backends_and_streams_server_sent_events(served) -> None:
    bed, _, _ = served
    status, text = _http(bed, "GET", f"/v2/models/{MODEL}/config")
    config = json.loads(text)
    assert status == 200 and config["backend"] == "vllm" and config["model_transaction_policy"]["decoupled"]
    status, text = _http(bed, "POST", f"/v2/models/{MODEL}/generate_stream", {
        "text_input": "Two nodes", "parameters": {"stream": True, "temperature": 0, "max_tokens": 48,
                                                  "ignore_eos": True, "return_num_output_tokens": True}})
    # vLLM hands the backend whatever tokens are new when it asks, so a loaded machine can get a short generation
    # in one event (8 tokens came as one, once): 48 tokens take a dozen or more engine steps, never one event
    events = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
    assert status == 200 and len(events) >= 2, text
    assert sum(event["num_output_tokens"] if isinstance(event["num_output_tokens"], int)
               else event["num_output_tokens"][0] for event in events) == 48


def test_bench_measures_through_generate_stream_and_says_acceptance_is_not_reported(served, tmp_path: Path) -> None:
    bed, inventory, _ = served
    before = _http(bed, "GET", "/metrics", port=METRICS_PORT)[1]
    run = run_sparkpair(inventory, "bench", "qwen3-235b", "--concurrency", "1", "--requests", "2",
                        "--max-tokens", "16", "--out", str(tmp_path), "--json", timeout=600)
    assert run.code == 0, run.text
    record = json.loads((tmp_path / "results.json").read_text())
    assert record["provenance"]["runtime"] == "triton" and record["provenance"]["target"] == TARGET
    row = record["rows"][0]
    assert row["requests"] - row["errors"] == 2 and row["output_tokens"] == 32   # num_output_tokens summed
    # Neither Triton's metrics port nor the log shows draft acceptance (the backend never asks vLLM to log its
    # stats): bench leaves it empty and says so.
    assert row["acceptance_rate"] is None and "Triton's vLLM backend does not report" in run.text
    after = _http(bed, "GET", "/metrics", port=METRICS_PORT)[1]
    # one warm-up and two measured requests, each one inference
    assert _metric(after, "nv_inference_request_success") == _metric(before, "nv_inference_request_success") + 3
    assert "vllm:generation_tokens_total" in after and "vllm:spec_decode" not in after
    head = bed.exec("spark-a", f"docker exec {CONTAINER} cat /var/log/sparkpair/serve.log").stdout
    assert "SpecDecoding metrics" not in head


def test_logs_show_each_nodes_rank(served) -> None:
    _, inventory, _ = served
    run = run_sparkpair(inventory, "logs", "--tail", "5000")
    assert run.code == 0 and "==> spark-a (rank 0) <==" in run.out and "==> spark-b (rank 1) <==" in run.out
    assert "world_size=2 rank=0" in run.out and "world_size=2 rank=1" in run.out
    assert "Started HTTPService at 0.0.0.0:8355" in run.out


def test_the_lock_holds_the_model_repository_diff_finds_nothing_and_the_bundle_holds_both(served, tmp_path: Path) -> None:
    """lock, diff and bundle as for the other runtimes: launch wrote the lock beside the inventory, with Triton's image
    and the rendered model repository's files; nothing drifted since; the bundle holds both ranks' logs and the lock."""
    _, inventory, _ = served
    lock = inventory.parent / "sparkpair.lock"
    held = lock.read_text()
    assert '"runtime": "triton"' in held and "tritonserver-vllm-cpu" in held
    assert f"model_repository/{MODEL}/1/model.json" in held and f"model_repository/{MODEL}/config.pbtxt" in held
    diff = run_sparkpair(inventory, "diff", "--lock", lock)
    assert diff.code == 0, diff.text
    names, text = bundle_contents(inventory, tmp_path / "bundle.tar.gz", lock)
    assert {"sparkpair.lock", "diff-lock.json"} <= names
    assert "world_size=2 rank=1" in text and "Started HTTPService at 0.0.0.0:8355" in text   # both ranks' logs


def test_stop_leaves_nothing_running(served) -> None:
    bed, inventory, _ = served
    run = run_sparkpair(inventory, "stop")
    assert run.code == 0, run.text
    for node in ("spark-a", "spark-b"):
        assert CONTAINER not in _containers(bed, node)
    assert json.loads(run_sparkpair(inventory, "status", "--json").out)["state"] == "stopped"
