"""How a command's output, arriving in chunks over the SSH channel, becomes lines (transport.ssh)."""

from __future__ import annotations

from sparkpair.transport import tcp
from sparkpair.transport.lines import LineSink


def test_lines_survive_chunks_split_inside_a_character_and_carriage_returns_end_lines() -> None:
    lines: list[str] = []
    sink = LineSink(lines.append)
    text = "downloading 1/2 GiB\r\ndownloading 2/2 GiB\rdone: naïve model ✓\n\ntail without newline"
    data = text.encode()
    for start in range(0, len(data), 3):  # 3-byte chunks split 'ï' and '✓' between chunks
        sink.feed(data[start:start + 3])
    sink.flush()
    assert lines == ["downloading 1/2 GiB", "downloading 2/2 GiB", "done: naïve model ✓", "tail without newline"]


def test_bytes_that_are_not_utf8_become_replacement_characters_not_an_error() -> None:
    lines: list[str] = []
    sink = LineSink(lines.append)
    sink.feed(b"bad \xff\xfe bytes\n")
    assert lines == ["bad \ufffd\ufffd bytes"]


def test_20_mb_without_a_newline_is_cut_in_linear_time_and_kept_to_max_line() -> None:
    """Each chunk is split on its own (before: the whole unfinished line was copied and split again per chunk,
    3.7 s for 20 MB); a line longer than MAX_LINE is handed on cut, so an endless one holds MAX_LINE at most."""
    import time

    from sparkpair.transport import lines as lines_module

    lines: list[str] = []
    sink = LineSink(lines.append)
    chunk = b"x" * 32768  # what an SSH channel read gives at most
    start = time.perf_counter()
    for _ in range(20 * 1024 * 1024 // len(chunk)):
        sink.feed(chunk)
    sink.feed(b"\nnext line\n")
    took = time.perf_counter() - start
    assert took < 0.5, f"{took:.2f} s"
    assert lines == ["x" * lines_module.MAX_LINE, "next line"]
    sink.feed("a cut character: \u00e9".encode()[:-1])
    sink.flush()
    assert lines[-1] == "a cut character: \ufffd"


def test_a_port_nobody_listens_on_is_said_as_refused_naming_the_node(tmp_path) -> None:
    import socket

    import pytest

    from sparkpair.errors import ConnectError
    from sparkpair.transport import NodeConnection, SshTarget

    key = tmp_path / "id_ed25519"
    key.write_text("not read: the TCP connect fails first\n")
    with socket.socket() as probe:  # a loopback port that was free a moment ago and has no listener now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    connection = NodeConnection(SshTarget("spark-b", "127.0.0.1", port, "nvidia", key, tmp_path / "known_hosts"))
    with pytest.raises(ConnectError) as raised:
        connection.connect(timeout=5)
    assert raised.value.node == "spark-b"
    assert f"nvidia@127.0.0.1:{port} refused the connection; is sshd running?" in str(raised.value)


def test_quick_acks_are_asked_again_before_every_read() -> None:
    """The kernel clears TCP_QUICKACK by itself: the socket sparkpair hands paramiko sets it before each recv."""
    import socket

    asked: list[tuple[int, int, int]] = []

    class Recording(tcp.QuickAckSocket):
        def setsockopt(self, *args) -> None:  # type: ignore[no-untyped-def, override]
            asked.append(args)
            super().setsockopt(*args)

    with socket.create_server(("127.0.0.1", 0)) as server:
        plain = socket.create_connection(server.getsockname())
        sock = Recording(plain.family, plain.type, plain.proto, fileno=plain.detach())
        peer, _ = server.accept()
        with sock, peer:
            for chunk in (b"hostkeys", b"open-confirmation"):
                peer.sendall(chunk)
                assert sock.recv(64) == chunk
    assert asked == [(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)] * 2


def test_a_session_that_closed_without_an_exit_status_says_so_instead_of_a_bare_exit_minus_one(tmp_path,
                                                                                                 monkeypatch) -> None:
    """paramiko gives -1 when the channel closed without an exit status (seen once in CI: doctor's clock probe
    then read "failed: exit -1"); the result's stderr now says what happened, and what to do."""
    from sparkpair.errors import last_line
    from sparkpair.transport import NodeConnection, SshTarget
    from sparkpair.transport.shell import Shell

    connection = NodeConnection(SshTarget("spark-a", "127.0.0.1", 22, "nvidia", tmp_path / "key", tmp_path / "kh"))
    monkeypatch.setattr(connection, "_execute", lambda *args, **kwargs: -1)
    result = connection.run(Shell("date +%s.%N"))
    assert result.exit_code == -1 and not result.ok
    shown = last_line(result.stderr, f"exit {result.exit_code}")
    assert shown.startswith("the SSH session closed without an exit status (the command was killed by a signal")
    monkeypatch.setattr(connection, "_execute", lambda text, timeout, stdin, on_out, on_err, enough: (
        on_err(b"Killed\n"), -1)[1])
    assert connection.run(Shell("date")).stderr == "Killed\n"   # what the command said is kept as it is
