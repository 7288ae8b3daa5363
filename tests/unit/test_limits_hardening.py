"""Every read from a node or an engine container has a byte cap and a deadline (issue 33, item 3).

Before: `tail -q -n 400` of the rank logs and `docker logs --tail 2000` had no byte cap (400 lines of a hostile
rank log came back as 192 MiB), a command's output was kept whole in memory, and `exec_in` ran with
`timeout=None`, so an `exit_code` the engine had made a FIFO held `exit_code()` (and launch's lock) forever.
Now the transport refuses a command without both (`transport.node.require_limits`, asked by the real node and by
the unit tests' scripted node, so every flow test proves its calls carry them; the types admit no None, which
mypy checks at every call site); the real node stops reading at the cap and at the deadline; the engine's files
are read through `[ -f ] && head -c` and `tail -c`; the bundle's directories and logs are capped on the node.
"""

from __future__ import annotations

import ast
import inspect
import os
import shlex
import subprocess
import threading
import time
from pathlib import Path

import pytest
from fakenode import UNEXPECTED, Call, FakeNode, Reply, prefix

from sparkpair.engine import bundle, lifecycle
from sparkpair.inventory import Inventory, read_inventory
from sparkpair.runtimes import runtime_named
from sparkpair.transport import NodeConnection, SshTarget, docker_cli, node, session
from sparkpair.transport.ssh import OVER_CAP, TIMED_OUT

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def example_inventory(example_inventory_path: Path) -> Inventory:
    return read_inventory(example_inventory_path)


# --- the seam: no read without its limits ------------------------------------------------------------------

@pytest.mark.parametrize("cls", [node.Node, NodeConnection, FakeNode])
def test_every_command_method_takes_a_deadline_and_a_cap_and_none_is_no_value(cls: type) -> None:
    for method, limits in (("run", ("timeout", "cap")), ("check", ("timeout", "cap")), ("stream", ("timeout",))):
        parameters = inspect.signature(getattr(cls, method)).parameters
        for name in limits:
            parameter = parameters[name]
            assert "None" not in str(parameter.annotation), (cls, method, name, parameter.annotation)
            assert isinstance(parameter.default, (int, float)) and parameter.default > 0, (cls, method, name)


@pytest.mark.parametrize("timeout,cap", [(None, 10), (0, 10), (-1, 10), (10, None), (10, 0)])
def test_a_call_without_a_deadline_or_a_cap_is_refused(timeout: object, cap: object) -> None:
    with pytest.raises(ValueError):
        node.require_limits(timeout, cap)  # type: ignore[arg-type]
    fake = FakeNode().on(prefix("echo"), "x")
    with pytest.raises(AssertionError, match="without its limits"):
        fake.run(["echo"], timeout=timeout, cap=cap)  # type: ignore[arg-type]
    UNEXPECTED.clear()
    real = NodeConnection(SshTarget("spark-a", "127.0.0.1", 22, "nvidia", Path("/nonexistent"), Path("/nonexistent")))
    with pytest.raises(ValueError):
        real.run(["echo"], timeout=timeout, cap=cap)  # type: ignore[arg-type]


def test_no_call_site_passes_none_for_a_deadline_or_a_cap() -> None:
    """What mypy proves from the types, as a plain scan: no `timeout=None`, `cap=None` in any call."""
    found = []
    for path in sorted((ROOT / "sparkpair").rglob("*.py")):
        for item in ast.walk(ast.parse(path.read_text())):
            if isinstance(item, ast.Call):
                for keyword in item.keywords:
                    if keyword.arg in ("timeout", "cap") and isinstance(keyword.value, ast.Constant) and \
                            keyword.value.value is None:
                        found.append(f"{path.relative_to(ROOT)}:{item.lineno}")
    assert not found, found


# --- the real node stops at the cap and at the deadline ----------------------------------------------------

