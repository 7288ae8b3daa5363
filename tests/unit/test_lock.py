"""The pair lock's pure parts against a fake head node: whose lock it is, and a damaged lock file."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from sparkpair.transport import CommandResult, lock


class FakeHead:
    """A head node whose home is a temporary directory: commands run in a real local shell."""

    name = "spark-a"

    def __init__(self, home: Path, content: bytes | None) -> None:
        self.home = str(home)
        self.lock = home / lock.LOCK_FILE
        self.lock.parent.mkdir(parents=True, exist_ok=True)
        if content is not None:
            self.lock.write_bytes(content)

    def run(self, command: object) -> CommandResult:
        done = subprocess.run(["sh", "-c", command.text], capture_output=True)  # type: ignore[attr-defined]
        return CommandResult(self.name, command.text, done.returncode,  # type: ignore[attr-defined]
                             done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"))


MINE = {"user": "op", "host": socket.gethostname(), "pid": os.getpid(), "command": "launch", "since": 0.0}


@pytest.mark.parametrize("content", [b"{not json", b"", b"[1, 2]", b'"a string"', b"\xff\xfe"])
def test_an_unreadable_lock_is_not_ours_left_in_place_and_said_so_in_one_line(tmp_path: Path, content: bytes) -> None:
    head, warnings = FakeHead(tmp_path, content), []
    lock.release(head, MINE, warnings.append)  # type: ignore[arg-type]
    assert head.lock.read_bytes() == content
    assert warnings == [f"spark-a: left the lock {tmp_path}/{lock.LOCK_FILE} in place: it is unreadable, so it may not "
                        "be this run's (`sparkpair unlock` removes it)"]


def test_release_removes_only_our_own_lock(tmp_path: Path) -> None:
    ours = FakeHead(tmp_path / "ours", json.dumps(MINE).encode())
    theirs = FakeHead(tmp_path / "theirs", json.dumps({**MINE, "pid": 1}).encode())
    gone = FakeHead(tmp_path / "gone", None)
    for head in (ours, theirs, gone):
        lock.release(head, MINE, pytest.fail)  # type: ignore[arg-type]
    assert not ours.lock.exists() and theirs.lock.exists() and not gone.lock.exists()


def test_take_is_atomic_and_names_the_holder_of_a_taken_lock(tmp_path: Path) -> None:
    head = FakeHead(tmp_path, None)
    assert lock._try_take(head, MINE) is None  # type: ignore[arg-type]
    assert json.loads(head.lock.read_text()) == MINE and oct(head.lock.stat().st_mode & 0o777) == "0o600"
    other = {**MINE, "pid": 1, "host": "laptop"}
    found = lock._try_take(head, other)  # type: ignore[arg-type]
    assert found is not None and found.info == MINE and found.content == json.dumps(MINE)
    assert sorted(p.name for p in head.lock.parent.iterdir()) == [head.lock.name]  # no staged file left


def test_a_lock_damaged_while_held_does_not_hide_the_commands_own_error(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    head, warnings = FakeHead(tmp_path, b"{damaged"), []
    monkeypatch.setattr(lock, "_try_take", lambda head, mine, replacing=None: None)
    with pytest.raises(RuntimeError, match="the command's own failure"):
        with lock.held(head, "launch", warnings.append):  # type: ignore[arg-type]
            raise RuntimeError("the command's own failure")
    assert len(warnings) == 1 and head.lock.read_bytes() == b"{damaged"


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
