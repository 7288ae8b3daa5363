"""What `sparkpair diagnose` and `sparkpair logs --diagnose` print: each likely cause, most likely first, with
its evidence, fix and runbook section; or why nothing was found (the start reached serving, or where the log
ends and why that is no failure); and what of a large input was skipped. Typed through TYPE_CHECKING imports."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkpair import report
from sparkpair.inventory.messages import one_line

if TYPE_CHECKING:
    from sparkpair.engine.diagnose import Examination


def as_json(examination: Examination, skipped: dict[str, tuple[int, int]] | None = None) -> dict[str, object]:
    """The examination as `--json` prints it: the findings, and per input read only at its head and tail the
    bytes read and the bytes skipped between them."""
    data: dict[str, object] = {"findings": [item.as_dict() for item in examination.findings]}
    if skipped:
        data["skipped"] = [{"input": name, "read": kept, "skipped": size} for name, (kept, size) in skipped.items()]
    return data


def skipped_note(skipped: dict[str, tuple[int, int]]) -> None:
    """One line per input read only at its head and tail (input -> bytes read, bytes skipped)."""
    for name, (kept, size) in skipped.items():
        report.line(f"{name}: larger than the read cap: read {_size(kept)} at its start and end, skipped "
                    f"{_size(size)} between them")


def examination(result: Examination) -> None:
    """Each finding with its evidence, fix and runbook; or one line saying why there is none."""
    if not result.findings:
        report.line(_nothing(result))
        return
    for number, item in enumerate(result.findings, 1):
        report.out().print(f"[bold red]{number}. {report.escape(item.cause)}[/]: "
                           f"{report.escape(one_line(item.summary))}")
        report.line("   evidence:")
        for text in item.evidence:
            report.line(f"     | {one_line(text)}")
        report.line(f"   fix: {one_line(item.fix)}")
        report.line(f"   runbook: {item.runbook}")


def _nothing(result: Examination) -> str:
    if result.serving:
        return "no failure found: the start reached serving"
    ended = result.ended
    if ended is None:
        return "no failure found in the logs (nothing matched a known cause, and no start was seen stopping)"
    clock = ("the log holds no timestamps to tell how long it waited there" if ended.elapsed_s is None else
             f"its timestamps show {ended.elapsed_s:.0f} s after that stage began, within the stage's limit")
    return (f"no failure found: the log ends in stage '{ended.stage}' ({ended.description}) before serving, and "
            f"{clock}; a log that stops is no stall by itself (a start still running, or an excerpt): run it "
            f"again on the whole log later, or let sparkpair launch time each stage (last line of the stage: "
            f"{one_line(ended.line)[:200]})")


def _size(count: int) -> str:
    return f"{count / 1024 / 1024:.1f} MiB" if count >= 1024 * 1024 else f"{count} bytes"
