"""A fix names the knob of the engine that failed (issue 38 item 1, issue 37): a vLLM start that runs out of
memory is told vLLM's gpu_memory_utilization and max_model_len, never TensorRT-LLM's free_gpu_memory_fraction,
and docs/runbooks.md says each engine's. The logs are real: the start lines of the simulated pair's vLLM and
of a TensorRT-LLM start (tests/fixtures/logs/SOURCES.md), and a dual-Spark vLLM's Ray OOM kill."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkpair.engine import diagnose
from sparkpair.runtimes import every_runtime, runtime_named

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "fixtures" / "logs"
RUNBOOK = (ROOT / "docs" / "runbooks.md").read_text()
OOM = (LOGS / "ray_oom_kill_uma__1.log").read_text()


def start_of(name: str, before: str) -> str:
    """A real start's log up to (not including) its first line holding before: it never reached serving."""
    lines = (LOGS / name).read_text().splitlines(keepends=True)
    return "".join(lines[:next(index for index, line in enumerate(lines) if before in line)])


VLLM_START = start_of("vllm_healthy_tp2_eagle3__simpair.log", "Application startup complete")
TRTLLM_START = start_of("healthy__1.log", "Started server process")


def oom_fix(text: str, runtime: str | None = None) -> str:
    found = {item.cause: item for item in diagnose.classify(text, runtime_named(runtime) if runtime else None)}
    assert "memory.oom" in found, list(found)
    return found["memory.oom"].fix


def test_a_vllm_start_out_of_memory_is_told_vllms_own_knobs() -> None:
    fix = oom_fix(VLLM_START + OOM)
    assert "gpu_memory_utilization" in fix and "max_model_len" in fix, fix
    assert "free_gpu_memory_fraction" not in fix and "llm_api" not in fix, fix


def test_a_tensorrt_llm_start_out_of_memory_is_told_tensorrt_llms_knob() -> None:
    fix = oom_fix(TRTLLM_START + OOM)
    assert "kv_cache_config.free_gpu_memory_fraction" in fix and "gpu_memory_utilization" not in fix, fix


def test_the_launched_runtime_names_the_knob_when_the_lines_name_no_engine() -> None:
    assert "gpu_memory_utilization" in oom_fix(OOM, "vllm") and "free_gpu_memory_fraction" not in oom_fix(OOM, "vllm")
    assert "free_gpu_memory_fraction" in oom_fix(OOM, "trtllm")


def test_lines_that_name_no_engine_get_every_engines_knob_each_labelled() -> None:
    fix = oom_fix(OOM)
    assert "TensorRT-LLM: lower kv_cache_config.free_gpu_memory_fraction" in fix
    assert "vLLM: lower gpu_memory_utilization or max_model_len" in fix


@pytest.mark.parametrize("runtime", [runtime.name for runtime in every_runtime()])
def test_the_runbook_section_of_each_cause_names_each_runtimes_own_fix(runtime: str) -> None:
    found = runtime_named(runtime)
    for cause, fix in found.cause_fixes.items():
        anchor = f'<a id="{cause.replace(".", "-")}"></a>'
        section = RUNBOOK[RUNBOOK.index(anchor):]
        section = section[:section.index("<a id=", len(anchor))]
        assert found.title in section, (cause, found.title)
        knob = re.search(r"[a-z_]+(?:\.[a-z_]+)+|[a-z]+_[a-z_]+", fix)  # the first setting the fix names
        assert knob is not None and knob.group() in section, (cause, knob)
