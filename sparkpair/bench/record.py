"""The record of a benchmark run: result rows, results.json, results.csv and summary.md.

One row per (engine configuration, concurrency). Units are in the column names (ms, s, tokens/s).
The record carries what two runs need to be compared honestly: the inventory digest, profile,
image ID, model revisions, prompt digest and settings.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkpair.bench.stats import LevelStats, speedup

Row = dict[str, Any]


def _scaled(values: dict[str, float | None], prefix: str, factor: float, names: tuple[str, ...]) -> Row:
    return {f"{prefix}_{name}": None if (value := values[name]) is None else value * factor for name in names}


def level_row(config: str, profile: str, max_draft_len: int | None, stats: LevelStats) -> Row:
    """The flat result row of one concurrency level of one configuration."""
    every = ("mean", "p50", "p90", "p99")
    acceptance = stats.acceptance
    return {
        "config": config, "profile": profile, "max_draft_len": max_draft_len, "concurrency": stats.concurrency,
        "requests": stats.requests, "errors": stats.errors, "output_tokens": stats.output_tokens,
        "wall_s": stats.wall_s,
        **_scaled(stats.ttft_s, "ttft_ms", 1000.0, every),
        **_scaled(stats.inter_token_s, "itl_ms", 1000.0, every),
        **_scaled(stats.latency_s, "latency_s", 1.0, every),
        **_scaled(stats.decode_tokens_per_s, "decode_tokens_per_s", 1.0, ("mean", "p50")),
        "chunk_interval_ms": None if stats.chunk_interval_s is None else stats.chunk_interval_s * 1000.0,
        "aggregate_tokens_per_s": stats.aggregate_tokens_per_s, "requests_per_s": stats.requests_per_s,
        "acceptance_rate": acceptance.rate if acceptance else None,
        "mean_accepted_length": acceptance.mean_accepted_length if acceptance else None,
        "draft_tokens": acceptance.draft_tokens if acceptance else None,
        "accepted_tokens": acceptance.accepted_tokens if acceptance else None,
        "speedup_vs_baseline": None,
    }


def add_speedups(rows: list[Row]) -> None:
    """Fill speedup_vs_baseline: total tokens/s over the no-draft row's at the same concurrency."""
    baseline = {r["concurrency"]: r["aggregate_tokens_per_s"] for r in rows if r["max_draft_len"] is None}
    for row in rows:
        if row["max_draft_len"] is not None:
            row["speedup_vs_baseline"] = speedup(row["aggregate_tokens_per_s"], baseline.get(row["concurrency"]))


def _number(digits: int, suffix: str = "") -> Callable[[Any], str]:
    return lambda value: "-" if value is None else f"{value:.{digits}f}{suffix}"


