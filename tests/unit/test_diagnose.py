"""The log classifier over real logs (tests/fixtures/logs, sources in SOURCES.md) and over anything else.

Every real log classifies to its listed cause first; healthy logs and benign noise give no finding;
random text, random bytes, huge lines and mutated real logs never make it raise.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import trtllm_stages as stages  # engine.stages, TensorRT-LLM's start at module level
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkpair.engine import diagnose
from sparkpair.engine.signatures import CAUSE_IDS, CAUSES, every_signature

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
SOURCES = (LOGS / "SOURCES.md").read_text()
LISTED = dict(re.findall(r"^\| (\S+\.log) \| `([^`]+)` \|", SOURCES, re.MULTILINE))
FAILING = sorted(name for name, cause in LISTED.items() if cause != "none")
HEALTHY = sorted(name for name, cause in LISTED.items() if cause == "none")
SERVING_MARKER = stages.SERVING.pattern


def text_of(name: str) -> str:
    return (LOGS / name).read_text()


def first_cause(text: str) -> str | None:
    found = diagnose.classify(text)
    return found[0].cause if found else None


def test_every_fixture_is_listed_with_its_source() -> None:
    assert sorted(LISTED) == sorted(p.name for p in LOGS.glob("*.log"))
    assert all(cause == "none" or cause in CAUSE_IDS for cause in LISTED.values())


def test_every_cause_has_real_samples() -> None:
    """Each cause id is shown by at least one real log (startup.stalled by two hangs)."""
    assert set(LISTED.values()) - {"none"} == set(CAUSE_IDS)


@pytest.mark.parametrize("name", FAILING)
def test_each_real_failure_log_classifies_to_its_cause_first(name: str) -> None:
    found = diagnose.classify(text_of(name))
    assert found and found[0].cause == LISTED[name], [f.cause for f in found]
    top = found[0]
    assert top.evidence and top.fix and top.runbook == f"docs/runbooks.md#{top.cause.replace('.', '-')}"
    assert all(line.strip() and "\n" not in line for line in top.evidence)


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_logs_and_benign_noise_give_no_finding(name: str) -> None:
    assert diagnose.classify(text_of(name)) == []


def test_benign_noise_alone_or_together_is_no_failure() -> None:
    noise = "\n".join([
        "[1766201752.188005] [spark-9de3:137  :0]     ucp_context.c:2339 UCX  WARN  UCP API version is incompatible: "
        "required >= 1.20, actual 1.19.1 (loaded from /usr/local/ucx//lib/libucp.so.0)",
        "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:63: FutureWarning: The pynvml package is "
        "deprecated. Please install nvidia-ml-py instead.",
        text_of("nvrm_no_memory__1.log").strip(),
        "[12/20/2025-03:36:04] [TRT-LLM] [W] Worker process 137 is affined to run on the following CPUs: [2] "
        "(subset of all logical CPUs). This may harm performance if set incorrectly.",
    ])
    assert diagnose.classify(noise) == []


def test_a_start_that_reached_serving_ignores_warnings_that_only_explain_failures() -> None:
    warning = text_of("ucx_bad_net_device__1.log")
    assert first_cause(warning) == "fabric.interface"
    assert diagnose.classify(warning + text_of("healthy__2.log")) == []


def test_a_bind_failure_after_application_startup_complete_is_still_a_failure() -> None:
    assert first_cause(text_of("port_in_use__1.log")) == "port.busy"


def test_a_decisive_line_outranks_a_generic_one() -> None:
    """NCCL's generic "unhandled system error" follows any socket failure: it joins the interface fault found."""
    text = "RuntimeError: NCCL error: unhandled system error\n" + text_of("nccl_ifname_missing__1.log")
    found = diagnose.classify(text)
    assert [f.cause for f in found] == ["fabric.interface"]
    assert "RuntimeError: NCCL error: unhandled system error" in found[0].evidence


def test_a_consequence_joins_the_cause_it_follows_and_stands_alone_otherwise() -> None:
    found = diagnose.classify(text_of("mpi_orted_not_found__1.log"))
    assert [f.cause for f in found] == ["mpi.remote-env"]
    assert any("ORTE was unable" in line for line in found[0].evidence)
    alone = "ORTE was unable to reliably start one or more daemons."
    assert first_cause(alone) == "mpi.ssh"


def test_the_line_names_what_it_is_about() -> None:
    assert "enp1s0f1np1" in diagnose.classify(text_of("gloo_ifname_wrong_port__1.log"))[0].summary
    assert "enable_attention_dp" in diagnose.classify(text_of("trtllm_llmargs_unexpected_keyword__trtllm2846.log"))[0].summary


def test_a_pydantic_error_shows_the_field_above_it() -> None:
    text = ("pydantic_core._pydantic_core.ValidationError: 1 validation error for TorchLlmArgs\n"
            "kv_cache_config.free_gpu_memory_fractionx\n"
            "  Extra inputs are not permitted [type=extra_forbidden, input_value=0.9, input_type=float]\n")
    found = diagnose.classify(text)
    assert found[0].cause == "config.invalid"
    assert "kv_cache_config.free_gpu_memory_fractionx" in found[0].evidence


# --- stages -------------------------------------------------------------------------------------

def test_stage_names_are_in_start_order() -> None:
    assert stages.STAGE_NAMES == ("launcher", "mpi", "model", "nccl", "warmup", "executor", "serving")


