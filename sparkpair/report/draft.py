"""What `sparkpair train-draft` prints: the steps run and skipped, the installed revision, and both drafts'
acceptance and tokens/s side by side (bench's own table). Typed through TYPE_CHECKING imports only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkpair import report

if TYPE_CHECKING:
    from sparkpair.draft.plan import Plan
    from sparkpair.draft.run import DraftResult


def as_json(result: DraftResult) -> dict[str, object]:
    """The result as `--json` prints it."""
    return {"name": result.name, "ran": result.ran, "skipped": result.skipped, "revision": result.commit,
            "drafts": result.summary, "files": [str(path) for path in result.files], "plan": result.plan}


def _percent(value: object) -> str:
    return "-" if not isinstance(value, (int, float)) else f"{100 * value:.1f}%"


def _rate(value: object) -> str:
    return "-" if not isinstance(value, (int, float)) else f"{value:.1f}"


def draft_result(result: DraftResult) -> None:
    """The run's outcome as lines (stdout)."""
    report.line(f"draft {result.name} at revision {result.commit[:12] or '-'}: ran {', '.join(result.ran) or 'nothing'}"
                + (f"; resumed past {', '.join(result.skipped)}" if result.skipped else ""))
    if result.table[1]:
        report.bench_results(*result.table)
    for label, figures in result.summary.items():
        report.line(f"{label}: acceptance {_percent(figures.get('acceptance_rate'))}, "
                    f"{_rate(figures.get('tokens_per_s'))} tokens/s")
    if result.files:
        report.written_files(result.files[0].parent, result.files)


def draft_plan(plan: Plan, states: dict[str, str], as_json: bool = False) -> None:
    """The dry run: the plan, then each step and whether it would run or is done already (stdout); --json: the
    steps, and the plan under "plan"."""
    if as_json:
        report.emit_json({**states, "plan": {"mode": plan.mode, "device": plan.device, "precision": plan.precision,
                                             "refusal": plan.refusal, "lines": plan.lines, "figures": plan.figures}})
        return
    for line in plan.lines:
        report.line(f"plan: {line}")
    if plan.refusal:
        report.line(f"plan: refused: {plan.refusal}")
    for step, state in states.items():
        report.line(f"{step}: {state}")
