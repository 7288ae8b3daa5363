"""Why a start failed, from its logs: the likely causes, most likely first, each with its evidence.

Pure: text in, diagnoses out; no I/O, never raises on any text. Works on the ranks' logs of a
sparkpair launch and on logs of a start done by hand after NVIDIA's playbooks (any mix of
mpirun, trtllm-llmapi-launch, trtllm-serve, vllm serve, NCCL, Gloo, Ray, docker, huggingface_hub and
uvicorn output).

How causes are ranked: every line is claimed by the first signature that matches it
(`engine.signatures.every_signature`: the shared lines and each runtime's own `failure_lines`, specific before
generic). A cause's strength is its strongest line (DECISIVE, STRONG, HINT); HINT lines count only when the
log never reached serving. Causes are ordered by strength, then by cause and effect (the order of `signatures.CAUSES`: a wrong image
comes before the GPU runtime it breaks, SSH before the daemons it could not start), then by the
first line that showed them. A consequence line (a signature's `explains`) joins the evidence of the
best-ranked cause it explains when one was found, and stands as its own cause otherwise: "ORTE was
unable to reliably start one or more daemons" after SSH's refusal; NCCL's "Software caused connection
abort" (a dropped peer, `peer.lost`) after the other rank's own failure; and every crash line
("initialization failed", a segmentation fault, FATAL, a rank's non-zero exit, and the last line of a
Python traceback when the start never came up), which is `unknown.fatal` when nothing explains it.

A stall is elapsed time, never a log that merely ends: `startup.stalled` when the log's own timestamps
(`engine.logtime`) show the start past the limit of the stage it was in, or the engine says it waits on
a process that does not answer. A log that ends mid-start without either is no failure; `Examination`
says in which stage it ends. A log that reached its engine's serving stage ("Uvicorn running",
"Application startup complete") with no failure is healthy. The engine is the one launched, or the one
whose start the log shows most of (the registry's first on a tie); a fix that names an engine's own
setting comes from that runtime (`Runtime.cause_fixes`), from every runtime when the log shows none.

Cost: `engine.loglines` finds the lines each pattern may match with one `str.find` pass per word over
the whole text, so 8 MiB of any lines takes well under 2 s (scripts/bench/diagnose.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from sparkpair import registry
from sparkpair.engine import stages
from sparkpair.engine.loglines import LogLines
from sparkpair.engine.logtime import Stamp, stamp
from sparkpair.engine.signatures import (
    CAUSE_IDS,
    CAUSES,
    HINT,
    STALLED,
    TRACEBACK,
    Cause,
    Signature,
    every_signature,
)
from sparkpair.linepattern import LinePattern, required_words
from sparkpair.runtimes import Runtime, every_runtime, runtime_named

RUNBOOK = "docs/runbooks.md"
MAX_CHARS = 16 * 1024 * 1024   # only the last this many characters are read (`sparkpair diagnose` reads 8 MiB)
MAX_EVIDENCE = 6        # evidence lines shown per cause
MAX_SHOWN = 300         # characters of one evidence line
MAX_KEPT = 64           # distinct lines kept per cause while reading
MAX_TRACEBACKS = 64     # the last this many tracebacks are followed to their final line
TRACEBACK_LINES = 400   # how far below its first line a traceback's final line is looked for
STAMP_LINES = 1000      # how far up from the end (and 50 from a stage line) a timestamp is looked for
_BY_ID = {cause.id: cause for cause in CAUSES}
_EXCEPTION = LinePattern.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Timeout|Failure)"
                                 r"(?:\([\w.]*\))?(?::|$)")


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


@dataclass(frozen=True)
class Ending:
    """Where a log that shows no failure ends before serving: the furthest stage, its line, and the seconds the
    log's own timestamps show after it (None: the log holds no timestamps to tell)."""

    stage: str
    description: str
    line: str
    elapsed_s: float | None


@dataclass(frozen=True)
class Examination:
    """What the logs show: the findings, most likely first; whether the server came up; and, when neither,
    where the log ends."""

    findings: list[Diagnosis]
    serving: bool
    ended: Ending | None = None


def runbook(cause: str) -> str:
    """The runbook section of a cause id (docs/runbooks.md has one anchor per id)."""
    return f"{RUNBOOK}#{cause.replace('.', '-')}"


def cause(cause_id: str) -> Cause:
    """The catalog entry of a cause id (KeyError for an unknown one)."""
    return _BY_ID[cause_id]


