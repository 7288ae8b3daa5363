"""Is the server ready? Port open, then /health, then /v1/models lists the model, then one real
completion, polled through the head's SSH connection (no firewall between here and the head matters).
While it waits, a watch (the launch watchdog, `engine.watch`) is polled every few seconds and can end
the wait early when the start has stalled; a start that keeps progressing waits until the timeout.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from sparkpair.transport import Node
from sparkpair.transport.jsonfields import Field, ShapeError

# The watch (a process scan in every rank's container) and the exit check (a docker exec per node) share the
# CPU with the starting engine; on the simulated pair's two cores, polling them every 2 s and 1 s made a vLLM
# start 23-32 % slower than the same start by hand (scripts/bench/launch.py --runtime vllm). Stall limits are
# minutes and the port is polled every 0.2 s, so readiness is seen as soon as before.
WATCH_EVERY_S = 10.0
EXIT_EVERY_S = 5.0
POLL_EVERY_S = 0.2
HEALTH_CAP = 64 << 10   # bytes of a /health answer read (trtllm-serve answers an empty body)
T = TypeVar("T")


@dataclass(frozen=True)
class Readiness:
    """How far the server got: the last stage passed, and why it stopped if it did (stalled: the watch
    found that the start stopped moving)."""

    ready: bool
    stage: str
    detail: str
    seconds: float
    stalled: bool = False


def probe_stage(head: Node, port: int, model: str, headers: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The first stage that does not pass yet ("ready" when all do), with what was seen (headers: the engine's
    Authorization, sent with every /v1 request). A malformed or oversized answer, or one too slow, is what was seen
    at its stage: never an exception."""
    health = head.http(port, "GET", "/health", timeout=5, cap=HEALTH_CAP)
    if health is None:
        return "port", f"nothing listens on port {port} yet"
    if health.status != 200:
        return "health", f"/health: {health.summary}"
    models = head.http(port, "GET", "/v1/models", timeout=5, headers=headers)
    if models is None or models.status != 200:
        return "models", f"/v1/models: {models.summary if models else 'nothing listens'}"
    try:
        listed = listed_models(models.body)
    except ShapeError as error:
        return "models", str(error)
    if model not in listed:
        return "models", f"/v1/models lists {listed or 'nothing'}, not {model}"
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Reply with one word: ready"}],
                       "max_tokens": 8, "temperature": 0}).encode()
    answer = head.http(port, "POST", "/v1/chat/completions", body=body, timeout=60, headers=headers)
    if answer is None or answer.status != 200:
        return "completion", f"a chat completion failed ({answer.summary if answer else 'no answer'})"
    try:
        text = chat_text(answer.body)
    except ShapeError as error:
        return "completion", f"a chat completion came back malformed: {error}"
    return ("ready", text.strip()) if text.strip() else ("completion", "the completion came back empty")


def listed_models(raw: bytes) -> list[str]:
    """The model ids in a /v1/models reply (`{"data": [{"id": ...}, ...]}`); ShapeError for anything else."""
    return [item.get("id").text() for item in Field.parse(raw, "/v1/models").get("data").items()]


def chat_text(raw: bytes) -> str:
    """The text of a chat completion's first choice ("" when its content is null); ShapeError when the
    answer is not a chat completion."""
    answer = Field.parse(raw, "/v1/chat/completions")
    return answer.get("choices").at(0).get("message").get("content").text(default="")


def wait_ready(head: Node, port: int, model: str, timeout: float,
               exited: Callable[[], int | None], progress: Callable[[str], None],
               watch: Callable[[], str | None] | None = None, headers: Mapping[str, str] | None = None) -> Readiness:
    """Poll until ready, the engine exits, the watch reports a stall (its words), or timeout; progress gets
    each new stage. The exit check (a docker exec, 0.1-0.4 s) and the watch (both nodes) run beside the
    0.2 s polls of the port, so neither delays seeing the server ready."""
    start = time.monotonic()
    seen = ""
    pool = ThreadPoolExecutor(2)
    checks = _Beside(pool, exited, EXIT_EVERY_S)
    watching = _Beside(pool, watch, WATCH_EVERY_S) if watch is not None else None
    try:
        while True:
            code = checks.poll()
            if code is not None:
                return Readiness(False, seen or "port", f"the engine exited with code {code}", time.monotonic() - start)
            stall = watching.poll() if watching is not None else None
            if stall:
                return Readiness(False, seen or "port", stall, time.monotonic() - start, stalled=True)
            stage, detail = probe_stage(head, port, model, headers)
            if stage != seen:
                seen = stage
                progress(f"{stage}: {detail}" if stage != "ready" else f"ready (a completion answered: {detail!r})")
            if stage == "ready":
                return Readiness(True, stage, detail, time.monotonic() - start)
            if time.monotonic() - start > timeout:
                return Readiness(False, stage, f"timed out after {timeout:.0f} s: {detail}", time.monotonic() - start)
            time.sleep(POLL_EVERY_S)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # a check under way when the wait ends is not waited for


class _Beside(Generic[T]):
    """A slow check run in the pool at most every `every` seconds; poll() gives its latest answer once
    (None while it runs, or when it found nothing) and starts the next one when it is due."""

    def __init__(self, pool: ThreadPoolExecutor, check: Callable[[], T | None], every: float) -> None:
        self.pool, self.check, self.every = pool, check, every
        self.running: Future[T | None] | None = None
        self.started = -every

    def poll(self) -> T | None:
        answer = None
        if self.running is not None and self.running.done():
            answer, self.running = self.running.result(), None
        if self.running is None and time.monotonic() - self.started >= self.every:
            self.started = time.monotonic()
            self.running = self.pool.submit(self.check)
        return answer
