"""Usage errors come before any node is asked, and errors read well (issue 38, item 2).

Every bad argument is a one-line usage error (exit 2) before the first connection: `App.pair` is replaced by
one that fails the test when a command asks for the nodes. Then: a bundle that collected nothing exits 1; a
check that depends on an unreachable node is SKIP naming what it depends on; errors from several nodes are
one line per node, and only a command that changes nodes says that nothing was changed.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
from fakenode import FakeNode

from sparkpair.cli import main
from sparkpair.cli.app import App
from sparkpair.errors import ConnectError, NodesUnreachable
from sparkpair.transport import Pair


@pytest.fixture
def no_node(monkeypatch: pytest.MonkeyPatch) -> None:
    def asked(self: App, **_: Any) -> Pair:
        raise AssertionError("a node was asked before the usage error")

    monkeypatch.setattr(App, "pair", asked)


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def with_inventory(path: Path, *argv: str) -> tuple[int, str, str]:
    return run(["-i", str(path), *argv])


@pytest.mark.usefixtures("no_node")
def test_doctor_only_with_an_unknown_id_names_the_groups_and_the_closest(example_inventory_path: Path) -> None:
    code, out, err = with_inventory(example_inventory_path, "doctor", "--only", "nosuch")
    assert code == 2 and out == "" and "no check or group 'nosuch'" in err
    assert ("groups: inventory, reach, platform, links, path, trust, docker, ports, models, memory, known, clock, "
            "draft, playbook, deep") in err
    code, _, err = with_inventory(example_inventory_path, "doctor", "--only", "link,models.tokn")
    assert code == 2 and "did you mean links" in err and "did you mean models.token" in err


@pytest.mark.usefixtures("no_node")
def test_logs_of_an_unknown_node_names_the_inventory_s_nodes(example_inventory_path: Path) -> None:
    code, _, err = with_inventory(example_inventory_path, "logs", "--node", "spark-z")
    assert code == 2 and "no node 'spark-z' in the inventory; its nodes: spark-a, spark-b" in err


@pytest.mark.usefixtures("no_node")
@pytest.mark.parametrize("command", [["bench"], ["train-draft", "--name", "local/mine"]])
def test_a_bad_prompts_file_is_refused_before_the_nodes(command: list[str], example_inventory_path: Path,
                                                        tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("this is not json\n")
    code, _, err = with_inventory(example_inventory_path, *command, "--prompts", str(prompts))
    assert code == 2 and str(prompts) in err and err.count("\n") == 1


@pytest.mark.usefixtures("no_node")
@pytest.mark.parametrize("command", [["bundle", "--out"], ["bench", "--out"],
                                     ["train-draft", "--name", "local/mine", "--out"]])
def test_an_output_that_cannot_be_written_is_refused_before_the_nodes(command: list[str],
                                                                      example_inventory_path: Path) -> None:
    """Under a regular file (no folder can be made there), as root too."""
    target = f"{example_inventory_path}/out"
    code, _, err = with_inventory(example_inventory_path, *command, target)
    assert code == 2 and f"Error: Invalid value for --out: cannot write {target}: Not a directory" in err


def test_a_bundle_that_collected_nothing_from_any_node_exits_1(example_inventory_path: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkpair.engine import bundle as bundle_flow

    def nothing(pair: Pair, inventory: Any, out: Path, *args: Any, **kwargs: Any) -> bundle_flow.BundleResult:
        names = [node.name for node in inventory.nodes]
        return bundle_flow.BundleResult(str(out), missing=[f"{name}: nothing collected (refused)" for name in names],
                                        unreached=names)

    monkeypatch.setattr(bundle_flow, "bundle", nothing)
    monkeypatch.setattr(App, "pair", lambda self, **_: Pair.of([FakeNode("spark-a"), FakeNode("spark-b")]))
    code, _, err = with_inventory(example_inventory_path, "bundle", "--out", str(tmp_path / "b.tar.gz"))
    assert code == 1 and "collected nothing from any node (spark-a, spark-b)" in err


def test_models_token_is_skip_naming_models_present_while_the_nodes_are_unreachable() -> None:
    import test_checks

    from sparkpair.checks import Status, run_checks
    from sparkpair.checks.catalog import CHECKS

    facts = test_checks.healthy()
    for name in ("spark-a", "spark-b"):
        facts.unreachable[name] = f"nvidia@{name}:22 refused the connection"
    found = {f.check: f for f in run_checks(facts, CHECKS) if f.check in ("models.token", "models.hub")}
    assert {check: f.status for check, f in found.items()} == {"models.token": Status.SKIP, "models.hub": Status.SKIP}
    assert "depends on models.present" in found["models.token"].detail and "spark-a, spark-b" in found["models.token"].detail


class Unreachable(FakeNode):
    def connect(self, timeout: float | None = None) -> None:
        raise ConnectError(f"nvidia@{self.host}:22 refused the connection; is sshd running?", node=self.name)


FOUR = [Unreachable(name, host=f"198.18.0.{11 + index}") for index, name in
        enumerate(("spark-a", "spark-b", "spark-c", "spark-d"))]


@pytest.mark.parametrize("changing", [False, True])
def test_several_unreachable_nodes_are_one_line_each(changing: bool) -> None:
    with pytest.raises(NodesUnreachable) as raised:
        Pair.of(FOUR).connect(changing=changing)
    lines = raised.value.lines()
    assert [line.split(":")[0] for line in lines[:4]] == ["spark-a", "spark-b", "spark-c", "spark-d"]
    assert all(len(line) < 100 for line in lines)
    assert lines[4:] == (["nothing was changed on any node"] if changing else [])


def test_a_read_only_command_does_not_say_nothing_was_changed(example_inventory_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(App, "pair", lambda self, **_: Pair.of(FOUR[:2]))
    code, _, err = with_inventory(example_inventory_path, "status")
    assert code == 1 and err.count("\n") == 2 and "nothing was changed" not in err
    assert err.splitlines()[0].startswith("error: spark-a: nvidia@198.18.0.11:22 refused the connection")
    code, _, err = with_inventory(example_inventory_path, "stop")
    assert code == 1 and err.splitlines()[-1] == "error: nothing was changed on any node"
