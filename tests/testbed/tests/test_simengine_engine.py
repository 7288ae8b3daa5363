"""The simulated executor in-process: continuous batching, queueing, speculation limits, death."""

import threading
import time

import pytest
from simengine.engine import Engine, EngineDead
from simengine.knobs import Timing
from simengine.mpi_world import CollectiveTimeout, LocalWorld
from simengine.serve_config import ServeConfig, SpeculativeSetup
from simengine.stats import EngineStats
from simengine.textgen import WordStream


class RunningEngine:
    """An Engine on a LocalWorld, run in a thread for the duration of a test."""

    def __init__(self, world=None, max_batch_size=8, speculative=None, **timing):
        self.config = ServeConfig(model="m", max_batch_size=max_batch_size, speculative=speculative,
                                  enable_iter_perf_stats=True)
        self.stats = EngineStats(self.config)
        self.engine = Engine(self.config, Timing(**timing), world or LocalWorld(), self.stats)
        self.stop = threading.Event()
        self.failure = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.engine.run(self.stop)
        except EngineDead as death:
            self.failure.append(death)

    def submit(self, tokens, prompt="hello world"):
        request = self.engine.new_request(2, tokens, False, prompt)
        self.engine.submit(request)
        return request

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)


def collect(request, timeout=20.0):
    """([(time, token count)], final event) for one request."""
    arrivals, deadline = [], time.monotonic() + timeout
    while True:
        event = request.events.get(timeout=max(0.01, deadline - time.monotonic()))
        if event[0] != "tokens":
            return arrivals, event
        arrivals.append((time.monotonic(), len(event[1])))


def collect_all(requests):
    """collect() every request concurrently, so arrival times are real."""
    results = [None] * len(requests)

    def worker(index):
        results[index] = collect(requests[index])
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


@pytest.fixture
def running():
    started = []

    def start(**kwargs):
        started.append(RunningEngine(**kwargs))
        return started[-1]
    yield start
    for engine in started:
        engine.close()


def test_concurrent_requests_share_iterations(running):
    engine = running(prefill_ms=20, iter_ms=20)
    requests = [engine.submit(30, prompt=f"p{i}") for i in range(4)]
    for arrivals, final in collect_all(requests):
        assert final == ("finish", "length") and sum(c for _, c in arrivals) == 30
        decode_seconds = arrivals[-1][0] - arrivals[0][0]
        assert abs(decode_seconds - 29 * 0.020) < 0.1 * 29 * 0.020, "iteration time must not grow with batch"
    batches = [item["inflightBatchingStats"]["numScheduledRequests"] for item in engine.stats.drain_iterations()]
    assert max(batches) == 4


def test_requests_beyond_max_batch_size_queue(running):
    engine = running(max_batch_size=1, prefill_ms=50, iter_ms=10)
    (first_arrivals, _), (second_arrivals, _) = collect_all([engine.submit(20), engine.submit(20, prompt="o")])
    expected_first_token = first_arrivals[-1][0] + 0.050
    assert abs(second_arrivals[0][0] - expected_first_token) < 0.010
    assert engine.stats.prometheus_text("m", None).count("trtllm_request_success_total{") == 1


def test_speculation_switches_off_above_max_concurrency(running):
    spec = SpeculativeSetup("Eagle3", 3, "/draft", max_concurrency=1)
    engine = running(speculative=spec, prefill_ms=5, iter_ms=5, draft_ms=1, accept_prob=1.0)
    alone = engine.submit(12)
    arrivals, _ = collect(alone)
    assert [count for _, count in arrivals] == [1, 4, 4, 3], "p = 1 accepts every draft token"
    engine.stats.drain_iterations()
    collect_all([engine.submit(10, prompt="a"), engine.submit(10, prompt="b")])
    records = engine.stats.drain_iterations()
    two_active = [r for r in records if r["inflightBatchingStats"]["numScheduledRequests"] == 2]
    assert two_active and all(r["specDecodingStats"]["numDraftTokens"] == 0 for r in two_active)


class FailingWorld(LocalWorld):
    """A world whose peers stop answering after ``good_steps`` steps."""

    def __init__(self, good_steps):
        self.good_steps = good_steps

    def leader_step(self, command, step, batch, draft_len, timeout):
        if step > self.good_steps:
            raise CollectiveTimeout("a rank did not join the collective in time")


def test_a_failed_step_fails_every_request_and_kills_the_engine(running):
    engine = running(world=FailingWorld(good_steps=3), prefill_ms=5, iter_ms=5)
    requests = [engine.submit(50, prompt=f"p{i}") for i in range(3)]
    for _arrivals, final in collect_all(requests):
        assert final[0] == "error" and "did not join" in final[1]
    engine.thread.join(timeout=5)
    assert engine.failure and isinstance(engine.failure[0], EngineDead)
    with pytest.raises(EngineDead):
        engine.submit(1)


def test_words_are_deterministic_per_prompt_and_seed():
    assert WordStream("abc", 0).take(20) == WordStream("abc", 0).take(20)
    assert WordStream("abc", 0).take(20) != WordStream("abd", 0).take(20)
    assert WordStream("abc", 0).take(20) != WordStream("abc", 1).take(20)


def test_idle_engine_does_not_spin(running):
    running()
    before = time.process_time()
    time.sleep(0.5)
    assert time.process_time() - before < 0.1


def test_iteration_stats_only_when_enabled():
    config = ServeConfig(model="m")
    stats = EngineStats(config)
    stats.record_iteration({"iter": 1})
    assert stats.drain_iterations() == []
