"""Why a start failed, from its logs: the likely causes, most likely first, each with its evidence.

Pure: text in, diagnoses out; no I/O, never raises on any text. Works on the ranks' logs of a
sparkpair launch and on logs of a start done by hand after NVIDIA's playbooks (any mix of
mpirun, trtllm-llmapi-launch, trtllm-serve, NCCL, docker, huggingface_hub and uvicorn output).

How causes are ranked: every line is claimed by the first signature that matches it
(`engine.signatures`, specific before generic). A cause's strength is its strongest line
(DECISIVE, STRONG, HINT); HINT lines count only when the log never reached serving. Causes are
ordered by strength, then by cause and effect (the order of `signatures.CAUSES`: a wrong image
comes before the GPU runtime it breaks, SSH before the daemons it could not start), then by the
first line that showed them. A consequence line ("ORTE was unable to reliably start one or more
daemons") joins the evidence of a cause it explains when one was found. When nothing failed and
the log stops mid-start, the finding is `startup.stalled` naming the last stage reached
(`engine.stages`); a log that reached its engine's serving stage ("Uvicorn running", "Application
startup complete") with no failure is healthy: no finding. The engine is the one launched, or the one
whose start the log shows (`stages.runtime_of_text`); a fix that names an engine's own setting comes
from that runtime (`Runtime.cause_fixes`), from every runtime when the log shows none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkpair import registry
from sparkpair.engine import stages
from sparkpair.engine.signatures import CAUSE_IDS, CAUSES, HINT, SIGNATURES, STALLED, Cause, Signature
from sparkpair.runtimes import Runtime, every_runtime, runtime_named

RUNBOOK = "docs/runbooks.md"
MAX_CHARS = 1_000_000   # failure signatures are sought in the last this many characters of lines
MAX_EVIDENCE = 6        # evidence lines kept per cause
MAX_SHOWN = 300         # characters of one evidence line
_BY_ID = {cause.id: cause for cause in CAUSES}


@dataclass(frozen=True)
class Diagnosis:
    """One likely cause of a failed start: the id, what it means here, the fix, the lines that show it."""

    cause: str
    summary: str
    fix: str
    evidence: list[str] = field(default_factory=list)
    runbook: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"cause": self.cause, "summary": self.summary, "fix": self.fix, "evidence": list(self.evidence),
                "runbook": self.runbook}


def runbook(cause: str) -> str:
    """The runbook section of a cause id (docs/runbooks.md has one anchor per id)."""
    return f"{RUNBOOK}#{cause.replace('.', '-')}"


def cause(cause_id: str) -> Cause:
    """The catalog entry of a cause id (KeyError for an unknown one)."""
    return _BY_ID[cause_id]


@dataclass
class _Hits:
    """What the lines showed for one cause while reading."""

    weight: int = 0
    first: int = 0
    lines: list[int] = field(default_factory=list)
    subject: str = ""
    context: set[int] = field(default_factory=set)


def _claim(line: str) -> tuple[Signature, str] | None:
    """The first signature matching line, with the subject it names ("" when none)."""
    for signature in SIGNATURES:
        found = signature.pattern.search(line)
        if found:
            return signature, (found.groupdict().get("subject") or "").strip()
    return None


def fix_of(cause_id: str, runtime: Runtime | None) -> str:
    """A cause's fix, with the engine's own setting to change in that runtime's words (each runtime's, labelled,
    when the engine is not known)."""
    entry = _BY_ID[cause_id]
    runtimes = [runtime] if runtime is not None else every_runtime()
    own = [f"{each.title}: {each.cause_fixes[cause_id]}" for each in runtimes if cause_id in each.cause_fixes]
    return "; ".join([entry.fix, *own])


def classify(text: str, runtime: Runtime | None = None) -> list[Diagnosis]:
    """The likely causes of a failed start in text, most likely first; empty when nothing failed. runtime: the
    engine that wrote it (None: the one whose start the text shows, if any)."""
    every_line = stages.clean_lines(text)
    lines = _last_lines(every_line, MAX_CHARS)
    if runtime is None:
        shown = stages.runtime_of_text(lines)
        runtime = runtime_named(shown) if shown else None
    serving = _serving(every_line, runtime)
    hits: dict[str, _Hits] = {}
    consequences: list[tuple[Signature, int, str]] = []
    for index, line in enumerate(lines):
        claimed = _claim(line)
        if claimed is None:
            continue
        signature, subject = claimed
        if signature.weight == HINT and serving:
            continue
        if signature.explains:
            consequences.append((signature, index, subject))
            continue
        _record(hits, signature, index, subject)
    for signature, index, subject in consequences:
        explained = [c for c in signature.explains if c in hits]
        if explained:
            hits[min(explained, key=CAUSE_IDS.index)].lines.append(index)
        else:
            _record(hits, signature, index, subject)
    ranked = sorted(hits.items(), key=lambda item: (-item[1].weight, CAUSE_IDS.index(item[0]), item[1].first))
    found = [_diagnosis(cause_id, hit, lines, runtime) for cause_id, hit in ranked]
    if not found and not serving:
        stalled = _stalled(lines, runtime)
        found = [stalled] if stalled else []
    return found


def _serving(lines: list[str], runtime: Runtime | None) -> bool:
    """Whether any line shows the server up (read from the end: a serving log ends long after it), by the serving
    stage of the runtime's start (the registry's default runtime's when the log shows none)."""
    serving = stages.of_runtime(runtime.name if runtime is not None else registry.DEFAULT).serving.pattern
    return any(serving.search(line) for line in reversed(lines))


