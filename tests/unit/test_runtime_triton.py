"""The triton runtime (Triton Inference Server's vLLM backend): its model repository and worker command agree
key by key, model.json keys are checked against vLLM's own engine arguments, its API reads Triton's answers,
bench counts Triton's per-event tokens, doctor checks its three ports, and the recorded Triton start reaches its
serving stage."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from sparkpair.bench import client
from sparkpair.engine import diagnose, stages
from sparkpair.inventory import read_inventory as load
from sparkpair.jsonfields import Field
from sparkpair.runtimes import checked_view, render_profile, runtime_named
from sparkpair.runtimes import triton as triton_runtime

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "fixtures" / "logs"
TRITON = triton_runtime.RUNTIME


@pytest.fixture
def inventory(example_inventory_path: Path):
    return load(example_inventory_path).for_runtime("triton")


def profile_with(inventory, **changes):
    return replace(inventory.profile("qwen3-235b", "triton"), **changes)


def test_the_built_in_profile_renders_a_repository_whose_model_json_and_worker_flags_agree(inventory) -> None:
    profile = inventory.profile("qwen3-235b", "triton")
    assert TRITON.problems(inventory, profile) == []
    files = {item.path: item.content for item in TRITON.config_files(inventory, profile, inventory.head, None)}
    model_json = json.loads(files["model_repository/Qwen--Qwen3-235B-A22B-GPTQ-Int4/1/model.json"])
    assert 'backend: "vllm"' in files["model_repository/Qwen--Qwen3-235B-A22B-GPTQ-Int4/config.pbtxt"]
    assert "KIND_MODEL" in files["model_repository/Qwen--Qwen3-235B-A22B-GPTQ-Int4/config.pbtxt"]
    worker_files = TRITON.config_files(inventory, profile, inventory.worker, None)
    assert [item.path for item in worker_files] == ["container.env"]   # the workers load no model
    server, worker = TRITON.starts(inventory, profile, [node.name for node in inventory.nodes])
    assert server.serves and server.argv[:2] == ["tritonserver", "--model-repository"]
    assert "--load-model" in server.argv and "Qwen--Qwen3-235B-A22B-GPTQ-Int4" in server.argv
    assert worker.argv[:3] == ["vllm", "serve", model_json["model"]] and worker.argv[-1] == "--headless"
    flags = dict(zip(worker.argv[3:-1:2], worker.argv[4:-1:2]))
    # the worker builds the same engine: every model.json key but the rank and the stats switch, as a flag
    for key, value in model_json.items():
        if key in ("model", "node_rank", "disable_log_stats"):
            continue
        flag = "--" + key.replace("_", "-")
        shown = json.dumps(value, separators=(",", ":")) if isinstance(value, dict) else str(value)
        assert flags[flag] == shown, key
    assert model_json["node_rank"] == 0 and flags["--node-rank"] == "1" and model_json["nnodes"] == 2
    assert model_json["master_addr"] == flags["--master-addr"] == str(inventory.head.links[
        next(iter(inventory.head.links))].ip)
    assert model_json["speculative_config"]["method"] == "eagle3" and model_json["disable_log_stats"] is False


@pytest.mark.parametrize(("serve_args", "expected"), [
    ({"max_model_lenn": 4096}, "serve_args.max_model_lenn: vLLM 0.32.0's AsyncEngineArgs has no argument "
                               "'max_model_lenn'"),
    ({"speculative_model": "x/y"}, "AsyncEngineArgs has no argument 'speculative_model'"),  # seed 003's old key
    ({"nnodes": 3}, "serve_args.nnodes: model.json's nnodes is set by sparkpair"),
    ({"api_key": "s3cret"}, "AsyncEngineArgs has no argument 'api_key'"),  # a secret never reaches model.json
    ({"max_model_len": True}, "serve_args.max_model_len: --max-model-len takes a value, not true"),
])
def test_problems_refuse_what_the_vllm_backend_would_fail_on_naming_the_key(inventory, serve_args, expected) -> None:
    problems = TRITON.problems(inventory, profile_with(inventory, serve_args=serve_args))
    assert len(problems) == 1 and expected in problems[0], problems


def test_problems_check_the_speculative_config_keys_and_render_stops_at_the_first(inventory, example_inventory_path) -> None:
    profile = profile_with(inventory, engine_config={"speculative_config": {"draft_tensor_parallel_sizee": 1}})
    assert TRITON.problems(inventory, profile) == [
        "engine_config.speculative_config.draft_tensor_parallel_sizee: vLLM 0.32.0's SpeculativeConfig has no key "
        "'draft_tensor_parallel_sizee'"]
    with pytest.raises(Exception, match="draft_tensor_parallel_sizee"):
        checked_view(load(example_inventory_path), profile)


def test_render_writes_the_repository_and_a_runbook_that_asks_tritons_endpoints(example_inventory_path) -> None:
    inv = load(example_inventory_path)
    files = {item.path: item.content for item in render_profile(inv, inv.profile("qwen3-235b", "triton"))}
    assert "triton/model_repository/Qwen--Qwen3-235B-A22B-GPTQ-Int4/1/model.json" in files
    runbook = files["triton/qwen3-235b/launch.sh"]
    assert "curl -sf http://localhost:8355/v2/health/ready" in runbook
    assert "/v2/models/Qwen--Qwen3-235B-A22B-GPTQ-Int4/generate" in runbook and "/v1/" not in runbook


def test_the_api_reads_tritons_answers() -> None:
    api = TRITON.api
    assert api.models("Qwen/Q") == "/v2/models/Qwen--Q/ready" and api.served(b"", "Qwen/Q") == ["Qwen/Q"]
    request = api.stream_request("Qwen/Q", [{"role": "user", "content": "hi"}], 16)
    assert request.path == "/v2/models/Qwen--Q/generate_stream" and request.body["parameters"]["max_tokens"] == 16
    assert api.ready_text(b'{"model_name":"Qwen--Q","model_version":"1","text_output":"ready"}') == "ready"
    assert api.stream_tokens(Field.parse(b'{"text_output":"ab","num_output_tokens":[3]}', "e")) == 3
    assert api.stream_tokens(Field.parse(b'{"text_output":"ab","num_output_tokens":2}', "e")) == 2
    assert api.stream_tokens(Field.parse(b'{"text_output":"ab"}', "e")) is None


class Lines:
    def __init__(self, lines: list[bytes]) -> None:
        self.lines = list(lines)

    def readline(self) -> bytes:
        return self.lines.pop(0) if self.lines else b""


def test_bench_sums_tritons_per_event_token_counts() -> None:
    """Eagle3 sends several tokens per event: 3 events of 4, 3 and 1 tokens are 8 tokens, not 3 chunks (this
    failed before token_counts: bench took the last event's count, 1)."""
    events = [b'data: {"text_output":"a b c d","num_output_tokens":[4]}\n', b"\n",
              b'data: {"text_output":" e f g","num_output_tokens":[3]}\n', b"\n",
              b'data: {"text_output":" h","num_output_tokens":[1]}\n', b"\n"]
    timing = client._timed_stream(Lines(events), 0.0, TRITON.api)
    assert timing.ok and timing.output_tokens == 8 and timing.chunks == 3


def test_the_recorded_triton_start_reaches_serving_in_tritons_stages() -> None:
    head = (LOGS / "triton" / "healthy_tp2_eagle3__simpair.head.log").read_text()
    lines = stages.clean_lines(head)
    assert stages.runtime_of_text(lines) == "triton"
    reached = stages.of_runtime("triton").last_stage_in(lines)
    assert reached is not None and reached.stage.name == "serving"
    before = head[:head.index("successfully loaded")]
    reached = stages.of_runtime("triton").last_stage_in(stages.clean_lines(before))
    assert reached is not None and reached.stage.name != "serving"
    worker = (LOGS / "triton" / "healthy_tp2_eagle3__simpair.worker.log").read_text()
    assert stages.of_runtime("triton").last_stage_in(stages.clean_lines(worker)) is not None


def test_a_triton_model_json_the_engine_refused_is_named_as_config_invalid_with_tritons_fix() -> None:
    text = (LOGS / "triton" / "model_load_failed_tutorial_model_json__simpair.log").read_text()
    found = {item.cause: item for item in diagnose.classify(text, runtime_named("triton"))}
    assert "config.invalid" in found and "triton.model-load" in found
    assert "model.json" in found["config.invalid"].fix


@pytest.mark.parametrize(("port", "setting"), [(8001, "the gRPC port in engines.triton.options"),
                                               (8002, "the metrics port in engines.triton.options")])
def test_doctor_checks_tritons_grpc_and_metrics_ports_on_the_head(port: int, setting: str) -> None:
    """Triton binds three ports on the head; a stray listener on the gRPC one failed no check before other_ports."""
    import test_checks

    from sparkpair.checks.engine import check_ports
    from sparkpair.probes import host
    from sparkpair.probes.host import Listener

    view = test_checks.SIM.for_runtime("triton")
    facts = test_checks.healthy(view)
    facts.profile = view.profile("qwen3-235b", "triton")
    facts.nodes["spark-a"][host.LISTENERS] = [Listener("0.0.0.0", port, "python3 (pid 9)")]
    failed = [f for f in check_ports(facts) if f.status.name == "FAIL"]
    assert len(failed) == 1 and f"port {port} held by python3 (pid 9)" in failed[0].detail, failed
    assert setting in failed[0].fix
