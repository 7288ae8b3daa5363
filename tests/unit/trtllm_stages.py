"""engine.stages as the watch's and diagnose's older tests read it: the module itself, with TensorRT-LLM's start
under the module-level names it had before each runtime answered for its own stages (issue 37). The tests
that use them are about TensorRT-LLM's start (real TensorRT-LLM logs, the stand-in's output)."""

from __future__ import annotations

from sparkpair.engine.stages import (
    ANSI_ESCAPE,
    Position,
    Reached,
    Stage,
    StartStages,
    clean_lines,
    is_serving,
    last_stage,
    of_runtime,
    of_text,
    runtime_of_text,
)

TRTLLM = of_runtime("trtllm")
STAGES = TRTLLM.stages
STAGE_NAMES = TRTLLM.names
SERVING = TRTLLM.serving
FINISHED = TRTLLM.finished

__all__ = ["ANSI_ESCAPE", "FINISHED", "SERVING", "STAGES", "STAGE_NAMES", "TRTLLM", "Position", "Reached", "Stage",
           "StartStages", "advance", "clean_lines", "is_serving", "last_stage", "of_runtime", "of_text", "position",
           "runtime_of_text"]


def advance(position: Position | None, lines: list[str]) -> Position | None:
    """TensorRT-LLM's StartStages.advance."""
    return TRTLLM.advance(position, lines)


def position(text: str) -> Position | None:
    """Where the TensorRT-LLM start whose log is text is now (None when the log shows no stage yet)."""
    return TRTLLM.advance(None, clean_lines(text))
