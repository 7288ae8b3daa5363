"""Rank 0's executor loop: continuous batching with simulated prefill, decoding and drafting.

Timing model (see README.md for the formulas):
- a request waits in the queue while ``--max_batch_size`` requests are active;
- once admitted, its first token arrives ``SIM_PREFILL_MS`` later (prefills overlap);
- decoding requests share iterations of ``SIM_ITER_MS + n * SIM_DRAFT_MS``; each iteration
  emits ``1 + k`` tokens per request, k draft tokens accepted (geometric, capped at n).
Every prefill step and every iteration is one real MPI step (broadcast + allreduce) on all
ranks; if that fails or times out the engine dies and every pending request gets an error.
"""

import itertools
import queue
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from .mpi_world import STEP
from .stats import SIMULATED_GPU_MEM_BYTES, kv_cache_stats, timestamp_text
from .textgen import WordStream

IDLE_WAKE_SECONDS = 0.05


class EngineDead(RuntimeError):
    """The executor is gone (a rank died or hung); requests cannot be served."""


@dataclass(eq=False)
class GenRequest:
    """One generation request as the executor sees it."""

    prompt_tokens: int
    target_tokens: int
    natural_stop: bool
    words: WordStream
    accept_rng: random.Random
    request_id: int = 0
    events: queue.Queue = field(default_factory=queue.Queue)
    arrival: float = field(default_factory=time.monotonic)
    admitted_at: float = None
    prefill_done_at: float = None
    first_token_at: float = None
    finished_at: float = None
    emitted: int = 0
    draft_total: int = 0
    accepted_total: int = 0
    cancelled: bool = False

    def emit(self, count, now):
        """Produce ``count`` more tokens and hand them to the HTTP side."""
        words = self.words.take(count)
        self.events.put(("tokens", words, self.emitted == 0))
        self.emitted += count
        if self.first_token_at is None:
            self.first_token_at = now

    @property
    def done(self):
        """True once every requested token was produced."""
        return self.emitted >= self.target_tokens


@dataclass
class Iteration:
    """A decoding iteration in flight."""

    end: float
    members: list
    draft_len: int
    duration: float


