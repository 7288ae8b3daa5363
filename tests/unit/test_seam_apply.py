"""The one executor, its journal and restore, on two scripted nodes (tests/fakenode.py): what each node
holds after an apply, after a failure on one node, after a timeout, and after restore. No pair, no root."""

from __future__ import annotations

import pytest
from fakenode import TIMES_OUT, FakeNode, Reply, fake_pair

from sparkpair import apply
from sparkpair.apply import executor, firsttouch
from sparkpair.transport import Root

HOME = "/home/nvidia"
STAMP = "20261126-000000"
KEYS = f"{HOME}/.ssh/authorized_keys"
NETPLAN = "/etc/netplan/40-sparkpair-cx7.yaml"
OLD_FILE = "/etc/netplan/01-old.yaml"


def node(name: str) -> FakeNode:
    """A node holding an authorized_keys and a netplan file sparkpair will remove; file commands act on its files."""
    fake = FakeNode(name, home=HOME, files={KEYS: b"ssh-ed25519 AAAAold before\n", OLD_FILE: b"old = 1\n"})
    return fake.files_behave()


def changes_for(name: str, then: apply.RunCommand) -> list[apply.Change]:
    return [apply.Change(name, "authorize a key", (apply.WriteFile("~/.ssh/authorized_keys", "ssh-ed25519 AAAAnew\n",
                                                                    mode=0o600),)),
            apply.Change(name, "write the netplan file", (apply.WriteFile(NETPLAN, "network: {}\n", 0o600, sudo=True),)),
            apply.Change(name, "remove the old file", (apply.RemoveFile(OLD_FILE, sudo=True),)),
            apply.Change(name, "apply it", (then,))]


APPLY = apply.RunCommand(Root("netplan-apply"), timeout=30)
APPLY_TEXT = "sparkpair-root netplan-apply"  # how the fake node sees the root verb


def before_apply(fake: FakeNode) -> dict[str, bytes]:
    return dict(fake.files)


def written(fake: FakeNode) -> dict[str, bytes]:
    """The node's files but sparkpair's own records (journals, backups, first-touch records)."""
    return {path: data for path, data in fake.files.items() if not path.startswith((f"{HOME}/.sparkpair/", "/var/"))}


def test_an_apply_writes_every_file_backs_up_what_it_replaces_and_journals_each_step() -> None:
    a, b = node("spark-a").on(APPLY_TEXT), node("spark-b").on(APPLY_TEXT)
    outcomes = apply.apply_changes(fake_pair(a, b), changes_for("spark-a", APPLY) + changes_for("spark-b", APPLY),
                                   "network", stamp=STAMP)
    assert all(outcome.ok for outcome in outcomes.values())
    assert outcomes["spark-a"].applied == ["authorize a key", "write the netplan file", "remove the old file", "apply it"]
    for fake in (a, b):
        assert written(fake) == {KEYS: b"ssh-ed25519 AAAAnew\n", NETPLAN: b"network: {}\n"}
        assert fake.modes[KEYS] == 0o600 and [sudo for path, _, _, sudo in fake.puts if path == NETPLAN] == [True]
        backup = executor.backup_path(HOME, STAMP, KEYS, sudo=False)
        assert fake.files[backup] == b"ssh-ed25519 AAAAold before\n"  # the file as it was, kept aside
        journal = apply.read_journal(fake, "network")
        assert journal is not None and journal.finished and journal.stamp == STAMP
        assert [(entry["path"], entry["backup"]) for entry in journal.entries] == [
            (KEYS, backup), (NETPLAN, None), (OLD_FILE, executor.backup_path(HOME, STAMP, OLD_FILE, sudo=True))]
        assert [call.sudo for call in fake.calls if call.text == APPLY_TEXT] == [True]


