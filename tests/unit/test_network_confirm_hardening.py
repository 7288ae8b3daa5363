"""setup-network's confirmation, decided and carried out against fake nodes: the new network stays only
when both nodes confirmed it; when one node's watchdog fired (or its confirmation got no answer), the
node that confirmed is rolled back too, each node is checked against its state before the apply, and
the report says what each one holds. The same on the simulated pair: tests/integration/test_network_confirm.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from fakenode import FakeNode, fake_pair

from sparkpair import apply
from sparkpair.errors import ConnectError
from sparkpair.inventory import read_inventory
from sparkpair.network import guarded, rollback, verify, watchdog
from sparkpair.network.run import SetupRun
from sparkpair.probes import net
from sparkpair.progress import Event

INVENTORY = read_inventory(Path(__file__).parent.parent / "fixtures" / "inventory" / "sim.yaml")
NODES = [node.name for node in INVENTORY.nodes]
BEFORE = {"enp1s0f1np1": {"mtu": 1500, "up": False, "ipv4": []}, "enP2p1s0f1np1": {"mtu": 1500, "up": False, "ipv4": []}}
NEW = "enp1s0f1np1 up mtu 9000 198.19.1.11/24"


def _interface(name: str, mtu: int, up: bool, addresses: list[str]) -> net.Interface:
    return net.Interface(name, "", mtu, up, up, tuple(
        net.Address(a.split("/")[0], int(a.split("/")[1]), "inet", False) for a in addresses))


# --- the verdict (pure) ------------------------------------------------------------------------------

def test_the_new_network_stays_only_when_every_node_confirmed() -> None:
    verdict = guarded.judge_confirmation(NODES, {"spark-a": True, "spark-b": True}, {})
    assert verdict.keep and verdict.kept == NODES and verdict.missed == {}


def test_a_watchdog_that_fired_on_one_node_rolls_back_the_node_that_confirmed() -> None:
    verdict = guarded.judge_confirmation(NODES, {"spark-a": True, "spark-b": False}, {})
    assert not verdict.keep and verdict.fired
    assert verdict.kept == ["spark-a"]
    assert verdict.missed == {"spark-b": "its watchdog fired before sparkpair could confirm"}
    assert verdict.rolling_back("spark-a") == ("confirmed, but spark-b was not: rolling spark-a back too, so that "
                                               "both nodes end as before")


def test_a_confirmation_without_an_answer_is_not_a_confirmation() -> None:
    verdict = guarded.judge_confirmation(NODES, {"spark-a": True}, {"spark-b": ConnectError("connection reset")})
    assert not verdict.keep and not verdict.fired and verdict.kept == ["spark-a"]
    assert verdict.missed["spark-b"].startswith("could not be confirmed (connection reset)")


@pytest.mark.parametrize("now, changed", [
    ({"enp1s0f1np1": (1500, False, []), "enP2p1s0f1np1": (1500, False, [])}, []),
    ({"enp1s0f1np1": (9000, True, ["198.19.1.11/24"]), "enP2p1s0f1np1": (1500, False, [])},
     [f"enp1s0f1np1 is {NEW.split(' ', 1)[1]}, was down mtu 1500 no address"]),
    ({"enp1s0f1np1": (1500, False, [])}, ["enP2p1s0f1np1 is absent, was down mtu 1500 no address"]),
])
def test_twins_are_compared_with_their_state_before(now: dict[str, tuple[int, bool, list[str]]],
                                                     changed: list[str]) -> None:
    interfaces = {name: _interface(name, *state) for name, state in now.items()}
    assert rollback.twins_changed(INVENTORY.node("spark-a"), json.dumps(BEFORE), interfaces) == changed


def test_files_are_compared_with_the_journals_backups() -> None:
    """By the root helper's `differs` (carried out on the fake node's files as the helper does it)."""
    def netplan(name: str) -> str:
        return f"/etc/netplan/{name}.yaml"

    def backup(name: str) -> str:
        return f"/var/backups/sparkpair/s/etc%netplan%{name}.yaml"

    node = FakeNode("spark-a", files={netplan("kept"): "old", backup("kept"): "old", netplan("changed"): "new",
                                      backup("changed"): "old", netplan("created"): "new"}).files_behave()
    journal = apply.Journal("network", "s", [
        {"path": netplan("kept"), "backup": backup("kept"), "sudo": True},
        {"path": netplan("changed"), "backup": backup("changed"), "sudo": True},
        {"path": netplan("created"), "backup": None, "sudo": True},
        {"path": netplan("never"), "backup": None, "sudo": True}])
    assert rollback.files_changed(node, journal) == [
        f"{netplan('changed')} differs from its backup", f"{netplan('created')} is there (it was not)"]
    assert [call.sudo for call in node.calls] == [True]  # one round trip, as root


# --- carried out, against fake nodes -----------------------------------------------------------------

class Sides:
    """Which side of the apply each fake node is on, and how often each was rolled back."""

    def __init__(self) -> None:
        self.side, self.rolled_back = dict.fromkeys(NODES, "new"), dict.fromkeys(NODES, 0)


def _run(events: list[Event]) -> SetupRun:
    far = time.monotonic() + 600
    pair = fake_pair(*(FakeNode(name) for name in NODES))
    run = SetupRun(pair, INVENTORY, SimpleNamespace(stamp="s"), events.append)  # type: ignore[arg-type]
    run.network_applied = True
    run.twins_before = {name: json.dumps(BEFORE) for name in NODES}
    run.armed = {name: watchdog.Armed(name, "a detached process (pid 1)", 60, far, far) for name in NODES}
    return run


@pytest.fixture
def nodes(monkeypatch: pytest.MonkeyPatch) -> Sides:
    """Both nodes applied and verified; spark-b's watchdog fires as its confirmation arrives."""
    sides = Sides()
    monkeypatch.setattr(guarded, "reconnect", lambda *args, **kw: [])
    monkeypatch.setattr(verify, "verify_link", lambda *args, **kw: [])

    def confirm(node: FakeNode, cancel: bool = False) -> bool:
        if node.name == "spark-b":
            sides.side[node.name] = "before"  # its watchdog fired: it reverted
            return False
        return True

    def back(run: SetupRun, node: FakeNode, cut_off: bool) -> str:
        sides.side[node.name] = "before"
        return "reverted by its watchdog"

    def roll_back(node: FakeNode, inventory_node: object) -> list[str]:
        sides.side[node.name], sides.rolled_back[node.name] = "before", sides.rolled_back[node.name] + 1
        return ["removed /etc/netplan/40-sparkpair-cx7.yaml"]

    monkeypatch.setattr(watchdog, "confirm", confirm)
    monkeypatch.setattr(guarded, "_back", back)
    monkeypatch.setattr(rollback, "roll_back", roll_back)
    monkeypatch.setattr(rollback, "differences", lambda node, *args: [NEW] if sides.side[node.name] == "new" else [])
    monkeypatch.setattr(apply, "read_journal", lambda node, command: apply.Journal(command, "s"))
    monkeypatch.setattr(apply, "mark_restored", lambda node, command: None)
    monkeypatch.setattr(verify, "node_state",
                        lambda node, inventory_node: NEW if sides.side[node.name] == "new" else "as before")
    return sides


