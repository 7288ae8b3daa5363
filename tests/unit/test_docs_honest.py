"""What the README and the docs claim is true (issue 38, item 6): every command that changes a node has
--dry-run (unlock and bench's relaunches had none), --stall-after's help and its error name the same stages
as the runtimes, the runbooks' vLLM rows say what sparkpair does, every doc a doc names exists, and a
newcomer finds the real-Sparks quick start first and what the demo needs."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import click
import pytest
from fakenode import FakeNode

from sparkpair.cli import main
from sparkpair.cli.app import App, cli
from sparkpair.transport import Pair

ROOT = Path(__file__).resolve().parents[2]
READ_ONLY = {"doctor", "status", "logs", "diagnose", "bundle", "diff", "render", "inventory", "root-helper"}


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_every_command_that_changes_a_node_has_dry_run() -> None:
    ctx = click.Context(cli)
    commands = {name: cli.get_command(ctx, name) for name in cli.list_commands(ctx)}
    changing = sorted(set(commands) - READ_ONLY)
    assert {"setup-network", "launch", "stop", "unlock", "bench", "train-draft"} <= set(changing)
    for name in changing:
        command = commands[name]
        assert command is not None and "--dry-run" in [opt for p in command.params for opt in p.opts], name


def test_unlock_dry_run_names_the_holder_and_removes_nothing(example_inventory_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    head = FakeNode("spark-a")
    lock = f"{head.home}/.sparkpair/lock"
    head.put('{"user": "alice", "host": "laptop", "pid": 42, "command": "launch qwen3-235b", "since": 0}', lock)
    monkeypatch.setattr(App, "pair", lambda self, **_: Pair.of([head, FakeNode("spark-b")]))
    code, out, _ = run(["-i", str(example_inventory_path), "unlock", "--dry-run"])
    assert code == 0 and out.startswith("spark-a: would remove the lock of alice@laptop pid 42 (launch qwen3-235b")
    assert "nothing was removed (--dry-run)" in out and head.read(lock) is not None and head.commands == []


def test_bench_dry_run_lists_each_configuration_and_its_relaunch(example_inventory_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import sparkpair.bench as bench
    from sparkpair.bench.configs import EngineConfig

    def planned(pair: Pair, inventory: Any, options: Any) -> list[EngineConfig]:
        return [EngineConfig("draft 3 (launched)", "qwen3-235b", inventory, 3, relaunch=False),
                EngineConfig("no draft", "qwen3-235b-nodraft", inventory, None, relaunch=True)]

    monkeypatch.setattr(bench, "plan_bench", planned)
    monkeypatch.setattr(bench, "run_bench", lambda *a, **k: pytest.fail("bench measured in a dry run"))
    monkeypatch.setattr(App, "pair", lambda self, **_: Pair.of([FakeNode("spark-a"), FakeNode("spark-b")]))
    code, out, _ = run(["-i", str(example_inventory_path), "bench", "--compare-baseline", "--dry-run"])
    assert code == 0 and "  no draft: relaunch the engine as qwen3-235b-nodraft" in out
    assert "  then relaunch qwen3-235b as it was launched" in out and "nothing was relaunched" in out


def test_stall_after_names_the_runtimes_stages_in_its_help_and_its_error() -> None:
    from sparkpair.engine.watch import DEFAULT_LIMITS, parse_stall_after

    STALL_STAGES = tuple(DEFAULT_LIMITS)   # the help reads them from the runtimes when shown (no literal list)
    code, out, _ = run(["launch", "--help"])
    assert code == 0 and ", ".join(STALL_STAGES) in " ".join(out.split())
    with pytest.raises(ValueError) as refused:
        parse_stall_after("nosuch=5")
    assert str(refused.value).endswith(", ".join(STALL_STAGES))


def test_the_runbooks_vllm_rows_say_what_sparkpair_does() -> None:
    runbooks = (ROOT / "docs" / "runbooks.md").read_text()
    rows = [line for line in runbooks.splitlines() if line.startswith("| vLLM two Sparks |")]
    assert rows and not any("uses no Ray" in row or "TensorRT-LLM release image" in row for row in rows)
    assert "shared/reference/playbooks.md" not in runbooks and "also in `playbooks.md`" not in runbooks


def test_every_doc_a_doc_names_exists() -> None:
    texts = {path: path.read_text() for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]}
    for path, text in texts.items():
        for name in re.findall(r"(?<![\w/])docs/([\w-]+\.md)", text) + re.findall(r"\]\(([\w-]+\.md)", text):
            assert (ROOT / "docs" / name).is_file(), f"{path.name} names docs/{name}"


def test_a_newcomer_finds_the_real_sparks_first_and_what_the_demo_needs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert readme.index("## Quick start on real Sparks") < readme.index("scripts/demo")
    demo = readme[readme.index("## Without Sparks"):]
    assert "root on a Linux machine" in demo and "they build the simulated pair" in demo
    checklist = (ROOT / "docs" / "checklist.md").read_text()
    for need in ("sudo", "docker", "image", "Disk", "token"):
        assert need in checklist, need
    assert "docs/checklist.md#sudo" in (ROOT / "sparkpair" / "checks" / "node.py").read_text()