def test_restore_puts_every_file_back_as_it_was_before_the_apply() -> None:
    a = node("spark-a").on(APPLY_TEXT)
    was = before_apply(a)
    apply.apply_changes(fake_pair(a), changes_for("spark-a", APPLY), "network", stamp=STAMP)
    journal = apply.read_journal(a, "network")
    assert journal is not None
    done = apply.restore(a, journal)
    assert done == [f"restored {OLD_FILE}", f"removed {NETPLAN}", f"restored {KEYS}"]
    assert written(a) == was  # every byte as before
    assert apply.read_journal(a, "network") is None and f"{apply.journal_path(a, 'network')}.restored" in a.files


def test_a_node_that_fails_mid_apply_stops_there_and_the_other_node_finishes() -> None:
    a = node("spark-a").on(APPLY_TEXT)
    b = node("spark-b").on(APPLY_TEXT, Reply(stderr="Invalid YAML at line 3\n", exit_code=1))
    outcomes = apply.apply_changes(fake_pair(a, b), changes_for("spark-a", APPLY) + changes_for("spark-b", APPLY),
                                   "network", stamp=STAMP)
    assert outcomes["spark-a"].ok
    failed = outcomes["spark-b"]
    assert failed.failed == "`sparkpair-root netplan-apply` failed: Invalid YAML at line 3" and failed.failed_change == "apply it"
    assert not failed.timed_out and failed.applied == ["authorize a key", "write the netplan file", "remove the old file"]
    journal = apply.read_journal(b, "network")
    assert journal is not None and not journal.finished and len(journal.entries) == 3


def test_an_action_that_outlives_its_timeout_is_reported_as_timed_out() -> None:
    a = node("spark-a").on(APPLY_TEXT, TIMES_OUT)
    [outcome] = apply.apply_changes(fake_pair(a), changes_for("spark-a", APPLY), "network", stamp=STAMP).values()
    assert outcome.timed_out and outcome.failed == "`sparkpair-root netplan-apply` gave no answer within 30 s"
    assert [call.timeout for call in a.calls if call.text == APPLY_TEXT] == [30]


def test_a_command_that_exits_124_saying_it_timed_out_is_a_failure_not_a_timeout() -> None:
    """Only the transport knows a command outlived its timeout (`CommandResult.timed_out`); a node's command
    whose own exit code is 124 and whose words say "timed out after" is a command that failed."""
    forged = Reply(stderr="timed out after 30 s", exit_code=124)
    a = node("spark-a").on(APPLY_TEXT, forged)
    [outcome] = apply.apply_changes(fake_pair(a), changes_for("spark-a", APPLY), "network", stamp=STAMP).values()
    assert not outcome.timed_out and outcome.failed == "`sparkpair-root netplan-apply` failed: timed out after 30 s"


def test_first_touch_records_each_file_once_as_before_sparkpair_changed_it() -> None:
    a = node("spark-a").on(APPLY_TEXT)
    for stamp in (STAMP, "20261126-000001"):  # a second apply records nothing new
        apply.apply_changes(fake_pair(a), changes_for("spark-a", APPLY), "network", stamp=stamp, first_touch=True)
    records = firsttouch.records(a)
    assert [(record.path, record.existed, record.sudo) for record in records] == [(KEYS, True, False)] + [
        (OLD_FILE, True, True), (NETPLAN, False, True)]
    assert a.files[f"{HOME}/.sparkpair/first-touch/{firsttouch.record_name(KEYS)}"] == b"ssh-ed25519 AAAAold before\n"


@pytest.mark.parametrize("content", [b"{", b"[]", b"\xff"])
def test_an_apply_over_an_unreadable_journal_names_it_and_changes_nothing(content: bytes) -> None:
    a = node("spark-a")
    a.files[apply.journal_path(a, "network")] = content
    was = dict(a.files)
    [outcome] = apply.apply_changes(fake_pair(a), changes_for("spark-a", APPLY), "network", stamp=STAMP).values()
    assert outcome.failed is not None and f"the journal {apply.journal_path(a, 'network')} cannot be read" in outcome.failed
    assert a.files == was and a.puts == []
