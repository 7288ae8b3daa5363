"""The benchmark's PNG plots (matplotlib, Agg backend, imported only when plotting).

draft_len.png: output tokens/s, acceptance rate and mean accepted length against max_draft_len,
one line per concurrency, the no-draft baseline as a dashed horizontal line.
concurrency.png: total and per-stream tokens/s and acceptance against concurrency, one line per
engine configuration (the baseline among them).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkpair.errors import SparkpairError

Row = dict[str, Any]
INSTALL_HINT = "pip install 'sparkpair[bench]'"


def ensure_matplotlib() -> None:
    """Raise one clear error, before anything is measured, when matplotlib is not installed."""
    if importlib.util.find_spec("matplotlib") is None:
        raise SparkpairError("sparkpair bench draws its plots with matplotlib, which is not installed",
                             hint=INSTALL_HINT)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series(rows: list[Row], x: str, y: str) -> tuple[list[float], list[float]]:
    """(xs, ys) of the rows where y was measured, ordered by x."""
    points = sorted((row[x], row[y]) for row in rows if row.get(y) is not None and row.get(x) is not None)
    return [p[0] for p in points], [p[1] for p in points]


def _percent(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def _style(axis: Any, title: str, xlabel: str, ylabel: str, integer_x: list[int]) -> None:
    axis.set_title(title)
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.set_xticks(sorted(set(integer_x)))
    axis.set_ylim(bottom=0)
    axis.grid(True, alpha=0.3)
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize="small")


def _draft_panel(axis: Any, rows: list[Row], metric: str, baseline: Callable[[int], float | None]) -> None:
    """One line per concurrency of metric against max_draft_len, with the baseline dashed."""
    speculative = [r for r in rows if r["max_draft_len"] is not None]
    for index, level in enumerate(sorted({r["concurrency"] for r in speculative})):
        colour = f"C{index}"
        xs, ys = _series([r for r in speculative if r["concurrency"] == level], "max_draft_len", metric)
        axis.plot(xs, ys, marker="o", color=colour, label=f"{level} stream{'s' if level > 1 else ''}")
        value = baseline(level)
        if value is not None:
            axis.axhline(value, color=colour, linestyle="--", linewidth=1,
                         label=f"no draft, {level} stream{'s' if level > 1 else ''}")


def plot_draft_lengths(rows: list[Row], path: Path, title: str) -> Path:
    """Tokens/s, acceptance rate and mean accepted length against max_draft_len; returns path."""
    plt = _pyplot()
    data = [{**r, "acceptance_pct": _percent(r["acceptance_rate"])} for r in rows]
    baseline_rows = {r["concurrency"]: r for r in data if r["max_draft_len"] is None}
    lengths = [r["max_draft_len"] for r in data if r["max_draft_len"] is not None]
    figure, axes = plt.subplots(1, 3, figsize=(16, 5), constrained_layout=True)
    _draft_panel(axes[0], data, "aggregate_tokens_per_s",
                 lambda c: baseline_rows[c]["aggregate_tokens_per_s"] if c in baseline_rows else None)
    _style(axes[0], "Output throughput", "max_draft_len (draft tokens per iteration)",
           "output tokens/s (all streams)", lengths)
    _draft_panel(axes[1], data, "acceptance_pct", lambda c: None)
    _style(axes[1], "Draft acceptance rate", "max_draft_len (draft tokens per iteration)",
           "accepted / drafted tokens (%)", lengths)
    axes[1].set_ylim(0, 105)
    _draft_panel(axes[2], data, "mean_accepted_length", lambda c: None)
    if baseline_rows:
        axes[2].axhline(1.0, color="grey", linestyle="--", linewidth=1, label="no draft (1 token per iteration)")
    _style(axes[2], "Mean accepted length", "max_draft_len (draft tokens per iteration)",
           "tokens per iteration per request", lengths)
    figure.suptitle(title)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _config_panel(axis: Any, rows: list[Row], metric: str) -> None:
    """One line per engine configuration of metric against concurrency (the baseline dashed)."""
    for index, label in enumerate(dict.fromkeys(r["config"] for r in rows)):
        mine = [r for r in rows if r["config"] == label]
        xs, ys = _series(mine, "concurrency", metric)
        if xs:
            dashed = mine[0]["max_draft_len"] is None
            axis.plot(xs, ys, marker="s" if dashed else "o", linestyle="--" if dashed else "-",
                      color="black" if dashed else f"C{index}", label=label)


def plot_concurrency(rows: list[Row], path: Path, title: str) -> Path:
    """Total and per-stream tokens/s and acceptance rate against concurrency; returns path."""
    plt = _pyplot()
    data = [{**r, "acceptance_pct": _percent(r["acceptance_rate"])} for r in rows]
    levels = [r["concurrency"] for r in data]
    figure, axes = plt.subplots(1, 3, figsize=(16, 5), constrained_layout=True)
    _config_panel(axes[0], data, "aggregate_tokens_per_s")
    _style(axes[0], "Output throughput", "concurrent streams", "output tokens/s (all streams)", levels)
    _config_panel(axes[1], data, "decode_tokens_per_s_p50")
    _style(axes[1], "Per-stream decode speed (median)", "concurrent streams",
           "tokens/s after the first token", levels)
    _config_panel(axes[2], [r for r in data if r["max_draft_len"] is not None], "acceptance_pct")
    _style(axes[2], "Draft acceptance rate", "concurrent streams", "accepted / drafted tokens (%)", levels)
    axes[2].set_ylim(0, 105)
    figure.suptitle(title)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def write_plots(rows: list[Row], out_dir: Path, title: str) -> list[Path]:
    """The PNGs for these result rows (the draft-length plot only when a draft was measured)."""
    paths = [plot_concurrency(rows, out_dir / "concurrency.png", title)]
    if any(r["max_draft_len"] is not None for r in rows):
        paths.insert(0, plot_draft_lengths(rows, out_dir / "draft_len.png", title))
    return paths
