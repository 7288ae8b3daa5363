#!/usr/bin/env python3
"""Measured vs configured: a `sparkpair bench` results.json against the stand-in engine's known truth.

    .venv/bin/python scripts/bench/bench_truth.py RESULTS_JSON [--inventory INVENTORY]

The SIM_* knobs come from the inventory's container.env (engine defaults otherwise); the formulas
are the engine's own (tests/testbed/sparkpair_testbed/engine/README.md, "Known truth", via
simengine.knobs.Timing; simengine comes with the sparkpair-testbed package scripts/setup installs).
Prints one line per figure and exits 1 when any checked figure is off by more than 10%; the time to the
first token may also run up to the engine's FIRST_TOKEN_SLACK_MS (simengine.knobs) over its 10%, never under.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import yaml
from simengine.knobs import Timing, first_token_within

TOLERANCE = 0.10


def timing_from_inventory(path: Path | None) -> Timing:
    """The engine's timing knobs as the inventory's container.env sets them."""
    env = (yaml.safe_load(path.read_text()).get("container") or {}).get("env") or {} if path else {}
    return Timing.from_env({key: str(value) for key, value in env.items()})


def expected_figures(timing: Timing, draft_len: int | None, concurrency: int, max_tokens: int) -> dict[str, float]:
    """What the README's formulas say each bench column should be for one row."""
    n = draft_len or 0
    per_iteration = 1 + timing.expected_accepted(n)      # tokens per request per iteration
    iteration_ms = timing.iteration_seconds(n) * 1000
    request_ms = timing.prefill_ms + math.ceil((max_tokens - 1) / per_iteration) * iteration_ms
    figures = {"ttft_ms_p50": timing.prefill_ms, "decode_tokens_per_s_p50": 1000 * per_iteration / iteration_ms,
               "itl_ms_mean": iteration_ms / per_iteration, "chunk_interval_ms": iteration_ms,
               "aggregate_tokens_per_s": concurrency * max_tokens * 1000 / request_ms}
    if n:
        figures["acceptance_rate"] = timing.expected_accepted(n) / n
        figures["mean_accepted_length"] = per_iteration
    return figures


def compare(results: dict[str, Any], timing: Timing) -> list[dict[str, Any]]:
    """One entry per (row, figure): measured, expected, relative error, within tolerance."""
    max_tokens = results["settings"]["max_tokens"]
    checks = []
    for row in results["rows"]:
        for name, expected in expected_figures(timing, row["max_draft_len"], row["concurrency"], max_tokens).items():
            measured = row.get(name)
            error = None if measured is None else (measured - expected) / expected
            checks.append({"config": row["config"], "concurrency": row["concurrency"], "figure": name,
                           "measured": measured, "expected": expected, "error": error,
                           "ok": error is not None and _within(name, measured, expected, error)})
    return checks


def _within(figure: str, measured: float, expected: float, error: float) -> bool:
    """Whether a measured figure is the expected one within the tolerance (the first token: plus its slack)."""
    if figure == "ttft_ms_p50":
        return first_token_within(measured, expected, TOLERANCE)
    return abs(error) <= TOLERANCE


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--inventory", type=Path, help="inventory whose container.env set the SIM_* knobs")
    args = parser.parse_args()
    results = json.loads(args.results.read_text())
    inventory = args.inventory or Path(results["provenance"]["inventory"]["path"] or "")
    timing = timing_from_inventory(inventory if inventory.is_file() else None)
    print(f"truth: prefill {timing.prefill_ms} ms, iteration {timing.iter_ms} ms + {timing.draft_ms} ms per draft "
          f"token, acceptance probability {timing.accept_prob}")
    checks = compare(results, timing)
    for check in checks:
        measured = "-" if check["measured"] is None else f"{check['measured']:.4g}"
        error = "-" if check["error"] is None else f"{100 * check['error']:+.1f}%"
        print(f"{'ok  ' if check['ok'] else 'OFF '} {check['config']:<20} c={check['concurrency']:<3} "
              f"{check['figure']:<24} measured {measured:>8}  expected {check['expected']:.4g}  ({error})")
    return 0 if all(check["ok"] for check in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