@pytest.mark.parametrize("name, stage", [
    ("hang_trtllm_mgmn_startup__1.log", "launcher"),
    ("hang_trtllm_tp_mpisession__trtllm9680.log", "mpi"),
    ("healthy__1.log", "serving"),
    ("healthy__2.log", "serving"),
    ("nccl_ib_bad_hca__1.log", "nccl"),
])
def test_last_stage_reached(name: str, stage: str) -> None:
    reached = stages.last_stage(text_of(name))
    assert reached is not None and reached.stage.name == stage


def test_a_log_that_simply_ends_is_no_stall_and_says_where_it_ends() -> None:
    """No timestamps (the launcher banner) or no time passing by them (one second): no finding, not a stall."""
    for name, stage, elapsed in (("hang_trtllm_mgmn_startup__1.log", "launcher", None),
                                 ("hang_trtllm_tp_mpisession__trtllm9680.log", "mpi", 0.0)):
        result = diagnose.examine(text_of(name))
        assert result.findings == [] and not result.serving
        assert result.ended is not None and result.ended.stage == stage and result.ended.elapsed_s == elapsed


def test_a_start_the_launch_watch_stopped_is_a_stall_by_the_watchs_clock() -> None:
    """The same real hang with the launch watch's seconds: startup.stalled, naming where it stopped (launch's
    failure said nothing of the stall once a log without timestamps stopped being one by itself)."""
    text = text_of("hang_trtllm_mgmn_startup__1.log")
    found = diagnose.classify(text, watched_s=95.0)
    assert [item.cause for item in found] == ["startup.stalled"]
    assert "the launch watch saw 95 s without progress" in found[0].summary and "it stopped in '" in found[0].summary
    assert diagnose.classify(text) == []


def test_coloured_launcher_output_and_progress_bars_are_read_as_plain_lines() -> None:
    text = ("\x1b[33mmpi_rank: 0\x1b[0m\n\x1b[33mrun mgmn leader node with mpi_world_size: 2 ...\x1b[0m\n"
            "Loading safetensors checkpoint shards:   0% Completed\rLoading safetensors checkpoint shards:  40% Completed\n")
    reached = stages.last_stage(text)
    assert reached is not None and reached.stage.name == "model" and "\r" not in reached.line
    assert "\x1b" not in stages.clean_lines(text)[0]


def test_text_without_any_stage_or_failure_gives_nothing() -> None:
    assert stages.last_stage("hello\nworld") is None
    assert diagnose.classify("hello\nworld") == [] and diagnose.classify("") == []


def test_the_catalog_is_consistent() -> None:
    assert len(CAUSE_IDS) == len(set(CAUSE_IDS)) == 32
    assert {s.cause for s in every_signature()} | {"startup.stalled"} == set(CAUSE_IDS)
    assert all(explained in CAUSE_IDS for s in every_signature() for explained in s.explains)
    assert all(cause.summary and cause.fix for cause in CAUSES)


# --- nothing makes it raise -------------------------------------------------------------------

REAL_LINES = [line for name in sorted(LISTED) for line in text_of(name).splitlines()]
NOISE = [line for line in text_of("healthy__1.log").splitlines() if not SERVING_MARKER.search(line)]


def assert_sane(found: list[diagnose.Diagnosis]) -> None:
    assert all(item.cause in CAUSE_IDS for item in found)
    assert len({item.cause for item in found}) == len(found)
    for item in found:
        assert all("\n" not in line and len(line) <= diagnose.MAX_SHOWN + 3 for line in item.evidence)
        assert item.as_dict()["cause"] == item.cause


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_random_text_never_raises(text: str) -> None:
    assert_sane(diagnose.classify(text))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=4096))
def test_random_bytes_decoded_never_raise(data: bytes) -> None:
    assert_sane(diagnose.classify(data.decode("utf-8", "replace")))
    assert_sane(diagnose.classify(data.decode("latin-1")))


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(REAL_LINES + ["x", "\x1b[31m", "\r"]), st.integers(1000, 400_000))
def test_huge_lines_never_raise(line: str, repeat: int) -> None:
    text = (line * (repeat // max(len(line), 1) + 1))[:repeat]
    assert_sane(diagnose.classify(text + "\n" + text))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(LISTED)), st.randoms(use_true_random=False), st.integers(0, 30))
def test_mutated_real_logs_never_raise(name: str, rnd: random.Random, edits: int) -> None:
    lines = text_of(name).splitlines()
    for _ in range(edits):
        action = rnd.randrange(5)
        where = rnd.randrange(len(lines) + 1)
        if action == 0 and lines:
            lines.pop(min(where, len(lines) - 1))
        elif action == 1:
            lines.insert(where, rnd.choice(REAL_LINES))
        elif action == 2 and lines:
            victim = min(where, len(lines) - 1)
            cut = rnd.randrange(len(lines[victim]) + 1)
            lines[victim] = lines[victim][:cut] + chr(rnd.randrange(0x10FFFF)) + lines[victim][cut:]
        elif action == 3:
            rnd.shuffle(lines)
        else:
            lines = lines + lines
    assert_sane(diagnose.classify("\n".join(lines)))


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(FAILING), st.lists(st.sampled_from(NOISE), max_size=40), st.randoms(use_true_random=False))
def test_benign_noise_mixed_into_a_real_failure_keeps_its_cause_first(name: str, noise: list[str],
                                                                       rnd: random.Random) -> None:
    lines = text_of(name).splitlines()
    for line in noise:
        lines.insert(rnd.randrange(len(lines) + 1), line)
    assert first_cause("\n".join(lines)) == LISTED[name]
