"""scripts/bench/bench_truth.py's judgement: 10% either way, the first token with a fixed slack on top only."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

pytest.importorskip("simengine")
TRUTH = runpy.run_path(str(Path(__file__).resolve().parents[2] / "scripts" / "bench" / "bench_truth.py"))
within = TRUTH["_within"]
SLACK = pytest.importorskip("simengine.knobs").FIRST_TOKEN_SLACK_MS  # the engine's own slack


def _judge(figure: str, measured: float, expected: float) -> bool:
    return bool(within(figure, measured, expected, (measured - expected) / expected))


def test_the_first_token_may_run_over_by_the_slack_but_never_under_the_prefill() -> None:
    assert _judge("ttft_ms_p50", 145.0, 120.0)             # the CI run's loaded machine: 143 ms
    assert not _judge("ttft_ms_p50", 132.0 + SLACK + 1, 120.0)
    assert not _judge("ttft_ms_p50", 100.0, 120.0)          # faster than the prefill: the knob was not honoured


def test_every_other_figure_keeps_its_ten_percent() -> None:
    assert _judge("itl_ms_mean", 10.9, 10.0) and not _judge("itl_ms_mean", 11.2, 10.0)
    assert not _judge("chunk_interval_ms", 8.8, 10.0)
