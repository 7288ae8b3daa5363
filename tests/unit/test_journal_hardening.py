"""setup-network --restore against journals and first-touch records that are cut short, corrupt or partial.

The journals in tests/fixtures/journals were written by a real setup-network on the simulated pair
(spark-a's ~/.sparkpair/journal/{network,trust}.json and ~/.sparkpair/first-touch/twins.json). Cut at
every byte, or corrupted field by field, each gives one line naming the node, the file and the fix,
before anything on either node changes; a node whose records are sound is still restored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakenode import FakeNode, fake_pair, prefix

from sparkpair.errors import SparkpairError
from sparkpair.inventory import read_inventory
from sparkpair.network import restore
from sparkpair.progress import Event

FIXTURES = Path(__file__).parent.parent / "fixtures"
INVENTORY = read_inventory(FIXTURES / "inventory" / "sim.yaml")
HOME = "/home/nvidia"
JOURNALS = {name: (FIXTURES / "journals" / f"{name}.json").read_bytes() for name in ("network", "trust")}
TWINS = (FIXTURES / "journals" / "twins.json").read_bytes()
TWINS_PATH = f"{HOME}/.sparkpair/first-touch/twins.json"
READ_ONLY = ("ls -A ", "sparkpair-root first-touch-list")  # what restore may run on a node before it changes anything


def journal_path(name: str) -> str:
    return f"{HOME}/.sparkpair/journal/{name}.json"


BACKUP = f"{HOME}/.sparkpair/backups/20261125-214637/home%nvidia%.ssh%authorized_keys"  # the trust journal's one backup
UNDONE = (prefix("sparkpair-root netplan-apply"), prefix("sparkpair-root twin "))  # what restore runs beyond files


def node_with(name: str = "spark-a", **journals: bytes) -> FakeNode:
    """A node holding the real journals (journals replaces some), the files they name and the trust backup."""
    files = {journal_path(command): raw for command, raw in {**JOURNALS, **journals}.items()}
    files |= {BACKUP: b"ssh-ed25519 AAAAold before\n", f"{HOME}/.ssh/authorized_keys": b"ssh-ed25519 AAAAold after\n",
              f"{HOME}/.ssh/id_ed25519": b"key", f"{HOME}/.ssh/id_ed25519.pub": b"pub", f"{HOME}/.ssh/known_hosts": b"kh",
              "/etc/netplan/40-sparkpair-cx7.yaml": b"network: {}"}
    node = FakeNode(name, home=HOME, files=files).files_behave()
    for undone in UNDONE:
        node.on(undone)
    return node


def changes(node: FakeNode) -> list[str]:
    """The commands that may change a node: all but the read-only ones."""
    return [text for text in node.commands if not text.startswith(READ_ONLY)]


def assert_one_clear_line(error: SparkpairError, node: str, file: str) -> str:
    lines = error.lines()
    assert len(lines) == 1 and "\n" not in lines[0] and "Traceback" not in lines[0]
    assert lines[0].startswith(f"{node}: ") and file in lines[0] and f"(fix: set it aside with mv {file} " in lines[0]
    return lines[0]


def test_the_real_journals_restore_whole() -> None:
    node = node_with()
    assert restore.undo_last(node, INVENTORY) == [
        "restored /home/nvidia/.ssh/authorized_keys", "removed /home/nvidia/.ssh/known_hosts",
        "removed /home/nvidia/.ssh/id_ed25519.pub", "removed /home/nvidia/.ssh/id_ed25519",
        "removed /etc/netplan/40-sparkpair-cx7.yaml", "netplan generate && netplan apply",
        "twins back to their previous MTU, addresses and link state"]
    assert node.files[f"{HOME}/.ssh/authorized_keys"] == b"ssh-ed25519 AAAAold before\n"  # its backup, put back
    assert not {f"{HOME}/.ssh/{name}" for name in ("id_ed25519", "id_ed25519.pub", "known_hosts")} & set(node.files)
    assert "/etc/netplan/40-sparkpair-cx7.yaml" not in node.files
    assert {journal_path(command) + ".restored" for command in JOURNALS} <= set(node.files)
    undone = [call.sudo for call in node.calls if call.text.startswith(("sparkpair-root netplan-apply", "sparkpair-root twin "))]
    assert undone == [True, True]


@pytest.mark.parametrize("command", sorted(JOURNALS))
@pytest.mark.parametrize("undo", [restore.undo_last, restore.undo_first_touch], ids=["last", "first-touch"])
def test_a_journal_cut_at_every_byte_is_one_clear_line_and_changes_nothing(command: str, undo: Any) -> None:
    raw = JOURNALS[command]
    for cut in range(len(raw)):
        node = node_with(**{command: raw[:cut]})
        with pytest.raises(SparkpairError) as raised:
            undo(node, INVENTORY)
        line = assert_one_clear_line(raised.value, "spark-a", journal_path(command))
        assert "it is not whole JSON, cut short or corrupt" in line, (cut, line)
        assert changes(node) == [], cut


def _edited(command: str, edit: Any) -> bytes:
    data = json.loads(JOURNALS[command])
    edit(data)
    return json.dumps(data).encode()


CORRUPT: dict[str, tuple[str, bytes, str]] = {
    "not UTF-8": ("trust", JOURNALS["trust"].replace(b"nvidia", b"nv\xffidia", 1), "not UTF-8"),
    "a list": ("trust", b"[]", "not a JSON object"),
    "empty": ("network", b"", "cut short or corrupt: expecting value at character 0 of 0"),
    "another command": ("network", _edited("network", lambda d: d.update(command="trust")), "'command'"),
    "a stamp that walks": ("trust", _edited("trust", lambda d: d.update(stamp="../../etc")), "'stamp'"),
    "no stamp": ("trust", _edited("trust", lambda d: d.pop("stamp")), "'stamp'"),
    "entries not a list": ("trust", _edited("trust", lambda d: d.update(entries={})), "'entries'"),
    "a relative path": ("network", _edited("network", lambda d: d["entries"][0].update(path="etc/netplan/x.yaml")),
                        "entry 1: its 'path'"),
    "a path with ..": ("network", _edited("network", lambda d: d["entries"][0].update(path="/etc/netplan/../shadow")),
                       "entry 1: its 'path'"),
    "a path with a newline": ("trust", _edited("trust", lambda d: d["entries"][2].update(path="/tmp/a\nb")),
                              "entry 3: its 'path'"),
    "an entry without its backup": ("trust", _edited("trust", lambda d: d["entries"][3].pop("backup")),
                                    "entry 4: it does not hold exactly"),
    "a backup elsewhere": ("trust", _edited("trust", lambda d: d["entries"][3].update(backup="/tmp/planted")),
                           "entry 4: its 'backup'"),
    "sudo as text": ("network", _edited("network", lambda d: d["entries"][0].update(sudo="yes")), "'sudo'"),
    "finished as text": ("trust", _edited("trust", lambda d: d.update(finished="yes")), "'finished'"),
    "extra not texts": ("network", _edited("network", lambda d: d.update(extra={"twins_before": 5})), "'extra'"),
    "twins cut short": ("network", _edited("network", lambda d: d["extra"].update(
        twins_before=d["extra"]["twins_before"][:40])), "'twins_before': it is not JSON"),
    "twins with a bad mtu": ("network", _edited("network", lambda d: d["extra"].update(
        twins_before='{"enp1s0f1np1": {"mtu": "9000; reboot", "up": true, "ipv4": []}}')), "'mtu'"),
    "twins with a bad address": ("network", _edited("network", lambda d: d["extra"].update(
        twins_before='{"enp1s0f1np1": {"mtu": 9000, "up": true, "ipv4": ["198.19.1.11/24 dev lo"]}}')), "'ipv4'"),
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_a_corrupt_or_partial_journal_names_what_is_wrong_and_changes_nothing(case: str) -> None:
    command, raw, said = CORRUPT[case]
    node = node_with(**{command: raw})
    with pytest.raises(SparkpairError) as raised:
        restore.undo_last(node, INVENTORY)
    assert said in assert_one_clear_line(raised.value, "spark-a", journal_path(command))
    assert changes(node) == []


def test_restore_last_with_one_unreadable_journal_says_so_per_node_and_changes_neither() -> None:
    sound, cut = node_with("spark-a"), node_with("spark-b", network=JOURNALS["network"][:200])
    events: list[Event] = []
    assert restore.restore(fake_pair(sound, cut), INVENTORY, events.append, last=True) is False
    errors = [event.text for event in events if event.level == "error"]
    assert len(errors) == 1 and errors[0].startswith("spark-b: restore --last failed: the journal "
                                                     f"{journal_path('network')} cannot be read (it is not whole JSON")
    assert ("", "nothing was changed on either node") in [(e.node, e.text) for e in events]
    assert changes(sound) == [] and changes(cut) == []


def test_restore_puts_back_the_node_it_can_and_reports_the_other_exactly() -> None:
    sound, cut = node_with("spark-a"), node_with("spark-b", trust=JOURNALS["trust"][:123])
    events: list[Event] = []
    assert restore.restore(fake_pair(sound, cut), INVENTORY, events.append) is False
    results = {event.node: event.text for event in events if event.level == "result"}
    errors = [event.text for event in events if event.level == "error"]
    assert "spark-a" in results and "removed /etc/netplan/40-sparkpair-cx7.yaml" in results["spark-a"]
    assert len(errors) == 1 and errors[0].startswith("spark-b: restore failed: the journal ")
    assert changes(sound) and changes(cut) == []


@pytest.mark.parametrize("raw", [TWINS[:cut] for cut in range(len(TWINS))] + [b"\xff" + TWINS, b"[1, 2]"],
                         ids=[f"cut-{cut}" for cut in range(len(TWINS))] + ["not-utf8", "a-list"])
def test_a_twins_record_cut_or_corrupt_is_one_clear_line_and_changes_nothing(raw: bytes) -> None:
    record = "%2Fhome%2Fnvidia%2F.ssh%2Fauthorized_keys"
    node = FakeNode("spark-a", home=HOME, files={TWINS_PATH: raw, f"{HOME}/.sparkpair/first-touch/{record}": b"keys"})
    node.files_behave()
    with pytest.raises(SparkpairError) as raised:
        restore.undo_first_touch(node, INVENTORY)
    line = raised.value.lines()[0]
    assert len(raised.value.lines()) == 1 and line.startswith("spark-a: the record of the twins")
    assert f"{TWINS_PATH}, cannot be read" in line and f"(fix: set it aside with mv {TWINS_PATH} " in line
    assert changes(node) == []


def test_a_first_touch_record_that_walks_out_of_its_path_is_refused_before_any_change() -> None:
    walking = f"{HOME}/.sparkpair/first-touch/%2Fetc%2Fnetplan%2F..%2F..%2Froot%2F.bashrc"
    node = FakeNode("spark-a", home=HOME, files={TWINS_PATH: TWINS, walking: b"x"}).files_behave()
    with pytest.raises(SparkpairError) as raised:
        restore.undo_first_touch(node, INVENTORY)
    assert "does not name a clean absolute path" in raised.value.lines()[0] and changes(node) == []
