"""engine.launch.plan_launch and config_changes on two scripted nodes (tests/fakenode.py): what a launch would
write to each node's ~/.sparkpair/config (only what differs), the containers' state, the serve command, and a
preflight that fails plans no change. Nothing is started or written. No pair, no root."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from fakenode import FakeNode, ProbeRound, fake_pair, is_probe_round

from sparkpair import paths
from sparkpair.engine import fabric, launch
from sparkpair.inventory import read_inventory
from sparkpair.probes import docker

FIXTURES = Path(__file__).parent.parent / "fixtures"
SIM = read_inventory(FIXTURES / "inventory" / "sim.yaml")
HOME = "/home/nvidia"
NAME = SIM.container.name
UNANSWERED = (1, "", "not answered in this test")  # every doctor probe: the preflight fails where it judges them
CLOCK = "date +%s.%N"
OPTIONS = launch.LaunchOptions(profile="qwen3-235b")


def container(labels: dict[str, str] | None) -> str:
    if labels is None:
        return json.dumps({"message": f"No such container: {NAME}"}) + "\n404\n"
    return json.dumps({"Id": "c" * 64, "Name": f"/{NAME}", "State": {"Status": "exited", "Running": False, "ExitCode": 0},
                       "Config": {"Image": SIM.container.image, "Labels": labels}}) + "\n200\n"


def nodes(**files: dict[str, str]) -> list[FakeNode]:
    """spark-a and spark-b holding files (node -> path -> content); spark-b has a stopped engine container."""
    states = {"spark-a": container(None), "spark-b": container({"sparkpair.node": "spark-b"})}
    return [FakeNode(name, home=HOME, files=dict(files.get(name.replace("-", "_"), {})))
            .on(is_probe_round, ProbeRound({docker.container(NAME): states[name]}, others=UNANSWERED))
            .on(CLOCK, lambda call, node: f"{time.time():.9f}\n")  # doctor's clock check
            for name in ("spark-a", "spark-b")]


def config_path(item: str) -> str:
    return paths.under_home(f"{paths.CONFIG_DIR}/{item}", HOME)


@pytest.fixture
def preflight_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """doctor's probes still run on the scripted nodes; its verdict is taken as passed."""
    examined = launch.examined
    monkeypatch.setattr(launch, "examined", lambda *args: (examined(*args)[0], []))


def rendered() -> dict[str, Any]:
    inventory, profile = launch.resolve(SIM, OPTIONS)
    return fabric.node_files(inventory, profile, dict.fromkeys(["spark-a", "spark-b"]))


def test_a_fresh_pair_plans_every_config_file_on_every_rank_node_and_starts_nothing(preflight_passes: None) -> None:
    pair_nodes = nodes()
    plan = launch.plan_launch(fake_pair(*pair_nodes), SIM, OPTIONS)
    assert plan.preflight == [] and plan.nodes == ["spark-a", "spark-b"]
    files = rendered()
    for name in plan.nodes:
        mine = [change for change in plan.changes if change.node == name]
        assert [change.summary for change in mine] == [f"create {paths.CONFIG_DIR}/{item.path}" for item in files[name]]
        assert all(change.diff.startswith("--- /dev/null") for change in mine)
    assert plan.containers == {"spark-a": "none", "spark-b": "exited"}
    assert plan.image == SIM.container.image and "--tp_size 2" in plan.serve
    for node in pair_nodes:  # the plan read and probed; it wrote and ran nothing else
        assert node.puts == [] and all(is_probe_round(text) or text == CLOCK for text in node.commands)


def test_config_files_already_in_place_plan_nothing_and_one_changed_file_plans_its_diff() -> None:
    files = rendered()
    held = {name.replace("-", "_"): {config_path(item.path): item.content for item in files[name]} for name in files}
    pair = fake_pair(*nodes(**held))
    assert launch.config_changes(pair, files, ["spark-a", "spark-b"]) == []
    first = files["spark-b"][0]
    held["spark_b"][config_path(first.path)] = first.content + "# edited by hand\n"
    [change] = launch.config_changes(fake_pair(*nodes(**held)), files, ["spark-a", "spark-b"])
    assert change.node == "spark-b" and change.summary == f"update {paths.CONFIG_DIR}/{first.path}"
    assert "-# edited by hand" in change.diff


def test_a_pair_that_fails_its_preflight_plans_no_change_and_says_why() -> None:
    plan = launch.plan_launch(fake_pair(*nodes()), SIM, OPTIONS)
    assert plan.preflight and plan.changes == []
    assert {finding.node for finding in plan.preflight} >= {"spark-a"}
    assert all(finding.status.name == "FAIL" for finding in plan.preflight)