def _percent(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


COLUMNS: list[tuple[str, str, Callable[[Any], str]]] = [  # header lines split at "\n" on the terminal
    ("config", "config", str), ("streams", "concurrency", str), ("req", "requests", str), ("err", "errors", str),
    ("TTFT\np50 ms", "ttft_ms_p50", _number(0)), ("TTFT\np99 ms", "ttft_ms_p99", _number(0)),
    ("ITL\nms", "itl_ms_mean", _number(1)), ("tok/s\nstream", "decode_tokens_per_s_p50", _number(1)),
    ("tok/s\ntotal", "aggregate_tokens_per_s", _number(1)), ("latency\np50 s", "latency_s_p50", _number(2)),
    ("latency\np90 s", "latency_s_p90", _number(2)), ("latency\np99 s", "latency_s_p99", _number(2)),
    ("accept", "acceptance_rate", _percent), ("accepted\nlength", "mean_accepted_length", _number(2)),
    ("speedup", "speedup_vs_baseline", _number(2, "x")),
]


def table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """(headers, cells) of the results table shown on the terminal and in summary.md."""
    return [c[0] for c in COLUMNS], [[fmt(row[key]) for _, key, fmt in COLUMNS] for row in rows]


def write_json(record: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def write_csv(rows: list[Row], path: Path) -> Path:
    """One line per row, every field, empty where nothing was measured."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["config"])
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    return path


def _markdown_table(headers: list[str], cells: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(h.replace("\n", " ") for h in headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(row) + " |" for row in cells]


def _provenance_lines(record: dict[str, Any]) -> list[str]:
    what = record["provenance"]
    settings = record["settings"]
    revisions = ", ".join(f"{repo}@{rev}" for repo, rev in (what.get("revisions") or {}).items()) or "unknown"
    inventory = what["inventory"]
    rows = [
        ("inventory", f"{inventory.get('path') or '(path not given)'}, resolved sha256 {inventory['sha256'][:16]}"),
        ("profile", f"{what['profile']}: {what['target']}" + (f" + {what['draft']} (max_draft_len "
                                                              f"{what['max_draft_len']})" if what["draft"] else "")),
        ("image", f"{what['image']} (id {what.get('image_id') or 'unknown'})"),
        ("model revisions", revisions),
        ("endpoint", what["endpoint"]),
        ("fabric", _fabric_line(what.get("fabric") or {})),
        ("prompts", f"{settings['prompts']['source']}: {settings['prompts']['count']} prompts, "
                    f"sha256 {settings['prompts']['sha256'][:16]}"),
        ("settings", f"concurrency {','.join(map(str, settings['concurrency']))}; {settings['requests']} measured "
                     f"requests per level after {settings['warmup']}; max_tokens {settings['max_tokens']}; "
                     f"temperature {settings['temperature']}"),
    ]
    return ["| | |", "|---|---|"] + [f"| {key} | {value} |" for key, value in rows]


def _fabric_line(fabric: dict[str, Any]) -> str:
    """Each node's NCCL settings and, when measured, NCCL's transport, devices and bus bandwidth."""
    nodes = "; ".join(f"{name}: " + (", ".join(f"{key}={value}" for key, value in env.items()) or "not asked")
                      for name, env in (fabric.get("nodes") or {}).items()) or "not recorded"
    if not fabric.get("transport"):
        return f"{nodes}; {fabric.get('measured', 'not measured')}"
    used = "; ".join(f"{name} {transport} {'+'.join((fabric.get('devices') or {}).get(name, []))}".strip()
                     for name, transport in fabric["transport"].items())
    bandwidth = fabric.get("bus_bandwidth_gbs")
    return f"{nodes}; NCCL {used}" + (f"; all_gather bus bandwidth {bandwidth:g} GB/s" if bandwidth else "")


def _speedup_lines(rows: list[Row]) -> list[str]:
    lines = [f"- {r['config']} at {r['concurrency']} stream(s): {r['speedup_vs_baseline']:.2f}x the no-draft "
             f"output tokens/s" for r in rows if r["speedup_vs_baseline"] is not None]
    return ["## Speedup over the no-draft baseline", ""] + lines + [""] if lines else []


def write_summary(record: dict[str, Any], plots: list[Path], path: Path) -> Path:
    """summary.md: what ran, the results table, speedups, plots, and how to compare runs."""
    headers, cells = table(record["rows"])
    lines = [f"# sparkpair bench: {record['provenance']['profile']}", "",
             f"{record['started']} to {record['finished']} ({record['duration_s']:.0f} s), "
             f"sparkpair {record['sparkpair_version']}.", "", "## What ran", ""]
    lines += _provenance_lines(record) + ["", "## Results", ""] + _markdown_table(headers, cells) + [""]
    if record["errors"]:
        lines += ["## Errors", ""] + [f"- {text}" for text in record["errors"]] + [""]
    lines += _speedup_lines(record["rows"])
    lines += ["## Plots", ""] + [f"![{plot.stem}]({plot.name})" for plot in plots] + [""]
    lines += ["Two runs compare honestly when the inventory digest, image id, model revisions, prompt digest "
              "and settings above are the same. See docs/bench.md for what each column measures.", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def level_line(row: Row) -> str:
    """One measured point as a line of progress."""
    def number(key: str, digits: int) -> str:
        value = row.get(key)
        return "-" if value is None else f"{value:.{digits}f}"

    acceptance = "-" if row.get("acceptance_rate") is None else f"{100 * row['acceptance_rate']:.1f}%"
    return (f"{row['config']}, {row['concurrency']} stream(s): {number('aggregate_tokens_per_s', 1)} tok/s total, "
            f"TTFT p50 {number('ttft_ms_p50', 0)} ms, acceptance {acceptance}, "
            f"{row['errors']} of {row['requests']} failed")
