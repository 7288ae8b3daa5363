"""The benchmark's HTTP side: timed streaming chat requests, concurrent streams, /metrics draining.

Plain `http.client` against the server's OpenAI-compatible endpoint; one thread per concurrent
stream. Token arrival is timed when each server-sent event is read, so what is measured is what
a client on this machine sees (network included).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sparkpair.bench.stats import RequestTiming

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class Endpoint:
    """Where the server listens and which model it serves."""

    host: str
    port: int
    model: str

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"


def get_json(endpoint: Endpoint, path: str, timeout: float = 10.0) -> Any:
    """GET path and parse the JSON answer; OSError, HTTPException or ValueError when that fails."""
    connection = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise http.client.HTTPException(f"GET {path} answered {response.status}")
        return json.loads(body or b"null")
    finally:
        connection.close()


def served_models(endpoint: Endpoint) -> list[str] | None:
    """The model ids /v1/models lists; None when nothing answers there."""
    try:
        data = get_json(endpoint, "/v1/models", timeout=5.0)
    except (OSError, http.client.HTTPException, ValueError):
        return None
    items = data.get("data", []) if isinstance(data, dict) else []
    return [str(item.get("id", "")) for item in items if isinstance(item, dict)]


def _request_body(endpoint: Endpoint, messages: Messages, max_tokens: int) -> bytes:
    return json.dumps({"model": endpoint.model, "messages": messages, "max_tokens": max_tokens,
                       "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}}).encode()


def _events(response: http.client.HTTPResponse) -> Iterator[tuple[float, Any]]:
    """(arrival time, parsed `data:` payload) per server-sent event; the payload "[DONE]" ends it."""
    while True:
        raw = response.readline()
        if not raw:
            return
        arrived = time.perf_counter()
        text = raw.decode("utf-8", "replace").strip()
        if not text.startswith("data:"):
            continue
        payload = text[5:].strip()
        yield arrived, payload if payload == "[DONE]" else json.loads(payload)


def _delta_text(event: dict[str, Any]) -> str:
    """The generated text an event carries (answer or reasoning: both are output tokens)."""
    choices = event.get("choices") or []
    delta = (choices[0].get("delta") or {}) if choices and isinstance(choices[0], dict) else {}
    return (delta.get("content") or "") + (delta.get("reasoning_content") or "")


def _timed_stream(response: http.client.HTTPResponse, sent: float) -> RequestTiming:
    first = last = None
    chunks = 0
    usage_tokens = None
    for arrived, event in _events(response):
        if event == "[DONE]":
            if first is None or last is None:
                return RequestTiming(False, "the stream ended without any token")
            tokens = usage_tokens if usage_tokens is not None else chunks
            return RequestTiming(True, ttft_s=first - sent, latency_s=arrived - sent, decode_s=last - first,
                                 output_tokens=tokens, chunks=chunks)
        if isinstance(event, dict) and isinstance(event.get("usage"), dict):
            usage_tokens = int(event["usage"].get("completion_tokens") or 0) or usage_tokens
        if isinstance(event, dict) and _delta_text(event):
            first = arrived if first is None else first
            last = arrived
            chunks += 1
    return RequestTiming(False, "the stream ended before [DONE] (engine failure?)")


def _error_text(status: int, body: bytes) -> str:
    try:
        message = json.loads(body).get("message") or ""
    except (ValueError, AttributeError):
        message = body.decode("utf-8", "replace")
    return f"HTTP {status}: {' '.join(str(message).split())[:200]}"


def stream_chat(endpoint: Endpoint, messages: Messages, max_tokens: int, timeout: float = 300.0) -> RequestTiming:
    """One streamed chat completion, timed; failures come back as a RequestTiming with ok=False."""
    connection = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=timeout)
    try:
        sent = time.perf_counter()
        connection.request("POST", "/v1/chat/completions", body=_request_body(endpoint, messages, max_tokens),
                           headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        response = connection.getresponse()
        if response.status != 200:
            return RequestTiming(False, _error_text(response.status, response.read()))
        return _timed_stream(response, sent)
    except (OSError, http.client.HTTPException, ValueError) as error:
        return RequestTiming(False, f"{type(error).__name__}: {error}".strip())
    finally:
        connection.close()


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
    """Collects the engine's /metrics iteration items over a measurement.

    /metrics is drained on read and keeps a bounded number of items, so it is drained once on
    entry (what came before is not ours) and then polled in the background until exit.
    """

    def __init__(self, endpoint: Endpoint, interval_s: float = 0.5, settle_s: float = 0.5) -> None:
        self._endpoint = endpoint
        self._interval = interval_s
        self._settle = settle_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="bench-metrics", daemon=True)
        self.items: list[dict[str, Any]] = []

    def _drain(self) -> list[dict[str, Any]]:
        try:
            data = get_json(self._endpoint, "/metrics")
        except (OSError, http.client.HTTPException, ValueError):
            return []  # a missed poll loses nothing: the items stay on the server for the next one
        return [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []

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
