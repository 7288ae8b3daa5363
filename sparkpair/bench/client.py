"""The benchmark's HTTP side: timed streaming requests, concurrent streams, the engine's statistics.

Plain HTTP against the engine's server through `transport.httpio` (one deadline per request, a byte cap
on every answer), its requests and answers as the runtime's `ServingApi` says (the OpenAI server's
streamed chat completions); one thread per concurrent stream. Token arrival is timed when each
server-sent event is read, so what is measured is what a client on this machine sees (network included).
Every field of an answer is read typed (`sparkpair.jsonfields`): a malformed answer fails its request
with one line, never an exception.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from sparkpair.bench.stats import Acceptance, RequestTiming
from sparkpair.errors import SparkpairError
from sparkpair.jsonfields import Field, ShapeError
from sparkpair.runtimes import ServingApi
from sparkpair.runtimes.openai import OPENAI
from sparkpair.transport.httpio import ANSWER_CAP, HttpFailure, fetch_tcp, shown, tcp_request, url_host

Messages = list[dict[str, str]]
METRICS_CAP = 32 << 20       # bytes of one /metrics drain (a bounded list of iteration items, ~1 KiB each)
STREAM_BASE_S = 300.0        # a streamed request's deadline: this, plus STREAM_PER_TOKEN_S per token asked for
STREAM_PER_TOKEN_S = 0.5
STREAM_BASE_CAP = 1 << 20    # bytes of a streamed answer: this, plus STREAM_PER_TOKEN_CAP per token asked for
STREAM_PER_TOKEN_CAP = 8 << 10
ERROR_CAP = 64 << 10         # bytes of an error answer read for its message
SPEC_COUNTS = ("numDraftTokens", "numAcceptedTokens", "numRequestsWithDraftTokens")


@dataclass(frozen=True)
class Endpoint:
    """Where the server listens, which model it serves, how it is asked (its runtime's `ServingApi`) and the
    bearer credential its requests carry when the engine has an API key (never shown: not in the repr)."""

    host: str
    port: int
    model: str
    api: ServingApi = field(default=OPENAI, compare=False)
    authorization: str = field(default="", repr=False)

    def headers(self, **more: str) -> dict[str, str]:
        """The request's headers: more, and the Authorization when there is one."""
        return {**more, **({"Authorization": self.authorization} if self.authorization else {})}

    @property
    def url(self) -> str:
        return f"http://{url_host(self.host)}:{self.port}{self.api.base}"


def get_json(endpoint: Endpoint, path: str, timeout: float = 10.0, cap: int = ANSWER_CAP) -> Field:
    """GET path within timeout seconds, its JSON answer (at most cap bytes) as a Field to read typed;
    HttpFailure (no whole 200 answer) or ShapeError (not JSON) when that fails."""
    reply = fetch_tcp(endpoint.host, endpoint.port, "GET", path, timeout=timeout, cap=cap, headers=endpoint.headers())
    if reply.status != 200:
        raise HttpFailure(f"GET {path}: {reply.summary}")
    return Field.parse(reply.body, f"GET {path}")


def served_models(endpoint: Endpoint) -> list[str] | None:
    """The model ids the server shows served (the OpenAI server's /v1/models); None when nothing answers there;
    SparkpairError when its answer is not of the shape its API gives."""
    path = endpoint.api.models(endpoint.model)
    try:
        reply = fetch_tcp(endpoint.host, endpoint.port, "GET", path, timeout=5.0, cap=ANSWER_CAP,
                          headers=endpoint.headers())
        if reply.status != 200:
            raise HttpFailure(f"GET {path}: {reply.summary}")
        return endpoint.api.served(reply.body, endpoint.model)
    except HttpFailure:
        return None
    except ShapeError as error:
        raise SparkpairError(f"the server at {endpoint.url} answered malformed: GET {error}",
                             hint="is this port the engine's? (sparkpair status)") from None


class LineSource(Protocol):
    """A streamed answer read line by line (`httpio.Answer`: each line bounded, all before the deadline)."""

    def readline(self) -> bytes: ...


def _events(answer: LineSource, end: str | None) -> Iterator[tuple[float, Field | None]]:
    """(arrival time, parsed `data:` payload) per server-sent event; None for the payload end ("[DONE]"), which
    ends it, or for the answer's end when end is None. ShapeError for a payload that is not JSON, HttpFailure past
    the deadline or the cap."""
    while raw := answer.readline():
        arrived = time.perf_counter()
        text = raw.decode("utf-8", "replace").strip()
        if not text.startswith("data:"):
            continue
        payload = text[5:].strip()
        yield arrived, None if payload == end else Field.parse(payload.encode(), "a streamed event")
    if end is None:
        yield time.perf_counter(), None


def _timed_stream(answer: LineSource, sent: float, api: ServingApi = OPENAI) -> RequestTiming:
    first = last = None
    chunks = 0
    usage_tokens = None
    for arrived, event in _events(answer, api.stream_end):
        if event is None:
            if first is None or last is None:
                return RequestTiming(False, "the stream ended without any token")
            tokens = usage_tokens if usage_tokens is not None else chunks
            return RequestTiming(True, ttft_s=first - sent, latency_s=arrived - sent, decode_s=last - first,
                                 output_tokens=tokens, chunks=chunks)
        counted = api.stream_tokens(event)
        if api.token_counts == "delta" and counted is not None:
            usage_tokens = (usage_tokens or 0) + counted
        else:
            usage_tokens = counted or usage_tokens
        if api.stream_text(event):
            first = arrived if first is None else first
            last = arrived
            chunks += 1
    return RequestTiming(False, f"the stream ended before {api.stream_end} (engine failure?)")


def _error_text(status: int, body: bytes) -> str:
    """`HTTP 400: message` from an error answer (its JSON `message` when it has one), on one short line."""
    try:
        message = Field.parse(body, "error").get("message").text(default="")
    except ShapeError:
        message = body.decode("utf-8", "replace")
    return f"HTTP {status}: {shown(' '.join(message.split()), 200)}"


def stream_deadline_s(max_tokens: int) -> float:
    """How long one streamed request may take in all: STREAM_BASE_S, plus STREAM_PER_TOKEN_S per token."""
    return STREAM_BASE_S + STREAM_PER_TOKEN_S * max_tokens


def stream_chat(endpoint: Endpoint, messages: Messages, max_tokens: int, timeout: float | None = None) -> RequestTiming:
    """One streamed generation (the OpenAI server's chat completion), timed, ended by timeout seconds (default
    `stream_deadline_s`) and a byte cap; failures (malformed answers included) come back as a RequestTiming with
    ok=False and one line."""
    cap = STREAM_BASE_CAP + STREAM_PER_TOKEN_CAP * max_tokens
    request = endpoint.api.stream_request(endpoint.model, messages, max_tokens)
    try:
        sent = time.perf_counter()
        with tcp_request(endpoint.host, endpoint.port, "POST", request.path,
                         timeout=timeout if timeout is not None else stream_deadline_s(max_tokens),
                         body=json.dumps(request.body).encode(), cap=cap,
                         headers=endpoint.headers(**{"Content-Type": "application/json",
                                                     "Accept": "text/event-stream"})) as answer:
            if answer.status != 200:
                return RequestTiming(False, _error_text(answer.status, answer.body(ERROR_CAP)))
            return _timed_stream(answer, sent, endpoint.api)
    except HttpFailure as failure:
        return RequestTiming(False, f"POST {request.path}: {failure}")
    except ShapeError as error:
        return RequestTiming(False, str(error))


def run_streams(endpoint: Endpoint, prompts: Sequence[Messages], count: int, concurrency: int, max_tokens: int,
                on_done: Callable[[RequestTiming], None] | None = None) -> tuple[list[RequestTiming], float]:
    """count requests (prompt i is prompts[i % len]) kept `concurrency` in flight; (timings, wall seconds).

    Closed loop: each stream sends its next request as soon as its previous one ends.
    """
    def one(index: int) -> RequestTiming:
        timing = stream_chat(endpoint, prompts[index % len(prompts)], max_tokens)
        if on_done is not None:
            on_done(timing)
        return timing

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="bench-stream") as pool:
        timings = list(pool.map(one, range(count)))
    return timings, time.perf_counter() - start


