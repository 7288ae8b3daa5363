"""The pair lock's pure parts against a fake head node: whose lock it is, and a damaged lock file."""

from __future__ import annotations

import json
import os
import socket

import pytest

from sparkpair.transport import lock


class FakeHead:
    """A head node holding one file, the lock; records the commands run."""

    name = "spark-a"
    home = "/home/op"

    def __init__(self, content: bytes | None) -> None:
        self.content = content
        self.commands: list[str] = []

    def read(self, path: str) -> bytes | None:
        assert path == f"{self.home}/{lock.LOCK_FILE}"
        return self.content

    def run(self, command: object) -> None:
        self.commands.append(command.text)  # type: ignore[attr-defined]


MINE = {"user": "op", "host": socket.gethostname(), "pid": os.getpid(), "command": "launch", "since": 0.0}


@pytest.mark.parametrize("content", [b"{not json", b"", b"[1, 2]", b'"a string"', b"\xff\xfe"])
def test_an_unreadable_lock_is_not_ours_left_in_place_and_said_so_in_one_line(content: bytes) -> None:
    head, warnings = FakeHead(content), []
    lock.release(head, MINE, warnings.append)  # type: ignore[arg-type]
    assert head.commands == []
    assert warnings == [f"spark-a: left the lock /home/op/{lock.LOCK_FILE} in place: it is unreadable, so it may not "
                        "be this run's (`sparkpair unlock` removes it)"]


def test_release_removes_only_our_own_lock() -> None:
    ours, theirs, gone = FakeHead(json.dumps(MINE).encode()), FakeHead(json.dumps({**MINE, "pid": 1}).encode()), \
        FakeHead(None)
    for head in (ours, theirs, gone):
        lock.release(head, MINE, pytest.fail)  # type: ignore[arg-type]
    assert ours.commands == [f"rm -f /home/op/{lock.LOCK_FILE}"] and theirs.commands == gone.commands == []


def test_a_lock_damaged_while_held_does_not_hide_the_commands_own_error(monkeypatch: pytest.MonkeyPatch) -> None:
    head, warnings = FakeHead(b"{damaged"), []
    monkeypatch.setattr(lock, "_try_take", lambda head, mine: None)
    with pytest.raises(RuntimeError, match="the command's own failure"):
        with lock.held(head, "launch", warnings.append):  # type: ignore[arg-type]
            raise RuntimeError("the command's own failure")
    assert len(warnings) == 1 and head.commands == []


@pytest.mark.parametrize("content, expected", [
    (b'{"user": "op", "host": "laptop", "pid": 7, "command": "launch", "since": 0}', "op@laptop pid 7 (launch, since "),
    (b'{"user": "op", "since": "yesterday"}', "op@None pid None (None, since an unknown time)"),
])
def test_describe_names_the_holder_even_from_a_hand_written_lock(content: bytes, expected: str) -> None:
    assert lock.describe(lock.parse(content)).startswith(expected)  # type: ignore[arg-type]


def test_a_hand_written_pid_is_not_stale() -> None:
    assert not lock.is_stale({"host": socket.gethostname(), "pid": None})
    assert not lock.is_stale({"host": socket.gethostname(), "pid": "x"})
