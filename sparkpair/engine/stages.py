"""The stages of an engine's multi-node start, in order, and the furthest one a log reached.

Pure: text in, stage out; no I/O. Each runtime names its stages (`runtimes.StageSpec`: TensorRT-LLM's
launcher banner -> MPI world up -> model loading -> NCCL init -> autotune/warm-up -> executor ready ->
serving; vLLM's start-up -> torch.distributed -> weights -> compile -> KV cache -> API server), each
recognised by what the engine, NCCL and uvicorn print when they get there; `StartStages` compiles them.
`engine.diagnose` uses `last_stage` to name where a start stopped (startup.stalled) and
`runtime_of_text` to tell which engine wrote a log it was not told about; the launch watchdog
(`engine.watch`) follows each rank's log with `StartStages.advance`, which also knows the stage after
one the log shows finished.

Every stage's pattern is a `linepattern.LinePattern`: linear in the line, with a quick test first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

from sparkpair import registry
from sparkpair.linepattern import LinePattern
from sparkpair.runtimes import StageSpec, runtime_named

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


@dataclass(frozen=True)
class Stage:
    """One step of a start: its name, what it means in words, the lines that show it was reached, and how
    the launch watchdog treats it (its label, its stall limit, whether CPU time alone is progress)."""

    name: str
    description: str
    pattern: LinePattern
    label: str = ""
    limit_s: float = 300.0
    alone: bool = True


@dataclass(frozen=True)
class Reached:
    """The furthest stage a log shows, with the latest line that showed it and that line's index."""

    stage: Stage
    line: str
    index: int


@dataclass(frozen=True)
class Position:
    """Where a start is by its log: the furthest stage reached, and whether a later line shows it finished."""

    reached: Reached
    finished: bool = False
    order: tuple[Stage, ...] = field(default=(), compare=False)  # the stages of the start it belongs to

    @property
    def current(self) -> Stage:
        """The stage the start is in now: the one reached, or the next one once the log shows it finished."""
        order = self.order or (self.reached.stage,)
        position = order.index(self.reached.stage)
        return order[position + 1] if self.finished and position + 1 < len(order) else self.reached.stage


class StartStages:
    """One runtime's start, compiled from its `runtimes.StageSpec`s: its stages in order and the judges of
    how far a log got."""

    def __init__(self, specs: tuple[StageSpec, ...]) -> None:
        self.stages = tuple(Stage(spec.name, spec.description,
                                  LinePattern.compile("|".join(f"(?:{p})" for p in spec.patterns)),
                                  spec.label or spec.name, spec.limit_s, spec.alone) for spec in specs)
        self.names = tuple(stage.name for stage in self.stages)
        self.serving = self.stages[-1]
        self.finished = {spec.name: re.compile(spec.finished) for spec in specs if spec.finished}

    def index(self, name: str) -> int:
        """The position of a stage name in the start's order (-1 for an unknown name)."""
        return self.names.index(name) if name in self.names else -1

    def last_stage_in(self, lines: list[str]) -> Reached | None:
        """The furthest stage any of lines shows (stages are ordered; order in the log does not matter)."""
        for stage in reversed(self.stages):
            for index in range(len(lines) - 1, -1, -1):
                if stage.pattern.search(lines[index]):
                    return Reached(stage, lines[index].strip(), index)
        return None

    def advance(self, position: Position | None, lines: list[str]) -> Position | None:
        """The position after more lines of the same log (cleaned, in log order); the log so far is not needed."""
        reached = self.last_stage_in(lines)
        if reached is not None and (position is None or self.index(reached.stage.name) >= self.index(
                position.reached.stage.name)):
            position, after = Position(reached, order=self.stages), lines[reached.index + 1:]
        else:
            after = lines
        if position is None or position.finished:
            return position
        done = self.finished.get(position.reached.stage.name)
        return Position(position.reached, True, self.stages) if done and any(done.search(line) for line in after) \
            else position

    def is_serving(self, text: str) -> bool:
        """Whether the text shows the server up (its serving stage, the last one)."""
        return any(self.serving.pattern.search(line) for line in clean_lines(text))


@cache
def of_runtime(name: str) -> StartStages:
    """The stages of a start of the runtime called name."""
    return StartStages(runtime_named(name).stages)


def runtime_of_text(lines: list[str]) -> str | None:
    """The runtime whose start the log lines show most of (its own stages: the serving stage, which every engine's
    uvicorn prints alike, does not count; the registry's first on a tie); None when they show no runtime's.
    diagnose reads logs without being told the engine."""
    best, most = None, 0
    for name in registry.NAMES:
        shown = sum(1 for stage in of_runtime(name).stages[:-1] if any(stage.pattern.search(line) for line in lines))
        if shown > most:
            best, most = name, shown
    return best


def of_text(lines: list[str]) -> StartStages:
    """The stages of whichever runtime wrote the log lines (runtime_of_text), the registry's default runtime's when
    they show none."""
    return of_runtime(runtime_of_text(lines) or registry.DEFAULT)


def clean_lines(text: str, max_line: int = 4096) -> list[str]:
    """The log's lines without terminal colour codes or progress-bar rewrites, each cut to max_line."""
    lines = []
    for raw in ANSI_ESCAPE.sub("", text).splitlines():
        shown = raw.rsplit("\r", 1)[-1] if "\r" in raw else raw  # a tqdm bar redrawn with \r: its last state
        lines.append(shown[:max_line])
    return lines


def last_stage(text: str) -> Reached | None:
    """The furthest stage of a start (of whichever runtime wrote text) the text reached, or None."""
    lines = clean_lines(text)
    return of_text(lines).last_stage_in(lines)


def is_serving(text: str) -> bool:
    """Whether the text shows the server up (uvicorn running or its application startup complete)."""
    lines = clean_lines(text)
    serving = of_text(lines).serving.pattern
    return any(serving.search(line) for line in lines)