class IterationStats:
    """Collects the engine's iteration items (TensorRT-LLM's /metrics: `Metrics.iterations`) over a measurement.

    /metrics is drained on read and keeps a bounded number of items, so it is drained once on
    entry (what came before is not ours) and then polled in the background until exit.
    """

    def __init__(self, endpoint: Endpoint, path: str = "/metrics", interval_s: float = 0.5,
                 settle_s: float = 0.5) -> None:
        self._endpoint, self._path = endpoint, path
        self._interval = interval_s
        self._settle = settle_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="bench-metrics", daemon=True)
        self.items: list[dict[str, Any]] = []
        self.problem = ""

    def _drain(self) -> list[dict[str, Any]]:
        """The iteration items /metrics holds now, each as its specDecodingStats counts (`{}` without them);
        an answer or item of another shape is skipped, and the first such problem kept in `self.problem`."""
        try:
            items = get_json(self._endpoint, self._path, cap=METRICS_CAP).items()
        except (HttpFailure, ShapeError) as error:
            self.problem = self.problem or str(error)
            return []  # a missed poll loses nothing: the items stay on the server for the next one
        kept = []
        for item in items:
            try:
                kept.append(_iteration_counts(item))
            except ShapeError as error:
                self.problem = self.problem or str(error)
        return kept

    def _poll(self) -> None:
        while not self._stop.wait(self._interval):
            self.items += self._drain()

    def __enter__(self) -> IterationStats:
        time.sleep(self._settle)  # let the last iterations before us be recorded, then discard them
        self._drain()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        time.sleep(self._settle)  # the engine records an iteration just after streaming its tokens
        self.items += self._drain()