class EndlessChannel:
    """A session channel whose command prints forever (or says nothing, and never ends)."""

    def __init__(self, chunk: bytes) -> None:
        self.chunk, self.closed, self.received = chunk, False, 0
        self.status_event = threading.Event()

    def exec_command(self, text: str) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        pass

    def shutdown_write(self) -> None:
        pass

    def settimeout(self, timeout: float) -> None:
        self.timeout = timeout

    def recv(self, size: int) -> bytes:
        if not self.chunk:
            time.sleep(self.timeout)
            raise TimeoutError
        self.received += len(self.chunk)
        return self.chunk

    def recv_stderr(self, size: int) -> bytes:
        time.sleep(0.05)
        return b"" if self.closed else b"e"

    def exit_status_ready(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


class Client:
    def __init__(self, channel: EndlessChannel) -> None:
        self.channel = channel

    def get_transport(self) -> Client:
        return self

    def open_session(self, timeout: float | None = None) -> EndlessChannel:
        return self.channel


def _real(channel: EndlessChannel) -> NodeConnection:
    connection = NodeConnection(SshTarget("spark-a", "127.0.0.1", 22, "nvidia", Path("/nonexistent"),
                                          Path("/nonexistent")))
    connection._open = lambda timeout=None: Client(channel)  # type: ignore[method-assign,assignment,return-value]
    return connection


def test_the_real_node_stops_reading_at_the_cap_and_closes_the_channel() -> None:
    channel = EndlessChannel(b"x" * 65536)
    result = _real(channel).run(["cat", "/dev/zero"], cap=1 << 20)
    assert result.over_cap and not result.ok and result.exit_code == OVER_CAP
    assert len(result.stdout) <= 1 << 20 and channel.closed and channel.received < 2 << 20
    assert "printed more than 1048576 bytes" in result.stderr


def test_the_real_node_stops_waiting_at_the_deadline() -> None:
    channel = EndlessChannel(b"")
    started = time.monotonic()
    result = _real(channel).run(["cat", "/fifo"], timeout=1.5)
    assert result.timed_out and result.exit_code == TIMED_OUT and channel.closed
    assert time.monotonic() - started < 10


def test_a_remote_program_cannot_hand_an_endless_line() -> None:
    """session.RemoteProcess (the model copy's node programs): a line never ending is cut at MAX_LINE."""
    class Stream:
        def __init__(self) -> None:
            self.sizes: list[int | None] = []

        def readline(self, size: int | None = None) -> bytes:
            self.sizes.append(size)
            return b"x" * (size or 1 << 30) if len(self.sizes) < 3 else b""

    stream = Stream()
    process = session.RemoteProcess.__new__(session.RemoteProcess)
    process._lines = session.queue.Queue(session.QUEUED)
    process._read(stream, True)  # type: ignore[arg-type]
    assert stream.sizes[0] == session.MAX_LINE
    assert [len(process._lines.get_nowait() or "") for _ in range(2)] == [session.MAX_LINE] * 2


# --- the engine's files: read capped, a FIFO never opened --------------------------------------------------

def _container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNode:
    """A node whose `docker exec NAME sh -c SCRIPT` runs SCRIPT here, with the engine's log directory in tmp_path."""
    monkeypatch.setattr(lifecycle, "LOG", str(tmp_path))

    def in_here(call: Call, fake: FakeNode) -> Reply:
        argv = shlex.split(call.text)
        done = subprocess.run(["sh", "-c", argv[-1]], capture_output=True, timeout=min(call.timeout or 30, 30), text=True,
                              errors="replace")
        return Reply(done.stdout, done.stderr, done.returncode)

    return FakeNode().on(prefix("docker exec"), in_here)


def test_an_exit_code_the_engine_made_a_fifo_is_no_exit_code_not_a_hang(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, example_inventory: Inventory) -> None:
    head = _container(tmp_path, monkeypatch)
    os.mkfifo(tmp_path / "exit_code")
    os.mkfifo(tmp_path / "serve.pid")
    started = time.monotonic()
    assert lifecycle.exit_code(head, example_inventory) is None
    assert lifecycle.engine_running(head, example_inventory) is False
    assert time.monotonic() - started < 10
    assert all(call.timeout == docker_cli.EXEC_TIMEOUT_S for call in head.calls)


def test_400_lines_of_a_hostile_rank_log_come_back_capped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, example_inventory: Inventory) -> None:
    head = _container(tmp_path, monkeypatch)
    runtime = runtime_named("vllm")
    log = tmp_path / "serve.log"
    log.write_bytes((b"y" * (512 << 10) + b"\n") * 20 + b"the last line\n")  # 10 MiB in 21 lines
    monkeypatch.setattr(runtime, "rank_log_paths", lambda rank: [str(log)])
    text = lifecycle.rank_logs(head, example_inventory, runtime, 0, 400)
    assert len(text.encode()) <= docker_cli.TAIL_CAP and text.endswith("the last line\n")
    assert head.calls[-1].cap == docker_cli.EXEC_CAP


# --- the bundle: logs and directories capped on the node, the round capped ---------------------------------

def test_the_bundle_caps_the_engine_logs_and_each_directory_on_the_node(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, example_inventory: Inventory) -> None:
    asked = bundle.node_probes(example_inventory, "spark-a", True)
    assert asked["engine/docker-logs.txt"].command.text.endswith(f"| tail -c {bundle.FILE_LIMIT}")
    monkeypatch.setattr(bundle, "FILE_LIMIT", 1000)
    monkeypatch.setattr(bundle, "TREE_LIMIT", 2500)
    for index in range(5):
        (tmp_path / f"rank{index}.log").write_bytes(b"z" * 5000)
    script = bundle._tree(bundle.Shell("cd {} || exit 0; ", str(tmp_path))).text
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60)
    files = bundle.parse_sections(done.stdout)
    assert sorted(files) == ["rank0.log", "rank1.log"] and all(len(text) == 1000 for text in files.values())
    assert "skipped ./rank2.log" in done.stderr


def test_the_bundles_round_is_read_with_its_cap_and_deadline(example_inventory: Inventory) -> None:
    head = FakeNode().on(lambda text: True, Reply(exit_code=1))
    bundle.collect_node(head, example_inventory, True)
    assert [(call.cap, call.timeout) for call in head.calls][0] == (bundle.ROUND_CAP, bundle.ROUND_TIMEOUT_S)
