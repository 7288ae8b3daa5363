"""NodeConnection.read: a node's file is hostile input, read with a byte cap and a deadline (issue 24's rule for
every network read), through a stand-in SFTP session (paramiko's SFTPClient has the same open/read/get_channel)."""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType

import pytest

from sparkpair.errors import RemoteCommandError
from sparkpair.transport import NodeConnection, SshTarget


class Channel:
    def __init__(self) -> None:
        self.timeout: float | None = None

    def gettimeout(self) -> float | None:
        return self.timeout

    def settimeout(self, timeout: float | None) -> None:
        self.timeout = timeout


class EndlessFile:
    """A file that never ends (`/dev/zero`-like, or a FIFO fed by the node), optionally slowly."""

    def __init__(self, delay: float, sizes: list[int]) -> None:
        self.delay, self.sizes = delay, sizes

    def __enter__(self) -> EndlessFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        return None

    def read(self, size: int | None = None) -> bytes:
        if size is None:
            raise AssertionError("the whole file was asked for, with no limit")
        self.sizes.append(size)
        time.sleep(self.delay)
        return b"x" * (1 if self.delay else size)


class Sftp:
    def __init__(self, delay: float) -> None:
        self.channel, self.sizes, self.delay = Channel(), list[int](), delay

    def get_channel(self) -> Channel:
        return self.channel

    def open(self, path: str, mode: str) -> EndlessFile:
        if path == "/missing":
            raise FileNotFoundError(path)
        return EndlessFile(self.delay, self.sizes)


def _node(sftp: Sftp) -> NodeConnection:
    connection = NodeConnection(SshTarget("spark-b", "127.0.0.1", 22, "nvidia", Path("/nonexistent"),
                                          Path("/nonexistent")))
    connection._sftp = sftp  # type: ignore[assignment]
    return connection


def test_a_file_that_never_ends_is_refused_after_the_cap_naming_node_and_path() -> None:
    sftp = Sftp(0.0)
    with pytest.raises(RemoteCommandError) as raised:
        _node(sftp).read("/home/nvidia/.sparkpair/state/launch.json", cap=1 << 20)
    line = raised.value.lines()[0]
    assert line.startswith("spark-b: ") and "launch.json is larger than 1048576 bytes" in line
    assert sum(sftp.sizes) <= (1 << 20) + 1  # never asked for more than the cap and one byte
    assert sftp.channel.timeout is None  # the session's own timeout put back


def test_a_node_that_trickles_a_file_cannot_hold_a_read_past_its_deadline() -> None:
    started = time.monotonic()
    with pytest.raises(RemoteCommandError) as raised:
        _node(Sftp(0.05)).read("/home/nvidia/.sparkpair/journal.json", timeout=0.3)
    assert time.monotonic() - started < 2.0
    assert "journal.json" in raised.value.lines()[0] and "no whole answer within 0.3 s" in raised.value.lines()[0]


def test_a_missing_file_is_none() -> None:
    assert _node(Sftp(0.0)).read("/missing") is None
