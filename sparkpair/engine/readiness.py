"""Is the server ready? Port open, then its health path, then its model is served, then one real
generation (the runtime's `ServingApi` says each request and how to read its answer: the OpenAI server's
/health, /v1/models and a chat completion), polled through the head's SSH connection (no firewall
between here and the head matters). While it waits, a watch (the launch watchdog, `engine.watch`) and
the check whether a start command exited run beside it as often as the runtime says its start is worth
(`runtimes.Watch`), and can end the wait early; a start that keeps progressing waits until the timeout.
Status asks the same server what it serves and for one token (`served_model_ids`, `generate_one_token`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from sparkpair.jsonfields import ShapeError
from sparkpair.runtimes import ServingApi, Watch
from sparkpair.runtimes.openai import OPENAI
from sparkpair.transport import Node

POLL_EVERY_S = 0.2
GENERATION_TIMEOUT_S = 5.0   # status's one-token generation of a serving engine answers well within this
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


def probe_stage(head: Node, port: int, model: str, headers: Mapping[str, str] | None = None,
                api: ServingApi = OPENAI) -> tuple[str, str]:
    """The first stage that does not pass yet ("ready" when all do), with what was seen (headers: the engine's
    Authorization, sent with every request but the health check's). A malformed or oversized answer, or one too
    slow, is what was seen at its stage: never an exception."""
    health = head.http(port, "GET", api.health, timeout=5, cap=HEALTH_CAP)
    if health is None:
        return "port", f"nothing listens on port {port} yet"
    if health.status != 200:
        return "health", f"{api.health}: {health.summary}"
    listed, problem = served_models(head, port, model, headers, api)
    if problem:
        return "models", problem
    if model not in listed:
        return "models", f"{api.models(model)} lists {listed or 'nothing'}, not {model}"
    request = api.ready_request(model)
    answer = head.http(port, "POST", request.path, body=json.dumps(request.body).encode(), timeout=60,
                       headers=headers)
    if answer is None or answer.status != 200:
        return "completion", f"{api.generation_words} failed ({answer.summary if answer else 'no answer'})"
    try:
        text = api.ready_text(answer.body)
    except ShapeError as error:
        return "completion", f"{api.generation_words} came back malformed: {error}"
    return ("ready", text.strip()) if text.strip() else ("completion", "the completion came back empty")


def served_models(head: Node, port: int, model: str, headers: Mapping[str, str] | None = None,
                  api: ServingApi = OPENAI) -> tuple[list[str], str]:
    """(the model ids the server shows served, "") or ([], why it shows none: its answer failed or was
    malformed); headers: the engine's Authorization."""
    path = api.models(model)
    models = head.http(port, "GET", path, timeout=5, headers=headers)
    if models is None or models.status != 200:
        return [], f"{path}: {models.summary if models else 'nothing listens'}"
    try:
        return api.served(models.body, model), ""
    except ShapeError as error:
        return [], str(error)


def generate_one_token(serving: Node, port: int, model: str, headers: dict[str, str] | None = None,
                       api: ServingApi = OPENAI) -> tuple[bool, str]:
    """A one-token generation through every rank: (answered, what happened). Answered means a 200 whose body
    is a generation (the OpenAI server's: `choices[0].text` a string), all within GENERATION_TIMEOUT_S;
    headers: the engine's Authorization."""
    request = api.token_request(model)
    started = time.monotonic()
    answer = serving.http(port, "POST", request.path, body=json.dumps(request.body).encode(),
                          timeout=GENERATION_TIMEOUT_S, headers=headers)
    took = time.monotonic() - started
    if answer is None:
        return False, f"nothing listens on port {port}"
    if answer.status != 200:
        return False, answer.summary
    try:
        api.token_text(answer.body)
    except ShapeError as error:
        return False, f"http 200 but {error}"
    return True, f"ok in {took:.2f} s"


def served_model_ids(serving: Node, port: int, model: str = "", headers: dict[str, str] | None = None,
                     api: ServingApi = OPENAI) -> tuple[list[str], str]:
    """(the model ids the server shows served, "") or ([], why it shows none: its answer failed or was malformed,
    or it lists none); model: the one launched, when known (a server that answers for one model at a time);
    headers: the engine's Authorization."""
    listed, problem = served_models(serving, port, model, headers, api)
    return listed, problem or ("" if listed else f"{api.models(model)} lists no model")


def wait_ready(head: Node, port: int, model: str, timeout: float,
               exited: Callable[[], int | None], progress: Callable[[str], None],
               cadence: Watch, watch: Callable[[], str | None] | None = None,
               api: ServingApi = OPENAI, headers: Mapping[str, str] | None = None) -> Readiness:
    """Poll until ready, the engine exits, the watch reports a stall (its words), or timeout; progress gets
    each new stage. The exit check (a docker exec, 0.1-0.4 s) and the watch (both nodes) run beside the
    0.2 s polls of the port, as often as cadence says, so neither delays seeing the server ready."""
    start = time.monotonic()
    seen = ""
    pool = ThreadPoolExecutor(2)
    checks = _Beside(pool, exited, cadence.exit_every_s, cadence.exit_every_s)
    watching = _Beside(pool, watch, cadence.every_s, cadence.first_s) if watch is not None else None
    try:
        while True:
            code = checks.poll()
            if code is not None:
                return Readiness(False, seen or "port", f"the engine exited with code {code}", time.monotonic() - start)
            stall = watching.poll() if watching is not None else None
            if stall:
                return Readiness(False, seen or "port", stall, time.monotonic() - start, stalled=True)
            stage, detail = probe_stage(head, port, model, headers, api)
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
    """A slow check run in the pool at most every `every` seconds, the first `first` seconds from now; poll()
    gives its latest answer once (None while it runs, or when it found nothing) and starts the next one when
    it is due."""

    def __init__(self, pool: ThreadPoolExecutor, check: Callable[[], T | None], every: float, first: float = 0.0) -> None:
        self.pool, self.check, self.every = pool, check, every
        self.running: Future[T | None] | None = None
        self.started = time.monotonic() + first - every

    def poll(self) -> T | None:
        answer = None
        if self.running is not None and self.running.done():
            answer, self.running = self.running.result(), None
        if self.running is None and time.monotonic() - self.started >= self.every:
            self.started = time.monotonic()
            self.running = self.pool.submit(self.check)
        return answer
