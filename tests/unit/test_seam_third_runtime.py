"""One module per engine (issue 37): a third runtime (tests/unit/third_runtime.py, a throwaway written only
against the `Runtime` protocol) joins with one registry line and its module, and every command that takes a
runtime's name knows it: its inventory section and options, its profile settings checked by its own
definitions, its rendered files (a model repository), its server's readiness paths and one-generation shape,
its metrics on a port of its own without draft counters (status and bench read what it has), its stage limits,
its serving stage (diagnose's), its fix texts, no playbook. The last tests follow it through every edit SGLang made
outside its module, so a next engine needs none: bench and status read acceptance from its gauges, launch refuses
its misspelt option before any node is asked, bundle collects its container, diagnose knows its own failure lines."""

from __future__ import annotations

import http.server
import json
import socket
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
import yaml
from fakenode import FakeNode, ProbeRound, fake_pair, is_probe_round

import sparkpair.bench as bench
from sparkpair import registry
from sparkpair.bench.client import Endpoint
from sparkpair.bench.configs import EngineConfig
from sparkpair.bench.prompts import load_prompts
from sparkpair.bench.stats import RequestTiming
from sparkpair.checks import Facts, Status, run_checks
from sparkpair.checks.catalog import DRIFT_CHECKS
from sparkpair.cli import main
from sparkpair.cli.app import App
from sparkpair.cli.options import RuntimeChoice
from sparkpair.engine import bundle as bundle_flow
from sparkpair.engine import diagnose, fabric, lifecycle, readiness, signatures, stages, watch
from sparkpair.engine import doctor as doctor_flow
from sparkpair.engine.state import LaunchState, state_path
from sparkpair.errors import InventoryError, RenderError
from sparkpair.inventory import Inventory, parse_inventory
from sparkpair.probes import format_sections
from sparkpair.progress import silent
from sparkpair.runtimes import (
    FailureLine,
    Metrics,
    Runtime,
    checked_view,
    engine_sections,
    inventory_schema,
    render_profile,
    runtime_named,
)
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


def _status_of_a_serving_third(monkeypatch: pytest.MonkeyPatch, metrics: bytes) -> lifecycle.Status:
    """`status` of a launched third runtime whose ranks run, whose server answers, and whose metrics port says
    METRICS (no memory guard stopped anything)."""
    inv = inventory(runtime="third")
    state = LaunchState(profile="qwen3-235b", nodes=["spark-a", "spark-b"], started=1.0, command="x", runtime="third")
    monkeypatch.setattr(lifecycle, "read_state", lambda head: state)
    monkeypatch.setattr(lifecycle.containers, "find", lambda connection, name: SimpleNamespace(status="running",
                                                                                              running=True))
    monkeypatch.setattr(lifecycle, "rank_processes", lambda *args: [SimpleNamespace(stopped=False)])
    monkeypatch.setattr(lifecycle.memguard, "status", lambda *args: ({}, []))
    model = "/v2/models/org--third-model"
    nodes = {name: FakeNode(name) for name in ("spark-a", "spark-b")}
    nodes["spark-a"].http_replies = {
        (8355, "GET", "/v2/health/ready"): Reply(200), (8355, "GET", f"{model}/ready"): Reply(200),
        (8355, "POST", f"{model}/generate"): Reply(200, b'{"text_output": "p"}'),
        (9002, "GET", "/metrics"): Reply(200, metrics)}
    return lifecycle.status(SimpleNamespace(head=nodes["spark-a"], nodes=nodes), inv)  # type: ignore[arg-type]