def _last_lines(lines: list[str], budget: int) -> list[str]:
    """The last lines whose lengths add up to at most budget characters (a failure is near the end)."""
    total, start = 0, len(lines)
    while start > 0 and total + len(lines[start - 1]) + 1 <= budget:
        start -= 1
        total += len(lines[start]) + 1
    return lines[start:]


def _record(hits: dict[str, _Hits], signature: Signature, index: int, subject: str) -> None:
    hit = hits.get(signature.cause)
    if hit is None:
        hit = hits[signature.cause] = _Hits(first=index)
    hit.weight = max(hit.weight, signature.weight)
    hit.lines.append(index)
    hit.subject = hit.subject or subject
    hit.context.update(range(max(0, index - signature.lines_before), index))


def _diagnosis(cause_id: str, hit: _Hits, lines: list[str], runtime: Runtime | None) -> Diagnosis:
    entry = _BY_ID[cause_id]
    summary = entry.summary + (f" (seen: {hit.subject})" if hit.subject else "")
    return Diagnosis(cause_id, summary, fix_of(cause_id, runtime),
                     _evidence(lines, sorted(set(hit.lines) | hit.context)), runbook(cause_id))


def _evidence(lines: list[str], indexes: list[int]) -> list[str]:
    """The distinct lines at indexes, in log order, trimmed; at most MAX_EVIDENCE of them."""
    shown: list[str] = []
    for index in indexes:
        text = lines[index].strip()
        text = text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."
        if text and text not in shown:
            shown.append(text)
        if len(shown) == MAX_EVIDENCE:
            break
    return shown


def _stalled(lines: list[str], runtime: Runtime | None) -> Diagnosis | None:
    """startup.stalled naming the last stage reached, when the lines show a start that got somewhere."""
    where = stages.of_runtime(runtime.name if runtime is not None else registry.DEFAULT).advance(None, lines)
    if where is None:
        return None
    reached = where.reached
    entry = _BY_ID[STALLED]
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    evidence = _evidence([reached.line, last], [0, 1])
    summary = f"{entry.summary}: the last stage reached is '{reached.stage.name}' ({reached.stage.description})"
    if where.finished:
        summary += f", which finished; it stopped in '{where.current.name}' ({where.current.description})"
    return Diagnosis(STALLED, summary, fix_of(STALLED, runtime), evidence, runbook(STALLED))