def test_a_node_that_confirmed_is_rolled_back_when_the_other_ones_watchdog_fired(nodes: Sides) -> None:
    events: list[Event] = []
    run = _run(events)
    assert guarded._verify_and_confirm(run) is False
    assert nodes.side == {"spark-a": "before", "spark-b": "before"}
    assert nodes.rolled_back == {"spark-a": 1, "spark-b": 0}
    assert run.result.rolled_back and not run.armed and run.network_confirmed == []
    said = [(e.node, e.text) for e in events]
    assert ("", "spark-b: its watchdog fired before sparkpair could confirm") in said
    assert ("spark-a", "confirmed, but spark-b was not: rolling spark-a back too, so that both nodes end as "
                       "before") in said
    assert not any("the new network stays" in text for _, text in said)
    assert ("spark-a", "back as before this run: its netplan files and QSFP twins as they were") in said[-5:-2]
    assert said[-2:] == [("spark-a", "now as before"), ("spark-b", "now as before")]


def test_a_node_still_on_the_new_network_after_its_rollback_is_reported_as_such(nodes: Sides,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rollback, "roll_back", lambda node, inventory_node: ["netplan generate && netplan apply"])
    monkeypatch.setattr(guarded, "SETTLE_S", 0.0)
    events: list[Event] = []
    run = _run(events)
    assert guarded._verify_and_confirm(run) is False
    assert not run.result.rolled_back
    said = [(e.node, e.text, e.level) for e in events]
    errors = [text for node, text, level in said if level == "error"]
    assert errors[-1].startswith(f"spark-a: rollback failed: not back as before this run: {NEW}"), errors
    assert ("spark-a", f"now {NEW}", "info") in said  # what it holds, not what it should
