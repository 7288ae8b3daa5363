"""sparkpair bench's control flow without a server: Ctrl-C during a relaunch, and where results go."""

from __future__ import annotations

import contextlib
import errno
import json
from pathlib import Path

import pytest

import sparkpair.bench as bench
from sparkpair.bench.client import Endpoint
from sparkpair.bench.configs import plan_configs
from sparkpair.bench.prompts import load_prompts
from sparkpair.cli import main
from sparkpair.cli.app import App
from sparkpair.engine.state import LaunchState
from sparkpair.errors import Interrupted, SparkpairError, UsageError
from sparkpair.inventory import read_inventory
from sparkpair.progress import Event, silent

FOUND = bench.Serving(LaunchState("qwen3-235b", ["spark-a"], 0.0, "mpirun ...", image_id="sha256:x"), ["spark-a"],
                      Endpoint("198.18.0.11", 8355, "nvidia/Qwen3-235B-A22B-FP4"))


def _options(out_dir: Path, as_json: bool = True) -> bench.BenchOptions:
    return bench.BenchOptions("qwen3-235b", [1], 1, 16, None, False, [2], out_dir, as_json)


@pytest.fixture
def relaunches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every relaunch and restore; measuring a configuration yields nothing."""
    done: list[str] = []
    monkeypatch.setattr(bench, "_measure_config", lambda *args: ([], []))
    monkeypatch.setattr(bench, "_restore",
                        lambda pair, config, nodes, progress, raise_on_failure=True: done.append("restore"))
    return done


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), Interrupted("interrupted while starting the engine")])
def test_ctrl_c_during_a_relaunch_restores_nothing_and_says_how(
        example_inventory_path: Path, tmp_path: Path, relaunches: list[str], monkeypatch: pytest.MonkeyPatch,
        interrupt: BaseException) -> None:
    def relaunch(*args: object) -> None:
        relaunches.append("relaunch")
        raise interrupt

    events: list[Event] = []
    monkeypatch.setattr(bench, "_relaunch", relaunch)
    configs = plan_configs(read_inventory(example_inventory_path), "qwen3-235b", [2], compare_baseline=False)
    with pytest.raises(type(interrupt)):
        bench._measure_all(None, configs, FOUND, load_prompts(None), _options(tmp_path),  # type: ignore[arg-type]
                           events.append)
    warnings = [event.text for event in events if event.level == "warning"]
    assert relaunches == ["relaunch"]
    assert len(warnings) == 1 and "`sparkpair launch qwen3-235b` restores the profile" in warnings[0]


def test_a_failed_relaunch_still_restores_the_profile(example_inventory_path: Path, tmp_path: Path,
                                                      relaunches: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def relaunch(*args: object) -> None:
        raise SparkpairError("relaunching failed")

    monkeypatch.setattr(bench, "_relaunch", relaunch)
    configs = plan_configs(read_inventory(example_inventory_path), "qwen3-235b", [2], compare_baseline=False)
    with pytest.raises(SparkpairError, match="relaunching failed"):
        bench._measure_all(None, configs, FOUND, load_prompts(None), _options(tmp_path),  # type: ignore[arg-type]
                           silent)
    assert relaunches == ["restore"]


def test_an_unwritable_out_dir_stops_bench_in_one_line_naming_out(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(UsageError) as raised:
        bench.check_out_dir(tmp_path / "a-file" / "bench")
    assert len(raised.value.lines()) == 1 and raised.value.lines()[0].startswith(f"--out {tmp_path}/a-file/bench: ")
    bench.check_out_dir(tmp_path / "new" / "bench")
    assert list((tmp_path / "new" / "bench").iterdir()) == []


def test_a_failed_write_keeps_the_measured_results_on_stdout(example_inventory_path: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    def disk_full(rows: object, out_dir: Path, title: str) -> list[Path]:
        raise OSError(errno.ENOSPC, "No space left on device", str(out_dir / "draft_len.png"))

    monkeypatch.setattr(bench.benchplots, "ensure_matplotlib", lambda: None)
    monkeypatch.setattr(bench.benchplots, "write_plots", disk_full)
    monkeypatch.setattr(bench, "serving", lambda *args: FOUND)
    monkeypatch.setattr(bench, "_warn_if_drifted", lambda *args: None)
    monkeypatch.setattr(bench, "_measure_all", lambda *args: ([{"config": "draft 3 (launched)", "max_draft_len": 3,
                                                                "concurrency": 1, "requests": 1,
                                                                "aggregate_tokens_per_s": 10.0}], []))
    monkeypatch.setattr(App, "pair", lambda self, **options: contextlib.nullcontext(NoConnect()))
    out = tmp_path / "bench"
    code = main(["-i", str(example_inventory_path), "bench", "--json", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.err.strip() == (f"error: could not write {out}/draft_len.png: No space left on device; the results "
                                    "above were measured but not saved (fix: free space or fix permissions under "
                                    "--out, or pass another --out, and rerun)")
    assert json.loads(captured.out)["rows"][0]["config"] == "draft 3 (launched)"


class NoConnect:
    """A pair that is never used: bench's node-facing steps are replaced in the test."""

    def connect(self, *, changing: bool = False) -> None:
        pass