def _iteration_counts(item: Field) -> dict[str, Any]:
    """One /metrics iteration item as `{"specDecodingStats": {count: int, ...}}`, or `{}` when it has none;
    ShapeError when it is not an object or a count is not a whole number."""
    spec = item.get("specDecodingStats")
    if spec.null:
        return {}
    return {"specDecodingStats": {name: spec.get(name).count(default=0) for name in SPEC_COUNTS}}


class CounterStats:
    """Speculative decoding over a measurement from an engine's Prometheus counters (vLLM's `/metrics`):
    draft tokens, accepted tokens and drafts, read once on entry and once on exit; `acceptance` is the
    difference (None when the engine counts no drafts, or a read failed: the first problem is kept). An engine
    that keeps acceptance as gauges (SGLang: mean tokens per verify, accepted / proposed) names them in
    `gauges` and no token counters: the drafts (its verifies) are counted, the gauges read on exit."""

    def __init__(self, endpoint: Endpoint, path: str, names: tuple[str, str, str],
                 gauges: tuple[str, str] = ("", ""), settle_s: float = 0.5) -> None:
        self._endpoint, self._path, self._names, self._settle = endpoint, path, names, settle_s
        self._gauges = gauges
        self._before: dict[str, float] | None = None
        self._after: dict[str, float] | None = None
        self.problem = ""

    def _read(self) -> dict[str, float] | None:
        from sparkpair.probes import prometheus

        reply = fetch_tcp(self._endpoint.host, self._endpoint.port, "GET", self._path, timeout=10.0,
                          cap=prometheus.TEXT_CAP)
        if reply.status != 200:
            self.problem = self.problem or f"GET {self._path}: {reply.summary}"
            return None
        return prometheus.parse(reply.body.decode("utf-8", "replace"))

    def __enter__(self) -> CounterStats:
        self._before = self._read()
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(self._settle)  # the engine counts a step just after streaming its tokens
        self._after = self._read()

    @property
    def acceptance(self) -> Acceptance | None:
        if self._before is None or self._after is None:
            return None
        drafted, accepted, drafts = (int(self._after.get(name, 0.0) - self._before.get(name, 0.0))
                                     for name in self._names)
        if drafts > 0 and all(self._gauges):
            return acceptance_from_gauges(drafts, *(self._after.get(name, 0.0) for name in self._gauges))
        return Acceptance(drafted, accepted, drafts, drafts) if drafts > 0 else None


def acceptance_from_gauges(verifies: int, length: float, rate: float) -> Acceptance | None:
    """Acceptance over verifies from the mean tokens per verify (accepted drafts + 1) and accepted / proposed
    draft tokens: accepted = (length - 1) x verifies, proposed = accepted / rate (None when either gauge is not
    a usable number: no proposal yet)."""
    if not (length >= 1.0 and 0.0 < rate <= 1.0):
        return None
    accepted = round((length - 1.0) * verifies)
    return Acceptance(round(accepted / rate), accepted, verifies, verifies)
