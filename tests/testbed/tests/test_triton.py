"""The real Triton Inference Server (2.51, with the stand-in vllm backend: triton_image/NOTES.md) on the simulated
pair in seed 003's shape at TP=2 across both nodes: on spark-a `tritonserver --model-repository R
--model-control-mode explicit --load-model eagle_model`, whose model.json makes the vLLM engine inside Triton's
Python backend rank 0 of vLLM's native multi-node start (nnodes 2, master on the cabled QSFP twin); on spark-b the
same image's `vllm serve --headless --node-rank 1`, as the vLLM runtime's worker runs. The tiny Qwen3-MoE target
with its Eagle3 draft.

One start is shared by the module (a few minutes on two cores); its timings are printed (pytest -s).
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

import pytest
from sparkpair_testbed import triton_image, triton_serve, vllm_serve
from sparkpair_testbed.hostexec import CommandError, node_run
from sparkpair_testbed.layout import HEAD, USER, WORKER

pytestmark = pytest.mark.integration

START_TIMEOUT = 1200
MODEL = triton_serve.MODEL
STAGES = ("loading: eagle_model:1", "TRITONBACKEND_ModelInstanceInitialize: eagle_model_0_0 (MODEL device 0)",
          "successfully loaded 'eagle_model'", "Started GRPCInferenceService at 0.0.0.0:8001",
          "Started HTTPService at 0.0.0.0:8000", "Started Metrics Service at 0.0.0.0:8002")


@dataclass
class Started:
    """The shared start: the worker's vllm serve, and how long each step took (seconds)."""

    worker: vllm_serve.Serving
    timings: dict


