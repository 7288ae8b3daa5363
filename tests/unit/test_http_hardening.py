"""Every HTTP read has one deadline and a byte cap, and every JSON field is read typed.

A loopback server (127.0.0.1, one thread per connection) plays a hostile engine: it trickles a byte at a
time, sends far more than any answer needs, or answers in shapes no engine uses. What is checked is what
readiness, status and bench make of it: a clear failure on one line, in time, never an exception.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import paramiko
import pytest

from sparkpair.bench import client
from sparkpair.bench.stats import acceptance_from_iterations
from sparkpair.engine import lifecycle, readiness
from sparkpair.errors import SparkpairError
from sparkpair.inventory import Inventory, read_inventory
from sparkpair.probes import prometheus
from sparkpair.transport import NodeConnection, SshTarget, httpio

Handler = Callable[[socket.socket, str, str], None]
DEADLINE_S = 1.0
MARGIN_S = 1.0          # a deadline of DEADLINE_S must end the call before DEADLINE_S + MARGIN_S
TRICKLE_FOR_S = 8.0     # how long a trickling server keeps sending when nobody hangs up on it
HUGE = 64 << 20         # bytes a flooding server offers: far above every cap


class Loopback:
    """A TCP server on 127.0.0.1 answering each request with handler(connection, method, path), one thread each;
    `sent` counts the body bytes the handlers got out before the client hung up."""

    def __init__(self, handler: Handler) -> None:
        self.handler, self.sent = handler, 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.threads: list[threading.Thread] = []
        self.counting = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(connection,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _serve(self, connection: socket.socket) -> None:
        with connection, contextlib.suppress(OSError):
            head = b""
            while b"\r\n\r\n" not in head:
                data = connection.recv(65536)
                if not data:
                    return
                head += data
            request_line = head.split(b"\r\n", 1)[0].decode()
            method, path, _ = request_line.split(" ", 2)
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            body = head.split(b"\r\n\r\n", 1)[1]
            while len(body) < length:
                body += connection.recv(65536)
            self.handler(connection, method, path)

    def send(self, connection: socket.socket, data: bytes) -> None:
        connection.sendall(data)
        with self.counting:
            self.sent += len(data)

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], Loopback]]:
    servers: list[Loopback] = []

    def start(handler: Handler) -> Loopback:
        servers.append(Loopback(handler))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def answer(status: int, body: bytes, content_type: str = "application/json") -> bytes:
    return (f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


def routes(table: dict[str, bytes]) -> Handler:
    """A handler answering 200 with table[path] (404 for any other path)."""
    def handle(connection: socket.socket, method: str, path: str) -> None:
        connection.sendall(answer(200, table[path]) if path in table else answer(404, b"{}"))
    return handle


def trickling(server: list[Loopback]) -> Handler:
    """Headers at once, then the body one byte every 0.2 s for TRICKLE_FOR_S (or until the client hangs up)."""
    def handle(connection: socket.socket, method: str, path: str) -> None:
        count = int(TRICKLE_FOR_S / 0.2)
        connection.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {count}\r\n\r\n".encode())
        for _ in range(count):
            server[0].send(connection, b" ")
            time.sleep(0.2)
    return handle


def flooding(server: list[Loopback], announce: bool) -> Handler:
    """A body of HUGE bytes, with its length announced or sent until the connection closes."""
    def handle(connection: socket.socket, method: str, path: str) -> None:
        length = f"Content-Length: {HUGE}\r\n" if announce else "Connection: close\r\n"
        connection.sendall(f"HTTP/1.1 200 OK\r\n{length}\r\n".encode())
        block = b"[" * 65536
        for _ in range(HUGE // len(block)):
            server[0].send(connection, block)
    return handle


class Tunnel:
    """Stands in for the SSH transport under NodeConnection.http: a direct-tcpip channel is a plain socket
    to the loopback server (a socket has the same settimeout/recv/sendall/close as a paramiko Channel)."""

    def __init__(self, port: int | None) -> None:
        self.port = port

    def get_transport(self) -> Tunnel:
        return self

    def open_channel(self, kind: str, destination: tuple[str, int], source: tuple[str, int],
                     timeout: float | None = None) -> socket.socket:
        if self.port is None:
            raise paramiko.ChannelException(2, "Connect failed")
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)


def node(port: int | None, name: str = "spark-a") -> NodeConnection:
    """A NodeConnection whose HTTP goes to the loopback server on port (None: nothing listens)."""
    connection = NodeConnection(SshTarget(name, "127.0.0.1", 22, "nvidia", Path("/nonexistent"), Path("/nonexistent")))
    connection._open = lambda timeout=None: Tunnel(port)  # type: ignore[assignment,method-assign,return-value]
    return connection


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


# --- one deadline per request ------------------------------------------------------------------------------

def test_a_trickling_server_cannot_hold_a_tunnelled_request_past_its_deadline(serve: Callable[[Handler], Loopback]) -> None:
    holder: list[Loopback] = []
    holder.append(serve(trickling(holder)))
    reply, took = timed(lambda: node(holder[0].port).http(holder[0].port, "GET", "/health", timeout=DEADLINE_S))
    assert took < DEADLINE_S + MARGIN_S
    assert reply is not None and reply.status == 0 and reply.timed_out
    assert reply.summary == "no answer within 1 s"


def test_a_trickling_server_cannot_hold_a_bench_request_past_its_deadline(serve: Callable[[Handler], Loopback]) -> None:
    holder: list[Loopback] = []
    holder.append(serve(trickling(holder)))
    endpoint = client.Endpoint("127.0.0.1", holder[0].port, "m")
    started = time.monotonic()
    with pytest.raises(httpio.HttpFailure) as raised:
        client.get_json(endpoint, "/metrics", timeout=DEADLINE_S)
    assert time.monotonic() - started < DEADLINE_S + MARGIN_S and str(raised.value) == "GET /metrics: no answer within 1 s"
    timing, took = timed(lambda: client.stream_chat(endpoint, [{"role": "user", "content": "hi"}], 8,
                                                    timeout=DEADLINE_S))
    assert took < DEADLINE_S + MARGIN_S
    assert not timing.ok and timing.error == "POST /v1/chat/completions: no answer within 1 s"


def test_a_stream_that_never_ends_is_cut_at_its_deadline(serve: Callable[[Handler], Loopback]) -> None:
    def events(connection: socket.socket, method: str, path: str) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        for _ in range(int(TRICKLE_FOR_S / 0.1)):
            connection.sendall(b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n')
            time.sleep(0.1)

    server = serve(events)
    endpoint = client.Endpoint("127.0.0.1", server.port, "m")
    timing, took = timed(lambda: client.stream_chat(endpoint, [{"role": "user", "content": "hi"}], 8,
                                                    timeout=DEADLINE_S))
    assert took < DEADLINE_S + MARGIN_S
    assert not timing.ok and "no answer within 1 s" in timing.error


def test_the_stream_deadline_grows_with_the_tokens_asked_for() -> None:
    assert client.stream_deadline_s(1) < client.stream_deadline_s(32768)
    assert client.stream_deadline_s(128) >= 300


# --- a byte cap on every answer ----------------------------------------------------------------------------

@pytest.mark.parametrize("announce", [True, False], ids=["length-announced", "until-close"])
def test_a_huge_answer_is_refused_after_the_cap_not_read_whole(serve: Callable[[Handler], Loopback],
                                                               announce: bool) -> None:
    holder: list[Loopback] = []
    holder.append(serve(flooding(holder, announce)))
    reply = node(holder[0].port).http(holder[0].port, "GET", "/v1/models", timeout=10)
    assert reply is not None and reply.status == 0 and not reply.timed_out
    assert "more than the 1048576" in reply.failure or "larger than the 1048576" in reply.failure
    assert readiness.probe_stage(node(holder[0].port), holder[0].port, "m")[0] == "health"
    for thread in holder[0].threads:  # each ends once its client hung up (a send fails) or all was sent
        thread.join(timeout=30)
    assert holder[0].sent < HUGE // 4, "the client read far past its cap"


def test_a_huge_line_in_a_stream_is_refused(serve: Callable[[Handler], Loopback]) -> None:
    def one_line(connection: socket.socket, method: str, path: str) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\ndata: ")
        with contextlib.suppress(OSError):
            for _ in range(HUGE // 65536):
                connection.sendall(b"x" * 65536)

    server = serve(one_line)
    timing = client.stream_chat(client.Endpoint("127.0.0.1", server.port, "m"), [{"role": "user", "content": "hi"}], 8)
    assert not timing.ok and "a line of the answer is longer than" in timing.error


def test_nothing_listening_is_none_through_the_tunnel_and_a_failure_over_tcp() -> None:
    assert node(None).http(8355, "GET", "/health", timeout=1) is None
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    reply = httpio.fetch_tcp("127.0.0.1", port, "GET", "/health", timeout=1)
    assert reply.status == 0 and reply.failure.startswith(f"cannot connect to 127.0.0.1:{port}")
    assert client.served_models(client.Endpoint("127.0.0.1", port, "m")) is None


def test_bytes_from_the_far_end_cannot_break_a_failure_line(serve: Callable[[Handler], Loopback]) -> None:
    server = serve(lambda connection, method, path: connection.sendall(b"HTTP/1.1 2\x1b[31m00 OK\r\n\r\n"))
    reply = node(server.port).http(server.port, "GET", "/health", timeout=2)
    assert reply is not None and reply.status == 0 and "\x1b" not in reply.failure and "\\x1b" in reply.failure


# --- malformed shapes: a clear failure, never an exception -------------------------------------------------

DEEP = b"[" * 100000
BAD_MODELS = [b'{"data": null}', b'{"data": "x"}', b"[1]", b'{"data": [1]}', b'{"data": [{"id": 5}]}',
              b"not json", b"\xff\xfe", DEEP, b"null"]
BAD_CHATS = [b'{"choices": "x"}', b'{"choices": [1]}', b'{"choices": []}', b'{"choices": [{"message": "x"}]}',
             b'{"choices": [{"message": {"content": 5}}]}', b"[]", b"null", DEEP]
GOOD_MODELS = b'{"object": "list", "data": [{"id": "m", "object": "model"}]}'


@pytest.mark.parametrize("body", BAD_MODELS)
def test_readiness_names_a_malformed_model_list(serve: Callable[[Handler], Loopback], body: bytes) -> None:
    server = serve(routes({"/health": b"", "/v1/models": body}))
    stage, detail = readiness.probe_stage(node(server.port), server.port, "m")
    assert stage == "models" and detail.startswith("/v1/models: ") and "\n" not in detail


@pytest.mark.parametrize("body", BAD_CHATS)
def test_readiness_names_a_malformed_completion(serve: Callable[[Handler], Loopback], body: bytes) -> None:
    server = serve(routes({"/health": b"", "/v1/models": GOOD_MODELS, "/v1/chat/completions": body}))
    stage, detail = readiness.probe_stage(node(server.port), server.port, "m")
    assert stage == "completion" and detail.startswith("a chat completion came back malformed: /v1/chat/completions: ")


def test_readiness_still_sees_a_good_server_ready(serve: Callable[[Handler], Loopback]) -> None:
    chat = b'{"choices": [{"message": {"role": "assistant", "content": " ready"}}]}'
    server = serve(routes({"/health": b"", "/v1/models": GOOD_MODELS, "/v1/chat/completions": chat}))
    assert readiness.probe_stage(node(server.port), server.port, "m") == ("ready", "ready")


def _status(monkeypatch: pytest.MonkeyPatch, inventory: Inventory, port: int) -> lifecycle.Status:
    """sparkpair status against the loopback server, containers and ranks running on both nodes."""
    monkeypatch.setattr(lifecycle, "read_state", lambda head: None)
    monkeypatch.setattr(lifecycle.containers, "find", lambda connection, name: SimpleNamespace(status="running",
                                                                                              running=True))
    monkeypatch.setattr(lifecycle, "rank_processes", lambda *args: [SimpleNamespace(stopped=False)])
    monkeypatch.setattr(lifecycle, "exit_code", lambda head, inv: None)
    nodes = {n.name: node(port, n.name) for n in inventory.nodes}
    pair = SimpleNamespace(head=nodes[inventory.head.name], nodes=nodes)
    return lifecycle.status(pair, inventory)  # type: ignore[arg-type]


@pytest.mark.parametrize("body", BAD_MODELS)
def test_status_names_a_malformed_model_list(serve: Callable[[Handler], Loopback], monkeypatch: pytest.MonkeyPatch,
                                             example_inventory_path: Path, body: bytes) -> None:
    server = serve(routes({"/health": b"", "/v1/models": body, "/prometheus/metrics": b""}))
    result = _status(monkeypatch, read_inventory(example_inventory_path), server.port)
    assert result.state == "wedged" and result.model == ""
    assert result.model_problem.startswith("/v1/models: ")
    assert f"/health answers 200 but {result.model_problem}" in result.reason


@pytest.mark.parametrize("body", [b'{"choices": "x"}', b'{"choices": [{"text": 1}]}', b"[]", DEEP])
def test_status_counts_a_malformed_completion_as_no_generation(serve: Callable[[Handler], Loopback],
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               example_inventory_path: Path, body: bytes) -> None:
    server = serve(routes({"/health": b"", "/v1/models": GOOD_MODELS, "/v1/completions": body,
                           "/prometheus/metrics": b"trtllm_request_success_total 3\nx NaN\n"}))
    result = _status(monkeypatch, read_inventory(example_inventory_path), server.port)
    assert result.state == "wedged" and result.generation.startswith("http 200 but /v1/completions: ")
    assert result.requests == 3.0


def test_status_of_a_good_server_is_serving(serve: Callable[[Handler], Loopback], monkeypatch: pytest.MonkeyPatch,
                                            example_inventory_path: Path) -> None:
    server = serve(routes({"/health": b"", "/v1/models": GOOD_MODELS, "/v1/completions": b'{"choices": [{"text": "p"}]}',
                           "/prometheus/metrics": b""}))
    result = _status(monkeypatch, read_inventory(example_inventory_path), server.port)
    assert result.state == "serving" and result.model == "m" and result.generation.startswith("ok in ")


def test_prometheus_skips_values_that_are_not_finite() -> None:
    assert prometheus.parse("a 1\na NaN\na +Inf\nb{x=\"1\"} 2\nb{x=\"2\"} 3\n") == {"a": 1.0, "b": 5.0}


@pytest.mark.parametrize("body", [b'{"data": null}', b'{"data": [1]}', b'{"data": [{"id": null}]}', b"[1]", DEEP])
def test_bench_refuses_a_malformed_model_list_in_one_line(serve: Callable[[Handler], Loopback], body: bytes) -> None:
    server = serve(routes({"/v1/models": body}))
    with pytest.raises(SparkpairError) as raised:
        client.served_models(client.Endpoint("127.0.0.1", server.port, "m"))
    [line] = raised.value.lines()
    assert f"the server at http://127.0.0.1:{server.port}/v1 answered malformed: GET /v1/models: " in line


def _sse(*payloads: bytes) -> Handler:
    def handle(connection: socket.socket, method: str, path: str) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                           + b"".join(b"data: " + payload + b"\n\n" for payload in payloads))
    return handle


@pytest.mark.parametrize("event", [b'{"choices": "x"}', b'{"choices": [1]}', b'{"choices": [{"delta": "x"}]}',
                                   b'{"choices": [{"delta": {"content": 1}}]}', b'{"usage": [1]}',
                                   b'{"usage": {"completion_tokens": "x"}}', b"[1]", b"not json", DEEP])
def test_a_malformed_stream_event_fails_its_request_in_one_line(serve: Callable[[Handler], Loopback],
                                                               event: bytes) -> None:
    server = serve(_sse(b'{"choices": [{"delta": {"content": "a"}}]}', event, b"[DONE]"))
    timing = client.stream_chat(client.Endpoint("127.0.0.1", server.port, "m"), [{"role": "user", "content": "hi"}], 8)
    assert not timing.ok and timing.error.startswith("a streamed event: ") and "\n" not in timing.error


def test_a_good_stream_is_timed(serve: Callable[[Handler], Loopback]) -> None:
    server = serve(_sse(b'{"choices": [{"delta": {"role": "assistant"}}]}', b'{"choices": [{"delta": {"content": "a"}}]}',
                        b'{"choices": [{"delta": {"content": "b"}}]}', b'{"choices": [], "usage": {"completion_tokens": 2}}',
                        b"[DONE]"))
    timing = client.stream_chat(client.Endpoint("127.0.0.1", server.port, "m"), [{"role": "user", "content": "hi"}], 8)
    assert timing.ok and timing.output_tokens == 2 and timing.chunks == 2


def test_an_error_answer_is_one_short_line(serve: Callable[[Handler], Loopback]) -> None:
    server = serve(lambda connection, method, path: connection.sendall(
        answer(400, b'{"message": "bad\\nrequest\\u001b[31m", "code": 400}')))
    timing = client.stream_chat(client.Endpoint("127.0.0.1", server.port, "m"), [{"role": "user", "content": "hi"}], 8)
    assert timing.error == "HTTP 400: bad request\\x1b[31m"


def test_malformed_iteration_items_are_skipped_and_named(serve: Callable[[Handler], Loopback]) -> None:
    items = (b'[{"specDecodingStats": {"numDraftTokens": "x"}}, 5, {"specDecodingStats": [1]},'
             b' {"specDecodingStats": {"numDraftTokens": 3, "numAcceptedTokens": 2.0, "numRequestsWithDraftTokens": 1}},'
             b' {"iter": 1}]')
    server = serve(routes({"/metrics": items}))
    stats = client.IterationStats(client.Endpoint("127.0.0.1", server.port, "m"))
    drained = stats._drain()
    assert stats.problem == "GET /metrics: [0].specDecodingStats.numDraftTokens is a string, not a whole number of at least 0"
    acceptance = acceptance_from_iterations(drained)
    assert acceptance is not None and (acceptance.draft_tokens, acceptance.accepted_tokens) == (3, 2)
    server_list = serve(routes({"/metrics": b'{"data": null}'}))
    stats = client.IterationStats(client.Endpoint("127.0.0.1", server_list.port, "m"))
    assert stats._drain() == [] and stats.problem == "GET /metrics: the answer is an object, not a list"
