"""The stages of a TensorRT-LLM multi-node start, in order, and the furthest one a log reached.

Pure: text in, stage out; no I/O. A start goes launcher banner -> MPI world up -> model loading ->
NCCL init -> autotune/warm-up -> executor ready -> serving. Each stage is recognised by what
trtllm-llmapi-launch, TensorRT-LLM, NCCL and uvicorn print when they get there, not by one log's
wording. `engine.diagnose` uses `last_stage` to name where a start stopped (startup.stalled); the
launch watchdog (`engine.watch`) follows each rank's log with `advance`, which also knows the stage
after one the log shows finished (`FINISHED`).

Every stage's pattern is a `linepattern.LinePattern`: linear in the line, with a quick test first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparkpair.engine.linepattern import LinePattern, followed_by

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


@dataclass(frozen=True)
class Stage:
    """One step of a start: its name, what it means in words, and the lines that show it was reached."""

    name: str
    description: str
    pattern: LinePattern


def _stage(name: str, description: str, *patterns: str) -> Stage:
    return Stage(name, description, LinePattern.compile("|".join(f"(?:{p})" for p in patterns)))


STAGES: tuple[Stage, ...] = (
    _stage("launcher", "the launcher started the ranks: trtllm-llmapi-launch banner, engine version",
           r"^\s*mpi_rank:\s*\d+", r"^\s*tllm_mpi_size:\s*\d+", r"\brun mgmn (?:leader|worker) node\b",
           r"^Rank\d+ run .* in background", r"TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR",
           r"\[TensorRT-LLM\] TensorRT[- ]LLM version"),
    _stage("mpi", "the MPI world is up: an MPI session holds every rank",
           r"Refreshed the MPI local session", r"\bMPI size:\s*\d+", r"\bMpi(?:Pool|Comm)?Session\b",
           r"\bstart MpiSession with \d+ workers", r"RemoteMpiCommSession", r"Initializing for: lib='OMPI'"),
    _stage("model", "loading the model weights",
           followed_by(r"\bLoading\b", r"\b(?:weights?|checkpoints?|safetensors|shards?|model)\b"),
           r"\bFetching \d+ files\b", followed_by(r"\bPre-?fetching\b", r"\bcheckpoint"), r"\bload_weights\b", r"\bmodel_loader\b"),
    _stage("nccl", "NCCL is setting up the communicators between the ranks",
           followed_by(r"\bNCCL INFO\b", r"\b(?:Init (?:START|COMPLETE)|Bootstrap|comm 0x|Using network|NET/)"),
           r"\bNCCL version \d", r"\bncclCommInitRank\b"),
    _stage("warmup", "autotuning and warm-up: kernels, CUDA graphs",
           r"\bautotun", r"\bwarm-?up\b", r"\bCUDA graphs?\b", r"\bcuda_graph", r"\[stage=compile\b"),
    _stage("executor", "the executor is ready: KV cache allocated, workers answered",
           r"get signal from executor worker", r"\bMax KV cache blocks\b", followed_by(r"\bAllocated ", r"\bKV cache\b"),
           r"global_steady_clock_offset"),
    _stage("serving", "uvicorn is serving HTTP",
           r"\bUvicorn running on\b", r"\bApplication startup complete\b"),
)
STAGE_NAMES: tuple[str, ...] = tuple(stage.name for stage in STAGES)
SERVING = STAGES[-1]
# Lines that show a stage finished, for the stages TensorRT-LLM closes with a line of its own: the
# weights are loaded when it prints `Model init total -- 49.14s`. Without NCCL_DEBUG nothing is printed
# while NCCL sets up its communicators, which comes next: a log that stops there is in NCCL's set-up.
FINISHED: dict[str, re.Pattern[str]] = {
    "model": re.compile(r"\bModel init total -- [\d.]+\s*s\b"),
}


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

    @property
    def current(self) -> Stage:
        """The stage the start is in now: the one reached, or the next one once the log shows it finished."""
        position = STAGES.index(self.reached.stage)
        return STAGES[position + 1] if self.finished and position + 1 < len(STAGES) else self.reached.stage


def advance(position: Position | None, lines: list[str]) -> Position | None:
    """The position after more lines of the same log (cleaned, in log order); the log so far is not needed."""
    reached = last_stage_in(lines)
    if reached is not None and (position is None or stage_index(reached.stage.name) >= stage_index(
            position.reached.stage.name)):
        position, after = Position(reached), lines[reached.index + 1:]
    else:
        after = lines
    if position is None or position.finished:
        return position
    done = FINISHED.get(position.reached.stage.name)
    return Position(position.reached, True) if done and any(done.search(line) for line in after) else position


def position(text: str) -> Position | None:
    """Where the start whose log is text is now (None when the log shows no stage yet)."""
    return advance(None, clean_lines(text))


def clean_lines(text: str, max_line: int = 4096) -> list[str]:
    """The log's lines without terminal colour codes or progress-bar rewrites, each cut to max_line."""
    lines = []
    for raw in ANSI_ESCAPE.sub("", text).splitlines():
        shown = raw.rsplit("\r", 1)[-1] if "\r" in raw else raw  # a tqdm bar redrawn with \r: its last state
        lines.append(shown[:max_line])
    return lines


def stage_index(name: str) -> int:
    """The position of a stage name in the start's order (KeyError-free: -1 for an unknown name)."""
    return STAGE_NAMES.index(name) if name in STAGE_NAMES else -1


def last_stage_in(lines: list[str]) -> Reached | None:
    """The furthest stage any of lines shows (stages are ordered; order in the log does not matter)."""
    best: Reached | None = None
    for position in range(len(STAGES) - 1, -1, -1):
        stage = STAGES[position]
        for index in range(len(lines) - 1, -1, -1):
            if stage.pattern.search(lines[index]):
                best = Reached(stage, lines[index].strip(), index)
                break
        if best is not None:
            return best
    return None


def last_stage(text: str) -> Reached | None:
    """The furthest stage of a TensorRT-LLM start the text reached, or None when it shows none."""
    return last_stage_in(clean_lines(text))


def is_serving(text: str) -> bool:
    """Whether the text shows the server up (uvicorn running or its application startup complete)."""
    return any(SERVING.pattern.search(line) for line in clean_lines(text))  # serving is the last stage
