"""The evaluate step: the target served with the profile's current draft and with the trained one, each
measured by `sparkpair bench` on the held-back prompts (never trained on), side by side: acceptance and
tokens/s of both, and bench's own plots of both.

Serving a draft is a launch of the profile with its `draft` (and its runtime variant's) replaced; the
engine is relaunched only when what runs is not that (`launch` is idempotent on an unchanged config).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sparkpair.bench import BenchOptions, run_bench, write_outputs
from sparkpair.bench.record import Row
from sparkpair.engine.launch import LaunchOptions, launch
from sparkpair.errors import SparkpairError
from sparkpair.inventory import Inventory
from sparkpair.progress import Event, Progress
from sparkpair.transport import Pair

LAUNCH_TIMEOUT_S = 1800.0


def with_draft(inventory: Inventory, profile: str, runtime: str, draft: str | None) -> Inventory:
    """The inventory with PROFILE's draft replaced by DRAFT on RUNTIME (its variant's too, which would win)."""
    if draft is None:
        return inventory
    models = {name: dict(source) for name, source in inventory.models.items()}
    own = models.setdefault(profile, {})
    own["draft"] = draft
    variants = {key: dict(value) for key, value in (own.get("variants") or {}).items()}
    variants.setdefault(runtime, {})["draft"] = draft
    own["variants"] = variants
    return replace(inventory, models=models)


def serve(pair: Pair, inventory: Inventory, profile: str, runtime: str, what: str, progress: Progress) -> None:
    """Launch PROFILE on RUNTIME as INVENTORY says (the head's models, a trained draft among them, copied and
    verified on every node that runs a rank: launch's fan-out); SparkpairError naming WHAT when it fails."""
    progress(Event("train-draft", f"serving {profile} with {what}"))
    options = LaunchOptions(profile=profile, runtime=runtime, timeout=LAUNCH_TIMEOUT_S)  # copies to every rank node
    result = launch(pair, inventory, options, lambda event: progress(replace(event, level="info")
                                                                     if event.level == "result" else event))
    if not result.ok:
        why = result.failure.detail if result.failure else (
            f"{len(result.preflight)} launch-critical check(s) FAIL" if result.preflight else "see the lines above")
        raise SparkpairError(f"serving {profile} with {what} failed: {why}",
                             hint="docs/runbooks.md#train-draft-export-refused names what a runtime refuses")


@dataclass(frozen=True)
class Measured:
    """One draft's bench rows on the held-back prompts, labelled with the draft's name."""

    label: str
    rows: list[Row]
    record: dict[str, Any]


def measure(pair: Pair, inventory: Inventory, profile: str, label: str, held_back: Path, requests: int,
            max_tokens: int, out_dir: Path, progress: Progress) -> Measured:
    """bench of what serves PROFILE now, on the held-back prompts; its rows relabelled LABEL."""
    options = BenchOptions(profile=profile, concurrency=[1], requests=requests, max_tokens=max_tokens,
                           prompts=held_back, compare_baseline=False, draft_lengths=[], out_dir=out_dir,
                           as_json=False)
    result = run_bench(pair, inventory, options, progress)
    rows = [{**row, "config": label} for row in result.rows]
    return Measured(label, rows, result.record)


def side_by_side(current: Measured, trained: Measured, out_dir: Path) -> tuple[list[Row], list[Path]]:
    """Both drafts' rows, and bench's files (results.json, results.csv, the plots, summary.md) of both in OUT_DIR."""
    rows = current.rows + trained.rows
    record = {**trained.record, "rows": rows,
              "drafts": {"current": current.label, "trained": trained.label}}
    return rows, write_outputs(record, out_dir)


def summary(rows: list[Row]) -> dict[str, dict[str, float | None]]:
    """Per draft label: acceptance rate and total tokens/s (concurrency 1)."""
    return {row["config"]: {"acceptance_rate": row["acceptance_rate"], "tokens_per_s": row["aggregate_tokens_per_s"],
                            "mean_accepted_length": row["mean_accepted_length"]} for row in rows}
