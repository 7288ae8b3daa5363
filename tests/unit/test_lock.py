"""The pair lock's pure parts against a fake head node: whose lock it is, and a damaged lock file."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from fakenode import FakeNode, in_local_shell

from sparkpair.transport import lock


def head_at(home: Path, content: bytes | None) -> FakeNode:
    """A head node whose home is a temporary directory, holding content as its lock file (None: no lock);
    its commands run in a real local shell (the lock's atomic `ln` and its umask are what is proven)."""
    lock_path(home).parent.mkdir(parents=True, exist_ok=True)
    if content is not None:
        lock_path(home).write_bytes(content)
    return FakeNode("spark-a", home=str(home)).on(lambda text: True, in_local_shell())


def lock_path(home: Path) -> Path:
    return home / lock.LOCK_FILE


MINE = {"user": "op", "host": socket.gethostname(), "pid": os.getpid(), "command": "launch", "since": 0.0}


@pytest.mark.parametrize("content", [b"{not json", b"", b"[1, 2]", b'"a string"', b"\xff\xfe"])
def test_an_unreadable_lock_is_not_ours_left_in_place_and_said_so_in_one_line(tmp_path: Path, content: bytes) -> None:
    head, warnings = head_at(tmp_path, content), []
    lock.release(head, MINE, warnings.append)
    assert lock_path(tmp_path).read_bytes() == content
    assert warnings == [f"spark-a: left the lock {tmp_path}/{lock.LOCK_FILE} in place: it is unreadable, so it may not "
                        "be this run's (`sparkpair unlock` removes it)"]


def test_release_removes_only_our_own_lock(tmp_path: Path) -> None:
    homes = {name: tmp_path / name for name in ("ours", "theirs", "gone")}
    heads = [head_at(homes["ours"], json.dumps(MINE).encode()),
             head_at(homes["theirs"], json.dumps({**MINE, "pid": 1}).encode()), head_at(homes["gone"], None)]
    for head in heads:
        lock.release(head, MINE, pytest.fail)
    assert [lock_path(home).exists() for home in homes.values()] == [False, True, False]


def test_take_is_atomic_and_names_the_holder_of_a_taken_lock(tmp_path: Path) -> None:
    head, path = head_at(tmp_path, None), lock_path(tmp_path)
    assert lock._try_take(head, MINE) is None
    assert json.loads(path.read_text()) == MINE and oct(path.stat().st_mode & 0o777) == "0o600"
    other = {**MINE, "pid": 1, "host": "laptop"}
    found = lock._try_take(head, other)
    assert found is not None and found.info == MINE and found.content == json.dumps(MINE)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no staged file left


def test_a_lock_damaged_while_held_does_not_hide_the_commands_own_error(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    head, warnings = head_at(tmp_path, b"{damaged"), []
    monkeypatch.setattr(lock, "_try_take", lambda head, mine, replacing=None: None)
    with pytest.raises(RuntimeError, match="the command's own failure"):
        with lock.held(head, "launch", warnings.append):
            raise RuntimeError("the command's own failure")
    assert len(warnings) == 1 and lock_path(tmp_path).read_bytes() == b"{damaged"


@pytest.mark.parametrize("content, expected", [
    (b'{"user": "op", "host": "laptop", "pid": 7, "command": "launch", "since": 0}', "op@laptop pid 7 (launch, since "),
    (b'{"user": "op", "since": "yesterday"}', "op@None pid None (None, since an unknown time)"),
])
def test_describe_names_the_holder_even_from_a_hand_written_lock(content: bytes, expected: str) -> None:
    assert lock.describe(lock.parse(content)).startswith(expected)  # type: ignore[arg-type]


def test_a_hand_written_pid_is_not_stale() -> None:
    here = {"host": socket.gethostname(), "machine": lock.machine_id(), "boot": lock.boot_id()}
    assert not lock.is_stale({**here, "pid": None})
    assert not lock.is_stale({**here, "pid": "x"})
    assert not lock.is_stale({**here, "pid": True})
