"""HTTP with one deadline and a byte cap: every HTTP request sparkpair makes goes through here.

http.client's `timeout` bounds each socket operation, not the request: a server sending one byte a
second holds a 5 s request for as long as it likes, and `read()` takes a body of any size. Here a
request has one deadline (each receive waits at most the time left until it) and reads at most
`cap` bytes of its answer; a longer answer is refused, not cut. It runs over anything with
settimeout/recv/sendall/close: a TCP socket (bench, to the endpoint) or an SSH channel (readiness
and status, `Node.http`). Standard library only; http.client is imported on first use (it
brings ssl, about 18 ms, and most commands ask no HTTP).
"""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    import http.client

    from _typeshed import WriteableBuffer

ANSWER_CAP = 1 << 20   # bytes of an answer read by default: /health, /v1/models, one completion
LINE_CAP = 256 << 10   # bytes of one line of a streamed answer (one server-sent event)
RECEIVE_SIZE = 65536


class Stream(Protocol):
    """What a request needs of a connection (a socket or a paramiko Channel)."""

    def settimeout(self, timeout: float | None) -> None: ...

    def recv(self, size: int, /) -> bytes: ...

    def sendall(self, data: bytes, /) -> None: ...

    def close(self) -> None: ...


class HttpFailure(Exception):
    """No whole answer: one line saying why (timed out, too large, connection closed, not HTTP)."""

    def __init__(self, reason: str, *, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.timed_out = reason, timed_out


@dataclass(frozen=True)
class Reply:
    """An answer read whole (status and body), or why none came: status 0 and `failure` then."""

    status: int
    body: bytes = b""
    failure: str = ""
    timed_out: bool = False

    @property
    def summary(self) -> str:
        """`http 503`, or the failure (`no answer within 5 s`): what the request got, in a few words."""
        return f"http {self.status}" if self.status else self.failure

    @classmethod
    def failed(cls, failure: HttpFailure) -> Reply:
        return cls(0, failure=failure.reason, timed_out=failure.timed_out)


class Deadline:
    """The time limit of one request: the seconds left until it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left (more than 0); HttpFailure(timed_out) once there are none."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise self.expired()
        return left

    def expired(self) -> HttpFailure:
        return HttpFailure(f"no answer within {self.seconds:g} s", timed_out=True)


def shown(text: str, limit: int = 160) -> str:
    """text from the far end as one short line: unprintable characters escaped, at most limit characters."""
    escaped = "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)
    return escaped if len(escaped) <= limit else escaped[: limit - 3] + "..."


class _DeadlineReader(io.RawIOBase):
    """The receiving side of a stream; each receive waits at most until the deadline."""

    def __init__(self, stream: Stream, deadline: Deadline) -> None:
        super().__init__()
        self._stream, self._deadline = stream, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        self._stream.settimeout(self._deadline.left())
        try:
            data = self._stream.recv(min(len(view), RECEIVE_SIZE))
        except TimeoutError:
            raise self._deadline.expired() from None
        view[: len(data)] = data
        return len(data)


class _DeadlineSocket:
    """What http.client asks of its socket (sendall, makefile, close), each receive and send bounded by the deadline."""

    def __init__(self, stream: Stream, deadline: Deadline) -> None:
        self._stream, self._deadline = stream, deadline

    def sendall(self, data: bytes) -> None:
        self._stream.settimeout(self._deadline.left())
        try:
            self._stream.sendall(data)
        except TimeoutError:
            raise self._deadline.expired() from None

    def makefile(self, mode: str, *args: object, **kwargs: object) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._stream, self._deadline))

    def close(self) -> None:
        """Nothing: http.client closes its socket once the headers say `Connection: close`, while the body is
        still to be read (a real socket stays open for its makefile); `request` closes the stream at its end."""


class Answer:
    """An answer whose body is read as it arrives, never more than cap bytes of it, all before the deadline."""

    def __init__(self, response: http.client.HTTPResponse, cap: int) -> None:
        self._response, self.cap = response, cap
        self.status = response.status
        self._read = 0

    def body(self, cap: int | None = None) -> bytes:
        """The whole body; HttpFailure when it is larger than cap (the request's unless given): refused, not cut."""
        cap = self.cap if cap is None else cap
        announced = self._response.length
        if announced is not None and announced > cap:
            raise HttpFailure(f"the answer is {announced} bytes, more than the {cap} read")
        data = self._response.read(cap + 1)
        if len(data) > cap:
            raise HttpFailure(f"the answer is larger than the {cap} bytes read")
        return data

    def readline(self, line_cap: int = LINE_CAP) -> bytes:
        """The body's next line as it arrives (b"" at its end); HttpFailure for a line longer than line_cap or once
        the lines read add up to more than cap."""
        line = self._response.readline(line_cap + 1)
        if len(line) > line_cap:
            raise HttpFailure(f"a line of the answer is longer than {line_cap} bytes")
        self._read += len(line)
        if self._read > self.cap:
            raise HttpFailure(f"the answer is larger than the {self.cap} bytes read")
        return line


@contextmanager
def request(stream: Stream, deadline: Deadline, method: str, path: str, *, body: bytes | None = None,
            headers: dict[str, str] | None = None, cap: int = ANSWER_CAP) -> Iterator[Answer]:
    """Send one request over stream (closed at the end) and give its Answer once the headers came.

    Everything inside the `with`, the caller's reads included, ends by the deadline; any way it fails
    is an HttpFailure whose reason is one line (unprintable bytes from the far end escaped)."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1")
    connection.sock = cast(socket.socket, _DeadlineSocket(stream, deadline))  # all of a socket http.client uses
    try:
        connection.request(method, path, body=body, headers=headers or {})
        yield Answer(connection.getresponse(), cap)
    except TimeoutError:
        raise deadline.expired() from None
    except (OSError, EOFError, http.client.HTTPException) as error:
        raise HttpFailure(f"no whole answer ({shown(f'{type(error).__name__}: {error}')})") from None
    finally:
        connection.close()
        stream.close()


def connect(host: str, port: int, deadline: Deadline) -> socket.socket:
    """A TCP connection to host:port made before the deadline; HttpFailure naming the address when none is."""
    try:
        return socket.create_connection((host, port), timeout=deadline.left())
    except TimeoutError:
        raise deadline.expired() from None
    except OSError as error:
        raise HttpFailure(f"cannot connect to {url_host(host)}:{port} ({shown(error.strerror or str(error))})") from None


@contextmanager
def tcp_request(host: str, port: int, method: str, path: str, *, timeout: float, body: bytes | None = None,
                headers: dict[str, str] | None = None, cap: int = ANSWER_CAP) -> Iterator[Answer]:
    """`request` over a new TCP connection to host:port, connecting included in the timeout."""
    deadline = Deadline(timeout)
    with request(connect(host, port, deadline), deadline, method, path, body=body, headers=headers,
                 cap=cap) as answer:
        yield answer


def fetch(stream: Stream, deadline: Deadline, method: str, path: str, *, body: bytes | None = None,
          headers: dict[str, str] | None = None, cap: int = ANSWER_CAP) -> Reply:
    """One request over stream, its answer read whole; a Reply that says why when there is none."""
    try:
        with request(stream, deadline, method, path, body=body, headers=headers, cap=cap) as answer:
            return Reply(answer.status, answer.body())
    except HttpFailure as failure:
        return Reply.failed(failure)


def fetch_tcp(host: str, port: int, method: str, path: str, *, timeout: float, body: bytes | None = None,
              headers: dict[str, str] | None = None, cap: int = ANSWER_CAP) -> Reply:
    """`fetch` over a new TCP connection to host:port, connecting included in the timeout."""
    deadline = Deadline(timeout)
    try:
        stream = connect(host, port, deadline)
    except HttpFailure as failure:
        return Reply.failed(failure)
    return fetch(stream, deadline, method, path, body=body, headers=headers, cap=cap)


def url_host(host: str) -> str:
    """host as it goes into a URL or `host:port`: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host