class Engine:
    """Schedules requests into prefill steps and shared decoding iterations."""

    def __init__(self, config, timing, world, stats):
        self.config, self.timing, self.world, self.stats = config, timing, world, stats
        self.cond = threading.Condition()
        self.waiting, self.prefilling, self.decoding = deque(), [], []
        self.iteration = None
        self.step_no = 0
        self.iter_no = 0
        self.dead_reason = None
        self._ids = itertools.count(1)
        self._context_since_record = []
        self._kv_allocated = 0

    # ---- HTTP side -------------------------------------------------------------------------
    def new_request(self, prompt_tokens, target_tokens, natural_stop, seed_text):
        """Build a request whose text and acceptance draws are deterministic."""
        request_id = next(self._ids)
        words = WordStream(seed_text, self.timing.seed)
        rng = random.Random(f"accept:{self.timing.seed}:{seed_text}:{request_id}")
        return GenRequest(prompt_tokens, target_tokens, natural_stop, words, rng, request_id)

    def submit(self, request):
        """Queue a request; raises EngineDead when the executor is gone."""
        with self.cond:
            if self.dead_reason:
                raise EngineDead(self.dead_reason)
            request.arrival = time.monotonic()
            self.waiting.append(request)
            self.cond.notify()

    # ---- executor loop ---------------------------------------------------------------------
    def run(self, stop_event):
        """Serve until ``stop_event`` is set; raises EngineDead if a step fails."""
        while not stop_event.is_set():
            with self.cond:
                now = time.monotonic()
                self._admit(now)
                due = [r for r in self.prefilling if r.prefill_done_at <= now]
                iteration_due = self.iteration is not None and self.iteration.end <= now
                if not due and not iteration_due:
                    self.cond.wait(self._seconds_until_next_event(now))
                    continue
            if iteration_due:
                self._finish_iteration()
            if due:
                self._finish_prefills(due)

    def _seconds_until_next_event(self, now):
        deadlines = [r.prefill_done_at for r in self.prefilling]
        if self.iteration is not None:
            deadlines.append(self.iteration.end)
        if not deadlines:
            return IDLE_WAKE_SECONDS
        return max(0.0, min(min(deadlines) - now, IDLE_WAKE_SECONDS))

    def _admit(self, now):
        while self.waiting and len(self.prefilling) + len(self.decoding) < self.config.max_batch_size:
            request = self.waiting.popleft()
            if request.cancelled:
                continue
            request.admitted_at = now
            request.prefill_done_at = now + self.timing.prefill_ms / 1000.0
            self.prefilling.append(request)

    def _step(self, batch, draft_len):
        """One MPI step across all ranks; a failure kills the engine."""
        self.step_no += 1
        try:
            self.world.leader_step(STEP, self.step_no, batch, draft_len, self.timing.collective_timeout_s)
        except Exception as error:  # CollectiveTimeout, MPI errors, allreduce mismatch
            self.die(f"executor step {self.step_no} failed: {error}")
            raise EngineDead(self.dead_reason) from error

    def _finish_prefills(self, due):
        self._step(len(due), 0)
        now = time.monotonic()
        for request in due:
            self.prefilling.remove(request)
            if request.cancelled:
                continue
            request.emit(1, now)
            self._context_since_record.append(request)
            if request.done:
                self._finish(request, now)
            else:
                self.decoding.append(request)
        if self.iteration is None and self.decoding:
            self._start_iteration(max(r.prefill_done_at for r in due))

    def _draft_len_for(self, batch_size):
        spec = self.config.speculative
        if spec is None or spec.max_draft_len <= 0:
            return 0
        if spec.max_concurrency is not None and batch_size > spec.max_concurrency:
            return 0
        return spec.max_draft_len

    def _start_iteration(self, start):
        members = [r for r in self.decoding if not r.cancelled]
        if not members:
            self.iteration = None
            return
        draft_len = self._draft_len_for(len(members))
        duration = self.timing.iteration_seconds(draft_len)
        self.iteration = Iteration(start + duration, members, draft_len, duration)

    def _accepted_drafts(self, request, draft_len):
        accepted = 0
        while accepted < draft_len and request.accept_rng.random() < self.timing.accept_prob:
            accepted += 1
        return accepted

    def _advance(self, request, draft_len, now):
        """Give one request its 1 + k tokens of this iteration; returns k (accepted drafts)."""
        accepted = min(self._accepted_drafts(request, draft_len), request.target_tokens - request.emitted - 1)
        blocks_before = self._kv_blocks(request)
        request.emit(1 + accepted, now)
        self._kv_allocated += self._kv_blocks(request) - blocks_before
        request.draft_total += draft_len
        request.accepted_total += accepted
        if request.done:
            self._finish(request, now)
        return accepted

    def _finish_iteration(self):
        iteration = self.iteration
        started = iteration.end - iteration.duration
        self._step(len(iteration.members), iteration.draft_len)
        now = time.monotonic()
        kv_before = self._kv_allocated
        served = [r for r in iteration.members if not r.cancelled]
        accepted = sum(self._advance(request, iteration.draft_len, now) for request in served)
        drafted = iteration.draft_len * len(served)
        self.decoding = [r for r in self.decoding if not r.done and not r.cancelled]
        self.stats.count_draft_tokens(drafted, accepted)
        with_drafts = len(served) if iteration.draft_len else 0
        self._record(iteration, (now - started) * 1000.0, len(served) + accepted, drafted, accepted,
                     with_drafts, self._kv_allocated - kv_before)
        late = now - iteration.end > iteration.duration
        self._start_iteration(now if late else iteration.end)

    def _kv_blocks(self, request):
        per_block = max(1, self.config.kv_tokens_per_block)
        return -(-(request.prompt_tokens + request.emitted) // per_block)

    def _finish(self, request, now):
        request.finished_at = now
        reason = "stop" if request.natural_stop else "length"
        request.events.put(("finish", reason))
        self.stats.request_finished(request, reason)

    def _record(self, iteration, latency_ms, emitted, drafted, accepted, with_drafts, new_blocks):
        self.iter_no += 1
        context, self._context_since_record = self._context_since_record, []
        active = self.prefilling + self.decoding
        record = {
            "iter": self.iter_no, "iterLatencyMS": latency_ms, "timestamp": timestamp_text(),
            "gpuMemUsage": SIMULATED_GPU_MEM_BYTES, "cpuMemUsage": 0, "pinnedMemUsage": 0,
            "numActiveRequests": len(active), "numQueuedRequests": len(self.waiting),
            "numCompletedRequests": sum(1 for r in iteration.members if r.done),
            "numNewActiveRequests": len(context), "maxNumActiveRequests": self.config.max_batch_size,
            "maxBatchSizeStatic": self.config.max_batch_size, "maxBatchSizeRuntime": self.config.max_batch_size,
            "maxNumTokensStatic": self.config.max_num_tokens, "maxNumTokensRuntime": self.config.max_num_tokens,
            "kvCacheStats": kv_cache_stats(self.config, active, self._kv_allocated, new_blocks),
            "inflightBatchingStats": {
                "numScheduledRequests": len(iteration.members), "numContextRequests": len(context),
                "numGenRequests": len(iteration.members), "numPausedRequests": 0,
                "numCtxTokens": sum(r.prompt_tokens for r in context),
                "avgNumDecodedTokensPerIter": emitted / max(1, len(iteration.members))},
        }
        if self.config.speculative is not None:
            draft_time = iteration.draft_len * self.timing.draft_ms
            record["specDecodingStats"] = {
                "numDraftTokens": drafted, "numAcceptedTokens": accepted,
                "numRequestsWithDraftTokens": with_drafts,
                "acceptanceLength": (accepted + with_drafts) / with_drafts if with_drafts else 0.0,
                "iterLatencyMS": latency_ms,
                "draftOverhead": draft_time / (self.timing.iter_ms + draft_time) if draft_time else 0.0}
        self.stats.record_iteration(record)

    def die(self, reason):
        """Mark the executor dead and fail every request it holds."""
        with self.cond:
            self.dead_reason = reason
            pending = list(self.waiting) + self.prefilling + self.decoding
            self.waiting.clear()
            self.prefilling, self.decoding, self.iteration = [], [], None
        for request in pending:
            request.events.put(("error", reason))