@pytest.fixture(scope="module")
def triton_tp2(testbed, testbed_triton, tmp_path_factory):
    """Triton on the head with the model loaded, rank 1 on the worker (both removed after)."""
    worker = None
    timings = {}
    try:
        vllm_serve.configure_links()
        vllm_serve.copy_models(HEAD, WORKER)
        triton_serve.write_repository(triton_serve.engine_args(0))
        begin = time.monotonic()
        worker = triton_serve.start_worker(tmp_path_factory.mktemp("triton") / "worker.log")
        started = triton_serve.start_head()
        timings["containers"] = time.monotonic() - begin
        timings["ready"] = triton_serve.wait_ready(started, START_TIMEOUT)
        print(f"\nTriton TP=2 + Eagle3 timings (s): {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
        yield Started(worker, timings)
    except CommandError as exc:
        pytest.fail(str(exc))
    finally:
        logs = tmp_path_factory.mktemp("triton-logs")
        (logs / "head.log").write_text(triton_serve.head_log())
        print(f"\nTriton's log (head) and the worker's: {logs / 'head.log'}, {worker.logs[WORKER.name] if worker else '-'}")
        triton_serve.stop(worker)
        vllm_serve.remove_models(WORKER)
        vllm_serve.release_links()
        testbed.since_reset.clear()  # the twins are bare again: whatever a fixture set up there is gone


def test_the_image_holds_tritonserver_its_python_backend_and_the_stand_in_vllm_backend(testbed_triton):
    probe = ("tritonserver --help 2>&1 | head -1; ls /opt/tritonserver/backends/python /opt/tritonserver/backends/vllm; "
             "python -c \"import numpy, vllm, sys; print(numpy.__version__, vllm.__version__, sys.version_info[:2])\"")
    out = node_run(WORKER, ["docker", "run", "--rm", "--network", "none", triton_image.TRITON_IMAGE_TAG, "sh", "-c",
                            probe], user=USER, timeout=120).stdout.split()
    assert out[:2] == ["Usage:", "tritonserver"]
    assert {"libtriton_python.so", "triton_python_backend_stub", "triton_python_backend_utils.py", "model.py",
            "stat_logger.py"} <= set(out)
    assert out[-4:-2] == ["1.26.4", "0.32.0"] and out[-2:] == ["(3,", "11)"]  # numpy < 2; vllm.__version__; Python 3.11
    assert testbed_triton.image == triton_image.TRITON_IMAGE_TAG and testbed_triton.image_id.startswith("sha256:")


def test_server_and_model_are_ready_and_the_model_is_the_vllm_backends(triton_tp2):
    assert triton_serve.http("GET", "/v2/health/ready")[0] == 200
    assert triton_serve.http("GET", f"/v2/models/{MODEL}/ready")[0] == 200
    status, text = triton_serve.http("GET", f"/v2/models/{MODEL}/config")
    config = json.loads(text)
    assert status == 200 and config["backend"] == "vllm" and config["model_transaction_policy"]["decoupled"]
    assert {tensor["name"] for tensor in config["input"]} >= {"text_input", "stream", "sampling_parameters",
                                                              "exclude_input_in_output"}
    assert [tensor["name"] for tensor in config["output"]][0] == "text_output"
    log = triton_serve.head_log()
    positions = [log.find(stage) for stage in STAGES]
    assert -1 not in positions and positions == sorted(positions), dict(zip(STAGES, positions))


def test_generate_answers_through_rank_0_inside_triton_and_rank_1_on_the_worker(triton_tp2):
    status, text = triton_serve.http("POST", f"/v2/models/{MODEL}/generate", {
        "text_input": "Hello spark pair", "parameters": {"stream": False, "temperature": 0, "max_tokens": 12}})
    answer = json.loads(text)
    assert status == 200 and answer["model_name"] == MODEL and answer["model_version"] == "1", text
    assert answer["text_output"].startswith("Hello spark pair") and len(answer["text_output"]) > len("Hello spark pair")
    init = f"distributed_init_method=tcp://{vllm_serve.qsfp_ip(HEAD)}:{vllm_serve.MASTER_PORT} backend=gloo"
    assert re.search(rf"world_size=2 rank=0 local_rank=0 {re.escape(init)}", triton_serve.head_log())
    assert f"world_size=2 rank=1 local_rank=0 {init}" in triton_tp2.worker.text(WORKER)
    assert triton_tp2.worker.alive(WORKER) and triton_serve.head_running()


def test_generate_stream_sends_the_new_text_in_server_sent_events(triton_tp2):
    status, text = triton_serve.http("POST", f"/v2/models/{MODEL}/generate_stream", {
        "text_input": "Two nodes", "parameters": {"stream": True, "temperature": 0, "max_tokens": 8,
                                                  "ignore_eos": True}})
    events = triton_serve.events(text)
    assert status == 200 and len(events) >= 2, text
    assert all(event["model_name"] == MODEL for event in events)
    assert not "".join(event["text_output"] for event in events).startswith("Two nodes")


def metric(text: str, name: str, labels: str) -> float:
    """The value of NAME{LABELS} in Prometheus TEXT."""
    match = re.search(rf"^{re.escape(name)}{{{re.escape(labels)}}} ([0-9.e+-]+)$", text, re.M)
    assert match, f"{name}{{{labels}}} not on the metrics port"
    return float(match.group(1))


def test_the_metrics_port_counts_inferences_and_the_vllm_backends_own_counters(testbed, triton_tp2):
    before = triton_serve.http("GET", "/metrics", port=triton_serve.METRICS_PORT)[1]
    labels = f'model="{MODEL}",version="1"'
    status, text = triton_serve.http("POST", f"/v2/models/{MODEL}/generate", {
        "text_input": "Metrics", "parameters": {"temperature": 0, "max_tokens": 6, "ignore_eos": True}})
    assert status == 200, text
    generated = metric(before, "vllm:generation_tokens_total", labels) + 6

    def counted() -> str:  # vLLM's stats reach Triton through the backend's queue, just after the response
        text = triton_serve.http("GET", "/metrics", port=triton_serve.METRICS_PORT)[1]
        return text if metric(text, "vllm:generation_tokens_total", labels) >= generated else ""

    after = testbed.wait_until(counted, 30, "vllm:generation_tokens_total to count the 6 new tokens", interval=0.5)
    assert metric(after, "nv_inference_request_success", labels) == metric(before, "nv_inference_request_success",
                                                                           labels) + 1
    assert metric(after, "nv_inference_count", labels) >= 1
    assert "vllm:time_to_first_token_seconds_count" in after
    assert "vllm:spec_decode" not in after  # the vLLM backend reports no speculative-decoding counters
