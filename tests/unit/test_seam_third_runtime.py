"""One module per engine (issue 37): a third runtime (tests/unit/third_runtime.py, a throwaway written only
against the `Runtime` protocol) joins with one registry line and its module, and every command that takes a
runtime's name knows it: its inventory section and options, its profile settings checked by its own
definitions, its rendered files (a model repository), its server's readiness paths and one-generation shape,
its metrics on a port of its own without draft counters (status and bench read what it has), its stage limits,
its serving stage (diagnose's), its fix texts, no playbook."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
import yaml
from fakenode import FakeNode

import sparkpair.bench as bench
from sparkpair import registry
from sparkpair.bench.client import Endpoint
from sparkpair.bench.configs import EngineConfig
from sparkpair.bench.prompts import load_prompts
from sparkpair.bench.stats import RequestTiming
from sparkpair.checks import Facts, Status, run_checks
from sparkpair.checks.catalog import DRIFT_CHECKS
from sparkpair.cli import main
from sparkpair.cli.options import RuntimeChoice
from sparkpair.engine import diagnose, fabric, lifecycle, readiness, stages, watch
from sparkpair.engine.state import LaunchState
from sparkpair.errors import InventoryError, RenderError
from sparkpair.inventory import Inventory, parse_inventory
from sparkpair.progress import silent
from sparkpair.runtimes import Runtime, checked_view, engine_sections, inventory_schema, render_profile, runtime_named
from sparkpair.transport.httpio import Reply

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "inventory.example.yaml").read_text())
TARGET = "org/third-model"
THIRD = {"engines": {"third": {"image": "example.org/third:1.0", "options": {"metrics_port": 9002}}},
         "models": {"qwen3-235b": {"variants": {"third": {"target": TARGET, "draft": None, "serve_args": {"max_batch": 4},
                                                          "engine_config": {"instance_count": 1}}}}}}


@pytest.fixture
def third(monkeypatch: pytest.MonkeyPatch) -> Runtime:
    """The third runtime, registered the way a new engine is: one more registry line naming its module."""
    line = registry.Registered("third", "third_runtime", container="third-multinode")
    monkeypatch.setattr(registry, "RUNTIMES", (*registry.RUNTIMES, line))
    monkeypatch.setattr(registry, "NAMES", (*registry.NAMES, line.name))
    return runtime_named("third")


def inventory(**changes: Any) -> Inventory:
    return parse_inventory({**EXAMPLE, **THIRD, **changes})


def test_one_registry_line_makes_the_cli_the_inventory_and_the_launch_state_take_its_name(third: Runtime) -> None:
    assert "third" in RuntimeChoice().choices
    inv = inventory(runtime="third")
    profile = inv.profile("qwen3-235b")
    assert (profile.runtime, profile.target, profile.engine_config) == ("third", TARGET, {"instance_count": 1})
    view = inv.for_runtime("third")
    assert (view.container.image, view.container.name) == ("example.org/third:1.0", "third-multinode")
    state = LaunchState(profile="qwen3-235b", nodes=["spark-a", "spark-b"], started=1.0, command="x", runtime="third")
    assert LaunchState.from_json(state.to_json()) == state
    assert engine_sections(inv)["third"]["options"] == {"metrics_port": 9002, "backend": "vllm"}


def test_its_files_render_under_its_directory_with_a_model_repository(third: Runtime, tmp_path: Path) -> None:
    inv = inventory()
    files = {item.path for item in render_profile(inv, inv.profile("qwen3-235b", "third"))}
    assert {"third/container.env", "third/model_repository/org--third-model/config.pbtxt",
            "third/model_repository/org--third-model/1/model.json", "third/qwen3-235b/launch.sh"} <= files
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump({**EXAMPLE, **THIRD}))
    assert main(["-i", str(path), "render", "--runtime", "third", "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "third" / "model_repository" / "org--third-model" / "1" / "model.json").is_file()
    node_files = third.config_files(inv.for_runtime("third"), inv.profile("qwen3-235b", "third"), inv.head, None)
    assert fabric.config_dirs(node_files) == ["~/.sparkpair/config/model_repository/org--third-model/1"]


def test_its_settings_and_options_are_checked_by_its_own_definitions(third: Runtime) -> None:
    inv = inventory(models={"qwen3-235b": {"variants": {"third": {"target": TARGET, "serve_args": {"bogus": 1}}}}})
    with pytest.raises(RenderError, match="serve_args.bogus: third-serve has no flag bogus"):
        checked_view(inv, inv.profile("qwen3-235b", "third"))
    bad = inventory(engines={"third": {"options": {"metrics_port": "x", "backend": "onnx"}}})
    with pytest.raises(RenderError, match=r"engines\.third\.options\.metrics_port: got 'x'"):
        checked_view(bad, bad.profile("qwen3-235b", "third"))
    with pytest.raises(InventoryError) as caught:
        third.metrics_port(bad)
    assert any("engines.third.options.backend" in line for line in caught.value.lines())


def test_doctor_says_no_playbook_is_recorded_instead_of_crashing(third: Runtime) -> None:
    inv = inventory()
    profile = inv.profile("qwen3-235b", "third")
    found = run_checks(Facts(inv.for_runtime("third"), profile), DRIFT_CHECKS)
    assert [f.detail for f in found if "check crashed" in f.detail] == []
    rows = {f.check: f for f in found if f.check in ("playbook.image", "playbook.env", "playbook.flags")}
    assert set(rows) == {"playbook.image", "playbook.env", "playbook.flags"}
    assert all(f.status is Status.INFO and "no NVIDIA playbook of Third Engine" in f.detail for f in rows.values())


def test_readiness_and_status_ask_its_own_paths_and_read_its_own_answers(third: Runtime) -> None:
    head = FakeNode()
    model = "/v2/models/org--third-model"
    head.http_replies = {(8355, "GET", "/v2/health/ready"): Reply(200), (8355, "GET", f"{model}/ready"): Reply(200),
                         (8355, "POST", f"{model}/generate"): Reply(200, json.dumps({"text_output": "ready"}).encode())}
    assert readiness.probe_stage(head, 8355, TARGET, api=third.api) == ("ready", "ready")
    assert readiness.served_model_ids(head, 8355, TARGET, api=third.api) == ([TARGET], "")
    answered, _ = readiness.generate_one_token(head, 8355, TARGET, api=third.api)
    assert answered
    head.http_replies[(8355, "POST", f"{model}/generate")] = Reply(200, b'{"text_output": 5}')
    stage, detail = readiness.probe_stage(head, 8355, TARGET, api=third.api)
    assert stage == "completion" and detail.startswith("a generation came back malformed: generate: text_output")


def test_status_reads_its_metrics_on_their_own_port_without_draft_counters(third: Runtime,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    inv = inventory(runtime="third")
    state = LaunchState(profile="qwen3-235b", nodes=["spark-a", "spark-b"], started=1.0, command="x", runtime="third")
    monkeypatch.setattr(lifecycle, "read_state", lambda head: state)
    monkeypatch.setattr(lifecycle.containers, "find", lambda connection, name: SimpleNamespace(status="running",
                                                                                              running=True))
    monkeypatch.setattr(lifecycle, "rank_processes", lambda *args: [SimpleNamespace(stopped=False)])
    monkeypatch.setattr(lifecycle.memguard, "status", lambda *args: ({}, []))   # no guard stopped anything
    model = "/v2/models/org--third-model"
    nodes = {name: FakeNode(name) for name in ("spark-a", "spark-b")}
    nodes["spark-a"].http_replies = {
        (8355, "GET", "/v2/health/ready"): Reply(200), (8355, "GET", f"{model}/ready"): Reply(200),
        (8355, "POST", f"{model}/generate"): Reply(200, b'{"text_output": "p"}'),
        (9002, "GET", "/metrics"): Reply(200, b"third_requests_total 7\n")}
    result = lifecycle.status(SimpleNamespace(head=nodes["spark-a"], nodes=nodes), inv)  # type: ignore[arg-type]
    assert (result.state, result.runtime, result.model, result.requests) == ("serving", "third", TARGET, 7.0)
    assert result.acceptance_rate is None


def test_its_stages_have_their_own_limits_and_its_logs_are_told_apart(third: Runtime) -> None:
    assert watch.limits_of(third) == {"start": 180.0, "boot": 45.0, "model": 77.0, "serving": 30.0}
    assert watch.parse_stall_after("model=10", watch.limits_of(third)) == {"model": 10.0}
    with pytest.raises(ValueError, match="no stage 'nccl'; stages: start, boot, model, serving"):
        watch.parse_stall_after("nccl=10", watch.limits_of(third))
    assert stages.runtime_of_text(["third-serve booting", "third loading weights"]) == "third"


def test_diagnose_gives_its_own_fix(third: Runtime) -> None:
    found = diagnose.classify("third-serve booting\ntorch.OutOfMemoryError: CUDA out of memory.\n")
    oom = next(item for item in found if item.cause == "memory.oom")
    assert oom.fix.endswith("Third Engine: lower instance_count under the profile's engine_config")


def test_the_published_schema_knows_its_options_and_accepts_its_inventory(third: Runtime) -> None:
    schema = inventory_schema()
    options = schema["properties"]["engines"]["properties"]["third"]["properties"]["options"]
    assert options["properties"]["metrics_port"]["maximum"] == 65535 and options["additionalProperties"] is False
    validator = jsonschema.Draft202012Validator(schema)
    assert not list(validator.iter_errors({**EXAMPLE, **THIRD}))
    assert list(validator.iter_errors({**EXAMPLE, "engines": {"third": {"options": {"metrics_prot": 1}}}}))


def test_diagnose_knows_a_start_served_by_its_own_serving_stage(third: Runtime) -> None:
    hint = "NCCL INFO NET/IB : No device found."   # a warning that only matters in a start that did not serve
    served = diagnose.classify(f"third-serve booting\n{hint}\nthird ready\n", third)
    assert "fabric.roce" not in [item.cause for item in served]
    uvicorn = f"third-serve booting\n{hint}\nINFO:     Uvicorn running on http://0.0.0.0:8355\n"
    assert "fabric.roce" in [item.cause for item in diagnose.classify(uvicorn, third)]   # another engine's line
    assert "fabric.roce" not in [item.cause for item in diagnose.classify(uvicorn, runtime_named("trtllm"))]


def test_bench_measures_an_engine_without_draft_counters_and_reads_no_acceptance(
        third: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("bench read draft statistics the engine does not publish")

    timing = RequestTiming(True, ttft_s=0.1, latency_s=0.5, decode_s=0.4, output_tokens=5, chunks=5)
    monkeypatch.setattr(bench, "run_streams", lambda *args: ([timing], 0.5))
    monkeypatch.setattr(bench, "CounterStats", refused)
    monkeypatch.setattr(bench, "IterationStats", refused)
    config = EngineConfig("baseline", "qwen3-235b", inventory(runtime="third"), None, relaunch=False)
    options = bench.BenchOptions("qwen3-235b", [1], 1, 16, None, False, [], Path("."), False)
    stats, errors = bench._measure_level(Endpoint("198.18.0.11", 8355, TARGET, third.api), load_prompts(None), config,
                                         1, options, silent)
    assert (stats.acceptance, errors) == (None, [])