def classify(text: str, runtime: Runtime | None = None, watched_s: float | None = None) -> list[Diagnosis]:
    """The likely causes of a failed start in text, most likely first; empty when nothing failed. runtime: the
    engine that wrote it (None: the one whose start the text shows, if any); watched_s: how long the launch watch
    saw the start without progress when it stopped it (its own clock: a stall where nothing else explains it)."""
    return examine(text, runtime, watched_s).findings


def fix_of(cause_id: str, runtime: Runtime | None) -> str:
    """A cause's fix, with the engine's own setting to change in that runtime's words (each runtime's, labelled,
    when the engine is not known)."""
    entry = _BY_ID[cause_id]
    runtimes = [runtime] if runtime is not None else every_runtime()
    own = [f"{each.title}: {each.cause_fixes[cause_id]}" for each in runtimes if cause_id in each.cause_fixes]
    return "; ".join([entry.fix, *own])


@dataclass
class _Hits:
    """What the lines showed for one cause while reading: distinct lines (trimmed) with where they start."""

    weight: int = 0
    first: int = 0
    shown: dict[str, int] = field(default_factory=dict)
    subject: str = ""

    def add(self, start: int, line: str, at: int = 0) -> None:
        """Keep line (its part around offset at when it is longer than MAX_SHOWN) as evidence."""
        text = line.strip()
        if len(text) > MAX_SHOWN:   # at most MAX_SHOWN characters of it, and "..." where it was cut
            begin = max(0, min(at - MAX_SHOWN // 3, len(text) - MAX_SHOWN))
            more = "..." if begin + MAX_SHOWN < len(text) else ""
            text = text[:MAX_SHOWN] + more if begin == 0 else "..." + text[begin + 3:begin + MAX_SHOWN] + more
        if text and (text in self.shown or len(self.shown) < MAX_KEPT):
            self.shown[text] = min(start, self.shown.get(text, start))

    def rank(self, cause_id: str) -> tuple[int, int, int]:
        return -self.weight, CAUSE_IDS.index(cause_id), self.first


def examine(text: str, runtime: Runtime | None = None, watched_s: float | None = None) -> Examination:
    """The findings in text, whether it shows the server up (by the serving stage of runtime, the engine that
    wrote it; None: the one whose start the text shows, the registry's default when it shows none), and where it
    ends when it shows neither."""
    log = LogLines(_tail(text), _words())
    if runtime is None:
        shown = _shown_runtime(log)
        runtime = runtime_named(shown) if shown else None
    serving = bool(log.matching(stages.of_runtime(runtime.name if runtime else registry.DEFAULT).serving.pattern))
    signatures = every_signature()
    firsts, claimed = _claims(log, signatures)
    hits: dict[str, _Hits] = {}
    consequences: list[tuple[int, int, str, int]] = []   # (signature index, line start, subject, match at)
    for start, index, subject, at in firsts:
        signature = signatures[index]
        if signature.weight == HINT and serving:
            continue
        if signature.explains:
            consequences.append((index, start, subject, at))
        else:
            _record(hits, signature, start, subject, at, log)
    if not serving:
        consequences += [(len(signatures), start, "", 0) for start in _traceback_ends(log) if start not in claimed]

    def settling(item: tuple[int, int, str, int]) -> tuple[int, int, int]:   # strongest first, then most specific
        return -_signature(signatures, item[0]).weight, item[0], item[1]

    for index, start, subject, at in sorted(consequences, key=settling):
        signature = _signature(signatures, index)
        explained = [cause_id for cause_id in signature.explains if cause_id in hits]
        if explained:
            best = min(explained, key=lambda cause_id: hits[cause_id].rank(cause_id))
            hits[best].add(start, log.line(start), at)
        else:
            _record(hits, signature, start, subject, at, log)
    ranked = sorted(hits.items(), key=lambda item: item[1].rank(item[0]))
    where = _position(log, runtime) if not serving and (not ranked or STALLED in hits) else None
    found = [_diagnosis(cause_id, hit, where, runtime) for cause_id, hit in ranked]
    if found or serving or where is None:
        return Examination(found, serving)
    stalled, elapsed = _stalled(log, where, runtime, watched_s)
    if stalled is not None:
        return Examination([stalled], serving)
    reached = where.reached
    return Examination([], serving, Ending(reached.stage.name, reached.stage.description, reached.line, elapsed))


def _signature(signatures: tuple[Signature, ...], index: int) -> Signature:
    """The signature at index, TRACEBACK past the end of signatures."""
    return signatures[index] if index < len(signatures) else TRACEBACK


@cache
def _words() -> tuple[str, ...]:
    """Every word of every pattern examine looks for: found in the log in one pass."""
    patterns = [signature.pattern for signature in (*every_signature(), TRACEBACK)]
    for runtime in every_runtime():
        start = stages.of_runtime(runtime.name)
        patterns += [stage.pattern for stage in start.stages]
        patterns += [_finished(pattern) for pattern in start.finished.values()]
    return tuple(sorted({word for pattern in patterns for word in pattern.words}))


@cache
def _finished(pattern: re.Pattern[str]) -> LinePattern:
    """A stage's `finished` expression with its quick test."""
    return LinePattern(pattern, required_words(pattern.pattern))


def _tail(text: str) -> str:
    """text, or its last MAX_CHARS characters from a line's start (a failure is near the end)."""
    if len(text) <= MAX_CHARS:
        return text
    cut = text[-MAX_CHARS:]
    return cut[cut.find("\n") + 1:]


def _claims(log: LogLines, signatures: tuple[Signature, ...]) -> tuple[list[tuple[int, int, str, int]], set[int]]:
    """The lines signatures claim: the first line of each distinct text a signature claims, as (start, the
    first matching signature's index, the subject it names, where in the line it matched), and the start of
    every claimed line."""
    wanted: dict[int, list[int]] = {}
    for index, signature in enumerate(signatures):
        for start in log.candidates(signature.pattern):
            wanted.setdefault(start, []).append(index)
    firsts: list[tuple[int, int, str, int]] = []
    claimed: set[int] = set()
    memo: dict[tuple[str, int, int], tuple[int, str, int] | None] = {}   # identical lines are judged once
    for start in sorted(wanted):
        indexes = wanted[start]
        key = (log.line(start), indexes[0], len(indexes))
        if key in memo:
            if memo[key] is not None:
                claimed.add(start)
            continue
        claim = memo[key] = _claim(key[0], signatures, indexes)
        if claim is not None:
            claimed.add(start)
            firsts.append((start, *claim))
    return firsts, claimed


def _claim(line: str, signatures: tuple[Signature, ...], indexes: list[int]) -> tuple[int, str, int] | None:
    for index in indexes:   # the line holds one of each signature's words: the quick test is done
        found = signatures[index].pattern.regex.search(line)
        if found:
            return index, (found.groupdict().get("subject") or "").strip(), found.start() - (len(line) - len(line.lstrip()))
    return None


def _traceback_ends(log: LogLines) -> list[int]:
    """The final line (the exception) of each of the last MAX_TRACEBACKS Python tracebacks: the first line below
    "Traceback (most recent call last):" with the same prefix that is not indented and names an exception."""
    ends = []
    for start in log.matching(TRACEBACK.pattern)[-MAX_TRACEBACKS:]:
        first = log.line(start)
        prefix = first[:log.folded.find("traceback (most recent", start) - start]
        at = start
        for _ in range(TRACEBACK_LINES):
            newline = log.text.find("\n", at)
            if newline < 0:
                break
            at = newline + 1
            line = log.line(at)
            rest = line[len(prefix):] if line.startswith(prefix) else ""
            if rest[:1] not in ("", " ", "\t") and _EXCEPTION.search(rest):
                ends.append(at)
                break
    return ends


def _record(hits: dict[str, _Hits], signature: Signature, start: int, subject: str, at: int, log: LogLines) -> None:
    hit = hits.get(signature.cause)
    if hit is None:
        hit = hits[signature.cause] = _Hits(first=start)
    hit.weight = max(hit.weight, signature.weight)
    hit.first = min(hit.first, start)
    hit.subject = hit.subject or subject
    for before in log.before(start, signature.lines_before):
        hit.add(before, log.line(before))
    hit.add(start, log.line(start), at)


def _diagnosis(cause_id: str, hit: _Hits, where: stages.Position | None, runtime: Runtime | None) -> Diagnosis:
    entry = _BY_ID[cause_id]
    summary = entry.summary + (f" (seen: {hit.subject})" if hit.subject else "")
    if cause_id == STALLED:
        summary += ": the engine itself says it waits on a process that does not answer"
        if where is not None:
            summary += f" (the last stage reached is '{where.reached.stage.name}', {where.reached.stage.description})"
    evidence = [text for text, _ in sorted(hit.shown.items(), key=lambda item: item[1])][:MAX_EVIDENCE]
    return Diagnosis(cause_id, summary, fix_of(cause_id, runtime), evidence, runbook(cause_id))


def _shown_runtime(log: LogLines) -> str | None:
    """The runtime whose start the log shows most of (its own stages: the serving stage, which every engine's
    uvicorn prints alike, does not count; the registry's first on a tie); None when it shows no runtime's."""
    best, most = None, 0
    for name in registry.NAMES:
        shown = sum(1 for stage in stages.of_runtime(name).stages[:-1] if log.last_matching(stage.pattern) is not None)
        if shown > most:
            best, most = name, shown
    return best


def _position(log: LogLines, runtime: Runtime | None = None) -> stages.Position | None:
    """How far the start got: the furthest stage of runtime's start (None: of whichever runtime shows the most of
    its own stages, the registry's first on a tie)."""
    names = (runtime.name,) if runtime is not None else registry.NAMES
    best: stages.StartStages | None = None
    best_last: dict[str, int | None] = {}
    most = -1
    for name in names:
        start = stages.of_runtime(name)
        last = {stage.name: log.last_matching(stage.pattern) for stage in start.stages}
        count = sum(1 for stage in start.stages[:-1] if last[stage.name] is not None)
        if count > most:
            best, best_last, most = start, last, count
    assert best is not None
    reached = next((stage for stage in reversed(best.stages) if best_last[stage.name] is not None), None)
    if reached is None:
        return None
    latest = best_last[reached.name]
    assert latest is not None
    done = best.finished.get(reached.name)
    finished = bool(done) and (log.last_matching(_finished(done)) or -1) > latest if done else False
    return stages.Position(stages.Reached(reached, log.line(latest).strip(), latest), finished, best.stages)


def _stalled(log: LogLines, where: stages.Position, runtime: Runtime | None = None,
             watched_s: float | None = None) -> tuple[Diagnosis | None, float | None]:
    """startup.stalled when the log's timestamps show the start past its stage's limit, or the launch watch stopped
    it after watched_s seconds without progress (its own clock); else None, with the seconds the timestamps show
    after the last stage (None when the log holds no timestamps)."""
    reached, stage = where.reached, where.current
    entry = _BY_ID[STALLED]
    stopped_in = (f"; it stopped in '{stage.name}' ({stage.description})" if where.finished else
                  f"; it stopped in '{reached.stage.name}'")
    if watched_s is not None:
        summary = (f"{entry.summary}: the launch watch saw {watched_s:.0f} s without progress; the last stage "
                   f"reached is '{reached.stage.name}' ({reached.stage.description}){stopped_in}")
        return Diagnosis(STALLED, summary, fix_of(STALLED, runtime), _stall_evidence(log, reached.line),
                         runbook(STALLED)), watched_s
    begin = _stamp_from(log, [reached.index, *reversed(log.before(reached.index, 50))])
    end = _stamp_from(log, log.last_lines(STAMP_LINES), begin.kind) if begin else None
    if begin is None or end is None:
        return None, None
    elapsed = end.seconds - begin.seconds
    if elapsed < stage.limit_s:
        return None, max(elapsed, 0.0)
    summary = (f"{entry.summary}: {elapsed:.0f} s from {begin.text} to {end.text} without a new stage, longer than "
               f"the {stage.limit_s:.0f} s '{stage.name}' ({stage.description}) may take; the last stage reached "
               f"is '{reached.stage.name}'{stopped_in}")
    return Diagnosis(STALLED, summary, fix_of(STALLED, runtime), _stall_evidence(log, reached.line),
                     runbook(STALLED)), elapsed


def _stall_evidence(log: LogLines, reached: str) -> list[str]:
    """The line of the last stage reached and the log's last line."""
    last = next((log.line(start).strip() for start in log.last_lines(1)), "")
    return [line[:MAX_SHOWN] for line in dict.fromkeys([reached, last]) if line]


def _stamp_from(log: LogLines, starts: list[int], kind: str | None = None) -> Stamp | None:
    """The first timestamp (of kind, when given) on the lines at starts, in the order given."""
    for start in starts:
        found = stamp(log.line(start))
        if found is not None and (kind is None or found.kind == kind):
            return found
    return None
