"""Launch's readiness wait asks about the start only as often as the runtime says (`runtimes.Watch`), and
nothing at the start itself: the watch and the exit check take CPU from the engine, which has nothing to show
before its own start-up, so a start that serves within its first seconds pays for neither (issue 37: the
launch overhead)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from fakenode import FakeNode

from sparkpair.engine import readiness
from sparkpair.runtimes import Watch, every_runtime
from sparkpair.transport.httpio import Reply

MODEL = "org/model"
SERVING = {(8355, "GET", "/health"): Reply(200),
           (8355, "GET", "/v1/models"): Reply(200, json.dumps({"data": [{"id": MODEL}]}).encode()),
           (8355, "POST", "/v1/chat/completions"): Reply(200, b'{"choices": [{"message": {"content": "ready"}}]}')}


def test_a_check_beside_runs_first_after_its_delay_then_every_period(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(readiness.time, "monotonic", lambda: now[0])
    asked: list[float] = []
    with ThreadPoolExecutor(1) as pool:
        beside = readiness._Beside(pool, lambda: asked.append(now[0]), every=10.0, first=5.0)
        for at in (100.0, 104.9, 105.0, 110.0, 114.9, 115.0):
            now[0] = at
            beside.poll()
            if beside.running is not None:
                beside.running.result()
    assert asked == [105.0, 115.0]


@pytest.mark.parametrize("runtime", [runtime.name for runtime in every_runtime()])
def test_a_start_that_serves_at_once_is_never_watched_nor_checked_for_an_exit(runtime: str) -> None:
    cadence = next(each for each in every_runtime() if each.name == runtime).watch
    assert cadence.first_s > 0 and cadence.exit_every_s > 0
    head = FakeNode()
    head.http_replies = dict(SERVING)
    watched: list[str] = []
    found = readiness.wait_ready(head, 8355, MODEL, 60.0, lambda: watched.append("exit") or None, lambda text: None,
                                 cadence, watch=lambda: watched.append("watch") or None)
    assert found.ready and watched == []


def test_a_start_that_takes_longer_is_watched_from_the_first_delay_on(monkeypatch: pytest.MonkeyPatch) -> None:
    head = FakeNode()
    head.http_replies = {**SERVING, (8355, "GET", "/health"): None}   # nothing listens: it keeps waiting
    monkeypatch.setattr(readiness, "POLL_EVERY_S", 0.01)
    watched: list[str] = []
    found = readiness.wait_ready(head, 8355, MODEL, 0.5, lambda: None, lambda text: None, Watch(0.2, 10.0, 0.05),
                                 watch=lambda: watched.append("watch") or None)
    assert not found.ready and found.detail.startswith("timed out after 0 s") and watched
