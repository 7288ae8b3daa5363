"""Benchmark statistics: pure functions from client timings and the engine's iteration stats.

No I/O here. Every figure `sparkpair bench` reports is computed in this module; docs/bench.md
says what each one means and how it relates to the engine's own counters.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

QUANTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}


@dataclass(frozen=True)
class RequestTiming:
    """One streamed request as the client saw it (seconds on the client's monotonic clock)."""

    ok: bool
    error: str = ""
    ttft_s: float = 0.0        # request sent -> first generated token arrived
    latency_s: float = 0.0     # request sent -> the stream ended
    decode_s: float = 0.0      # first token -> last token
    output_tokens: int = 0     # as the server's usage reports them (else the chunks that carried tokens)
    chunks: int = 0            # streamed chunks that carried tokens (one per engine iteration)

    @property
    def inter_token_s(self) -> float | None:
        """Mean time per output token after the first (TPOT); None for a single token."""
        return self.decode_s / (self.output_tokens - 1) if self.output_tokens > 1 else None

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Tokens per second after the first token (the decode rate this stream got)."""
        if self.output_tokens < 2 or self.decode_s <= 0:
            return None
        return (self.output_tokens - 1) / self.decode_s

    @property
    def chunk_interval_s(self) -> float | None:
        """Mean gap between token-carrying chunks: about one engine iteration."""
        return self.decode_s / (self.chunks - 1) if self.chunks > 1 else None


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), interpolating linearly between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(values: Iterable[float | None]) -> dict[str, float | None]:
    """Mean, p50, p90 and p99 of the values that are not None (all None when there are none)."""
    present = [v for v in values if v is not None]
    if not present:
        return {"mean": None, **{name: None for name in QUANTILES}}
    return {"mean": sum(present) / len(present), **{name: percentile(present, q) for name, q in QUANTILES.items()}}


@dataclass(frozen=True)
class Acceptance:
    """Speculative decoding as the engine counted it over some iterations."""

    draft_tokens: int
    accepted_tokens: int
    requests_with_drafts: int
    iterations: int

    @property
    def rate(self) -> float | None:
        """Σ accepted / Σ drafted draft tokens; None when nothing was drafted."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Tokens per request per iteration: (Σ accepted + Σ requests with drafts) / Σ requests with drafts."""
        if not self.requests_with_drafts:
            return None
        return (self.accepted_tokens + self.requests_with_drafts) / self.requests_with_drafts


def acceptance_from_iterations(items: Iterable[dict[str, Any]]) -> Acceptance | None:
    """Sum the specDecodingStats of /metrics iteration items; None when no item carries them
    (no draft configured, or the engine does not record iteration stats)."""
    totals = [0, 0, 0, 0]
    for item in items:
        spec = item.get("specDecodingStats") if isinstance(item, dict) else None
        if not isinstance(spec, dict):
            continue
        totals[0] += int(spec.get("numDraftTokens") or 0)
        totals[1] += int(spec.get("numAcceptedTokens") or 0)
        totals[2] += int(spec.get("numRequestsWithDraftTokens") or 0)
        totals[3] += 1
    return Acceptance(*totals) if totals[3] else None


@dataclass(frozen=True)
class LevelStats:
    """Everything measured at one concurrency level of one engine configuration."""

    concurrency: int
    requests: int
    errors: int
    wall_s: float
    output_tokens: int
    ttft_s: dict[str, float | None]
    inter_token_s: dict[str, float | None]
    latency_s: dict[str, float | None]
    decode_tokens_per_s: dict[str, float | None]
    chunk_interval_s: float | None
    aggregate_tokens_per_s: float | None
    requests_per_s: float | None
    acceptance: Acceptance | None


def summarize_level(concurrency: int, timings: Sequence[RequestTiming], wall_s: float,
                    acceptance: Acceptance | None) -> LevelStats:
    """Distributions over the successful requests; aggregate rates over the level's wall time."""
    good = [t for t in timings if t.ok]
    tokens = sum(t.output_tokens for t in good)
    chunk_intervals = [t.chunk_interval_s for t in good if t.chunk_interval_s is not None]
    return LevelStats(
        concurrency=concurrency, requests=len(timings), errors=len(timings) - len(good), wall_s=wall_s,
        output_tokens=tokens,
        ttft_s=distribution(t.ttft_s for t in good),
        inter_token_s=distribution(t.inter_token_s for t in good),
        latency_s=distribution(t.latency_s for t in good),
        decode_tokens_per_s=distribution(t.decode_tokens_per_s for t in good),
        chunk_interval_s=sum(chunk_intervals) / len(chunk_intervals) if chunk_intervals else None,
        aggregate_tokens_per_s=tokens / wall_s if wall_s > 0 and good else None,
        requests_per_s=len(good) / wall_s if wall_s > 0 and good else None,
        acceptance=acceptance,
    )


def speedup(value: float | None, baseline: float | None) -> float | None:
    """value / baseline, or None when either is missing or the baseline is zero."""
    if value is None or not baseline:
        return None
    return value / baseline