def test_status_reads_its_metrics_on_their_own_port_without_draft_counters(third: Runtime,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    result = _status_of_a_serving_third(monkeypatch, b"third_requests_total 7\n")
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


# --- what SGLang had to fix outside its module, followed with the third runtime -------------------------------------
# SGLang's commits changed bench, status (engine/lifecycle.py), Metrics, launch (cli/engine.py), bundle (cli/bundle.py)
# and engine/signatures.py; these prove a next engine needs none of those edits (docs/architecture.md).

GAUGES = Metrics("/metrics", requests="third_requests_total", drafts="third_verifies_total",
                 accept_length="third_accept_length", accept_rate="third_accept_rate")


class _Exposition(http.server.BaseHTTPRequestHandler):
    """A loopback /metrics: each GET answers the next of `pages` (the last one again)."""

    pages: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = (self.pages.pop(0) if len(self.pages) > 1 else self.pages[0]).encode()
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def metrics_server() -> Iterator[tuple[int, type[_Exposition]]]:
    handler = type("Pages", (_Exposition,), {"pages": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], handler
    server.shutdown()
    server.server_close()
    thread.join()


def test_bench_reads_acceptance_from_its_gauges_when_it_keeps_no_accepted_token_counter(
        third: Runtime, monkeypatch: pytest.MonkeyPatch, metrics_server: tuple[int, type[_Exposition]]) -> None:
    """A variant of the third runtime that, as SGLang, counts its verifies and keeps acceptance as gauges: bench
    reads the gauges over the verifies its requests made, from the engine's own /metrics (a loopback server)."""
    monkeypatch.setattr(third, "metrics", GAUGES)
    port, pages = metrics_server
    pages.pages += ["third_verifies_total 10\nthird_accept_length 9.0\nthird_accept_rate 0.9\n",
                    "third_verifies_total 60\nthird_accept_length 2.5\nthird_accept_rate 0.5\n"]
    timing = RequestTiming(True, ttft_s=0.1, latency_s=0.5, decode_s=0.4, output_tokens=5, chunks=5)
    monkeypatch.setattr(bench, "run_streams", lambda *args: ([timing], 0.5))
    changed = {"engines": {"third": {"options": {"metrics_port": port}}}}
    config = EngineConfig("eagle3", "qwen3-235b", inventory(runtime="third", **changed), None, relaunch=False)
    options = bench.BenchOptions("qwen3-235b", [1], 1, 16, None, False, [], Path("."), False)
    stats, errors = bench._measure_level(Endpoint("127.0.0.1", 8355, TARGET, third.api), load_prompts(None), config,
                                         1, options, silent)
    assert errors == [] and stats.acceptance is not None
    # 50 verifies at 2.5 tokens each: 75 drafts accepted of the 150 proposed (a rate of 0.5)
    assert (stats.acceptance.requests_with_drafts, stats.acceptance.accepted_tokens,
            stats.acceptance.draft_tokens) == (50, 75, 150)


def test_status_reads_its_acceptance_rate_gauge(third: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(third, "metrics", GAUGES)

    result = _status_of_a_serving_third(monkeypatch, b"third_requests_total 7\nthird_verifies_total 40\n"
                                                     b"third_accept_length 2.2\nthird_accept_rate 0.625\n")
    assert (result.state, result.requests, result.acceptance_rate) == ("serving", 7.0, 0.625)


def test_bundle_collects_the_launched_third_runtimes_container_and_rank_logs(
        third: Runtime, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The head's launch state names the third runtime: bundle asks its container (third-multinode) for its rank log
    and docker logs, not the default runtime's container."""
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump({**EXAMPLE, **THIRD}))
    view = inventory().for_runtime("third")
    state = LaunchState(profile="qwen3-235b", nodes=["spark-a", "spark-b"], started=1.0, command="x", runtime="third")
    nodes = []
    for node in view.nodes:
        probes = bundle_flow.node_probes(view, node.name, node.name == "spark-a")
        answers: dict[Any, str | tuple[int, str, str]] = {
            probes["logs/running-engine/"]: format_sections({"serve.log": f"third ready on {node.name}\n"}),
            probes["engine/docker-logs.txt"]: f"third-serve booting on {node.name}\n"}
        fake = FakeNode(node.name, files={state_path(FakeNode(node.name)): state.to_json()})
        nodes.append(fake.on(is_probe_round, ProbeRound(answers, others=(1, "", "not answered"))))
    monkeypatch.setattr(App, "pair", lambda self, **options: fake_pair(*nodes))
    monkeypatch.setattr(doctor_flow, "doctor", lambda *args: [])   # doctor's own findings are not what is proven here
    out = tmp_path / "b.tar.gz"
    code = main(["-i", str(path), "bundle", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert "third-multinode" in view.container.name and "third-multinode" in probes["engine/docker-logs.txt"].command.text
    with tarfile.open(out) as archive:
        texts = {name.split("/", 1)[1]: archive.extractfile(name).read().decode()  # type: ignore[union-attr]
                 for name in archive.getnames() if "/logs/" in name or "/engine/" in name}
    assert texts["spark-a/logs/running-engine/serve.log"] == "third ready on spark-a\n"
    assert texts["spark-b/logs/running-engine/serve.log"] == "third ready on spark-b\n"
    assert texts["spark-b/engine/docker-logs.txt"] == "third-serve booting on spark-b\n"


def test_launch_refuses_a_misspelt_third_runtime_option_before_any_node_is_asked(
        third: Runtime, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def asked(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a node was asked")

    monkeypatch.setattr(App, "pair", asked)
    monkeypatch.setattr(socket.socket, "connect", asked)
    monkeypatch.setattr(socket, "create_connection", asked)
    data = {**EXAMPLE, **THIRD, "models": {"qwen3-235b": {"variants": {"third": {
        "target": TARGET, "serve_args": {"max_bacth": 4}}}}}}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    code = main(["-i", str(path), "launch", "qwen3-235b", "--runtime", "third"])
    err = capsys.readouterr().err
    assert code == 2 and "serve_args.max_bacth: third-serve has no flag max_bacth" in err, err
    assert "a node was asked" not in err and not any(line.startswith("Traceback") for line in err.splitlines())


def test_diagnose_classifies_its_own_failure_lines_which_no_shared_signature_holds(third: Runtime) -> None:
    line = "third-serve: KV pool of 512 blocks cannot hold max_batch 64"
    assert not any(signature.pattern.search(line) for signature in signatures.SIGNATURES)   # none of the shared ones
    found = diagnose.classify(f"third-serve booting\nthird loading weights\n{line}\n")
    assert [item.cause for item in found][:1] == ["memory.kvcache"] and found[0].evidence == [line]
    vanished = "third worker 1 vanished"   # a hint: it counts only in a start that never served
    assert [item.cause for item in diagnose.classify(f"third-serve booting\n{vanished}\n")] == ["engine.died"]
    assert diagnose.classify(f"third-serve booting\n{vanished}\nthird ready\n", third) == []


def test_a_failure_line_naming_no_known_cause_is_refused_naming_the_runtime(
        third: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(third, "failure_lines", (FailureLine("memory.nosuch", r"\bthird pool gone\b"),))
    signatures._merged.cache_clear()   # the merge is kept per registry: this runtime's lines changed under it
    with pytest.raises(ValueError, match="third: memory.nosuch"):
        signatures.every_signature()