@pytest.mark.parametrize(("runtime", "where", "needs"), [
    ("trtllm", "/prometheus/metrics", "enable_iter_perf_stats: true"),
    ("vllm", "/metrics", "speculative_config that vLLM accepted"),
])
def test_no_draft_statistics_names_the_runtimes_own_metrics_and_what_it_needs(runtime: str, where: str,
                                                                              needs: str) -> None:
    from sparkpair.bench import no_draft_statistics
    from sparkpair.runtimes import runtime_named

    text = no_draft_statistics(runtime_named(runtime).metrics)
    assert f"on {where};" in text and needs in text
    assert ("enable_iter_perf_stats" in text) == (runtime == "trtllm")  # no TensorRT-LLM fix for a vLLM server


@pytest.mark.parametrize(("models", "ran_on", "node"), [
    ({"qwen3-235b": {"tp_size": 1, "pp_size": 3}}, ["spark-a", "spark-b", "spark-c"], None),
    ({"qwen3-235b": {"tp_size": 1}}, ["spark-b"], "spark-b")])
def test_bench_on_a_ring_measures_the_serving_node_and_relaunches_where_the_launch_ran(
        monkeypatch: pytest.MonkeyPatch, models: dict[str, object], ran_on: list[str], node: str | None) -> None:
    """A ring of three (issue 28): the endpoint is the launch's serving node (the head across every node, the one
    node a one-node profile ran on), and a relaunch launches on all three, or on that node again."""
    from fakenode import FakeNode, fake_pair
    from test_topology import ring_data

    from sparkpair.engine.launch import LaunchResult
    from sparkpair.inventory import parse_inventory

    ring = parse_inventory({**ring_data(), "models": models})
    monkeypatch.setattr(bench, "read_state", lambda head: LaunchState("qwen3-235b", ran_on, 0.0, "mpirun ..."))
    monkeypatch.setattr(bench, "served_models", lambda endpoint: [endpoint.model])
    pair = fake_pair(*(FakeNode(n.name) for n in ring.nodes))
    found = bench.serving(pair, ring, "qwen3-235b")
    assert found.nodes == ran_on and found.endpoint.host == ring.node(ran_on[0]).host
    launched: list[object] = []
    monkeypatch.setattr(bench, "launch", lambda pair, inventory, options, progress: (
        launched.append(options), LaunchResult(ok=True))[1])
    configs = plan_configs(ring, "qwen3-235b", [2], compare_baseline=False)
    bench._relaunch(pair, configs[1], found.nodes, silent)
    assert [options.node for options in launched] == [node]  # type: ignore[attr-defined]
