"""sparkpair bench's pure parts: statistics, acceptance, stream timing, prompts, variants and rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkpair.bench import client as benchclient
from sparkpair.bench import record as benchrecord
from sparkpair.bench.configs import plan_configs
from sparkpair.bench.prompts import load_prompts
from sparkpair.bench.stats import (
    Acceptance,
    RequestTiming,
    acceptance_from_iterations,
    distribution,
    percentile,
    speedup,
    summarize_level,
)
from sparkpair.errors import UsageError
from sparkpair.inventory import read_inventory


def test_percentile_interpolates_between_closest_ranks_like_numpy() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 90) == pytest.approx(3.7)
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_distribution_skips_missing_values_and_is_empty_without_any() -> None:
    assert distribution([1.0, None, 3.0]) == {"mean": 2.0, "p50": 2.0, "p90": 2.8, "p99": pytest.approx(2.98)}
    assert distribution([None]) == {"mean": None, "p50": None, "p90": None, "p99": None}


def test_request_timing_derives_itl_decode_rate_and_chunk_interval() -> None:
    timing = RequestTiming(True, ttft_s=0.1, latency_s=1.1, decode_s=1.0, output_tokens=101, chunks=41)
    assert timing.inter_token_s == pytest.approx(0.01)
    assert timing.decode_tokens_per_s == pytest.approx(100.0)
    assert timing.chunk_interval_s == pytest.approx(0.025)
    single = RequestTiming(True, ttft_s=0.1, latency_s=0.1, output_tokens=1, chunks=1)
    assert single.inter_token_s is None and single.decode_tokens_per_s is None and single.chunk_interval_s is None


def test_acceptance_sums_spec_decoding_stats_as_the_engine_readme_defines_them() -> None:
    items = [{"iter": 1, "specDecodingStats": {"numDraftTokens": 3, "numAcceptedTokens": 2,
                                               "numRequestsWithDraftTokens": 1}},
             {"iter": 2, "specDecodingStats": {"numDraftTokens": 6, "numAcceptedTokens": 1,
                                               "numRequestsWithDraftTokens": 2}},
             {"iter": 3}, "not an item"]
    acceptance = acceptance_from_iterations(items)
    assert acceptance == Acceptance(draft_tokens=9, accepted_tokens=3, requests_with_drafts=3, iterations=2)
    assert acceptance.rate == pytest.approx(3 / 9)
    assert acceptance.mean_accepted_length == pytest.approx((3 + 3) / 3)


def test_acceptance_is_unknown_without_spec_stats_and_undefined_without_drafts() -> None:
    assert acceptance_from_iterations([{"iter": 1}, {"iter": 2}]) is None
    idle = acceptance_from_iterations([{"specDecodingStats": {"numDraftTokens": 0, "numAcceptedTokens": 0,
                                                              "numRequestsWithDraftTokens": 0}}])
    assert idle is not None and idle.rate is None and idle.mean_accepted_length is None


def test_summarize_level_counts_errors_and_rates_over_the_wall_time() -> None:
    timings = [RequestTiming(True, ttft_s=0.1, latency_s=1.0, decode_s=0.9, output_tokens=10, chunks=4),
               RequestTiming(True, ttft_s=0.3, latency_s=2.0, decode_s=1.7, output_tokens=18, chunks=7),
               RequestTiming(False, "HTTP 500: executor died")]
    stats = summarize_level(2, timings, wall_s=2.0, acceptance=None)
    assert (stats.requests, stats.errors, stats.output_tokens) == (3, 1, 28)
    assert stats.aggregate_tokens_per_s == pytest.approx(14.0) and stats.requests_per_s == pytest.approx(1.0)
    assert stats.ttft_s["p50"] == pytest.approx(0.2) and stats.latency_s["mean"] == pytest.approx(1.5)
    assert stats.decode_tokens_per_s["mean"] == pytest.approx((9 / 0.9 + 17 / 1.7) / 2)
    assert stats.chunk_interval_s == pytest.approx((0.3 + 1.7 / 6) / 2)
    failed = summarize_level(1, [RequestTiming(False, "refused")], wall_s=1.0, acceptance=None)
    assert failed.aggregate_tokens_per_s is None and failed.ttft_s["p50"] is None


def test_speedup_needs_both_figures() -> None:
    assert speedup(150.0, 50.0) == 3.0
    assert speedup(None, 50.0) is None and speedup(150.0, None) is None and speedup(150.0, 0.0) is None


class FakeStream:
    """An HTTP response body read line by line."""

    def __init__(self, events: list[str]) -> None:
        self._lines = [f"{line}\n".encode() for event in events for line in (f"data: {event}", "")]

    def readline(self) -> bytes:
        return self._lines.pop(0) if self._lines else b""


def _chunk(content: str | None = None, usage: dict | None = None, finish: str | None = None) -> str:
    delta = {} if content is None else {"content": content}
    choices = [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return json.dumps({"object": "chat.completion.chunk", "choices": choices, "usage": usage})


def test_a_stream_is_timed_from_its_chunks_and_counted_from_usage(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([i * 0.5 for i in range(1, 100)])  # each line read arrives 0.5 s after the previous
    monkeypatch.setattr(benchclient.time, "perf_counter", lambda: next(clock))
    events = [_chunk(""), _chunk("one"), _chunk(" two three"), _chunk(" four"), _chunk(finish="length"),
              _chunk(usage={"completion_tokens": 4}), "[DONE]"]
    timing = benchclient._timed_stream(FakeStream(events), sent=0.0)
    # arrivals: role chunk 0.5 (+ blank 1.0), "one" 1.5, "two three" 2.5, "four" 3.5, ..., [DONE] 6.5
    assert timing == RequestTiming(True, ttft_s=1.5, latency_s=6.5, decode_s=2.0, output_tokens=4, chunks=3)


def test_a_stream_that_breaks_off_is_an_error() -> None:
    timing = benchclient._timed_stream(FakeStream([_chunk("one")]), sent=0.0)
    assert not timing.ok and "before [DONE]" in timing.error


def test_the_bundled_prompts_cover_every_category() -> None:
    prompts = load_prompts(None)
    assert 36 <= len(prompts.messages) <= 48
    assert set(prompts.categories) == {"writing", "coding", "math", "reasoning", "extraction", "chat"}
    assert all(m[-1]["role"] == "user" and m[-1]["content"] for m in prompts.messages)


def test_prompt_files_take_prompt_or_messages_and_name_the_bad_line(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text('{"prompt": "Hello"}\n\n{"messages": [{"role": "user", "content": "Hi", "name": "x"}]}\n')
    assert load_prompts(good).messages == [[{"role": "user", "content": "Hello"}],
                                           [{"role": "user", "content": "Hi"}]]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "Hello"}\n{"messages": [{"role": "robot", "content": "Hi"}]}\n')
    with pytest.raises(UsageError, match=r"bad.jsonl:2: messages\[0\]"):
        load_prompts(bad)


def test_variants_change_only_the_draft(example_inventory_path: Path) -> None:
    inventory = read_inventory(example_inventory_path)
    configs = plan_configs(inventory, "qwen3-235b", [4, 3, 2], compare_baseline=True)
    assert [(c.label, c.profile, c.max_draft_len, c.relaunch) for c in configs] == [
        ("draft 3 (launched)", "qwen3-235b", 3, False), ("draft 2", "qwen3-235b.draft2", 2, True),
        ("draft 4", "qwen3-235b.draft4", 4, True), ("no draft", "qwen3-235b.nodraft", None, True)]
    original = inventory.profile("qwen3-235b")
    baseline = configs[-1].inventory.profile("qwen3-235b.nodraft")
    assert baseline.draft is None and baseline.engine_config == original.engine_config and baseline.target == original.target
    assert configs[2].inventory.profile("qwen3-235b.draft4").max_draft_len == 4


def test_speedups_compare_total_throughput_at_the_same_concurrency() -> None:
    rows = [{"max_draft_len": 3, "concurrency": 1, "aggregate_tokens_per_s": 90.0, "speedup_vs_baseline": None},
            {"max_draft_len": 3, "concurrency": 2, "aggregate_tokens_per_s": 170.0, "speedup_vs_baseline": None},
            {"max_draft_len": None, "concurrency": 1, "aggregate_tokens_per_s": 45.0, "speedup_vs_baseline": None}]
    benchrecord.add_speedups(rows)
    assert [r["speedup_vs_baseline"] for r in rows] == [2.0, None, None]


def test_without_matplotlib_bench_stops_with_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from sparkpair.bench import plots as benchplots
    from sparkpair.errors import SparkpairError

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SparkpairError) as raised:
        benchplots.ensure_matplotlib()
    assert raised.value.lines() == ["sparkpair bench draws its plots with matplotlib, which is not installed "
                                    "(fix: pip install 'sparkpair[bench]')"]
