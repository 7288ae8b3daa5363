"""The launch watchdog's judge (engine.watch), the stage position it follows (engine.stages.advance) and
the rank probes' parsers (probes.ranks), on real TensorRT-LLM output and on captured stand-in output."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trtllm_stages as stages  # engine.stages, TensorRT-LLM's start at module level

from sparkpair.engine import watch
from sparkpair.probes import ranks
from sparkpair.probes.models import RepoManifest
from sparkpair.runtimes import RUNTIME_NAMES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "watch"
REAL_START = (FIXTURES / "trtllm-1.1.0rc3-spark-gpt-oss-120b.log").read_text()
MIB = 1 << 20


def _rank(node: str = "spark-b", rank: int | None = 1, expected: int = 4 * MIB) -> watch.RankWatch:
    return watch.RankWatch(node, rank, (f"/var/log/sparkpair/ranks/1/rank.{rank}/stderr",), expected, 0.0)


def _chunk(text: str, already: int = 0, rank: int = 1) -> dict[str, ranks.OutputChunk]:
    return {f"/var/log/sparkpair/ranks/1/rank.{rank}/stderr": ranks.OutputChunk(already + len(text.encode()), text)}


def _process(cpu: float = 0.0, rss: int = 40 * MIB, reads: int = 0, state: str = "S") -> ranks.RankProcess:
    return ranks.RankProcess(7, state, cpu, rss, {"/sparkpair/hf/hub/models--x/blobs/ab": reads} if reads else {})


# --- --stall-after ----------------------------------------------------------------------------------

def test_stall_after_sets_every_stage_or_some() -> None:
    assert watch.parse_stall_after("600") == dict.fromkeys(watch.DEFAULT_LIMITS, 600.0)
    assert watch.parse_stall_after("nccl=60, warmup=3600") == {"nccl": 60.0, "warmup": 3600.0}
    both = watch.parse_stall_after("300,warmup=3600")
    assert both["warmup"] == 3600.0 and both["nccl"] == 300.0 and set(both) == set(watch.DEFAULT_LIMITS)


@pytest.mark.parametrize("text,message", [
    ("nccl=soon", "'soon' is not a number of seconds"),
    ("gpu=60", "no stage 'gpu'; stages: start, launcher, mpi, model, nccl, warmup, executor, serving"),
    ("0", "between 1 and 86400"), ("nan", "between 1 and 86400"), ("warmup=1e9", "between 1 and 86400"),
])
def test_stall_after_refuses_what_it_cannot_use(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        watch.parse_stall_after(text)


def _every_stage() -> list[stages.Stage]:
    return [stage for name in RUNTIME_NAMES for stage in (watch.STARTING, *stages.of_runtime(name).stages)]


def test_the_runbook_names_every_stage_of_every_runtime_with_its_default_limit() -> None:
    runbook = (Path(__file__).resolve().parents[2] / "docs" / "runbooks.md").read_text()
    for stage in _every_stage():
        assert f"| `{stage.name}` | {stage.label} | " in runbook and f"| {stage.limit_s:.0f} s | " in runbook, stage
    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| [^|]+ \| (\d+) s \| (yes|no) \|$", runbook, re.MULTILINE)
    assert {name: (float(limit), cpu == "yes") for name, limit, cpu in rows} == {
        stage.name: (stage.limit_s, stage.alone) for stage in _every_stage()}


def test_default_limits_cover_every_stage_and_autotune_waits_longest() -> None:
    assert set(watch.DEFAULT_LIMITS) == {stage.name for stage in _every_stage()}
    assert all(watch.DEFAULT_LIMITS[stage.name] == stage.limit_s for stage in _every_stage())  # one limit a name
    trtllm = {stage.name: stage.limit_s for stage in stages.TRTLLM.stages}
    assert trtllm["warmup"] == trtllm["executor"] == max(trtllm.values())
    assert trtllm["nccl"] == min(trtllm.values())


# --- where a rank is -----------------------------------------------------------------------------

def test_a_real_start_followed_chunk_by_chunk_passes_every_stage_in_order() -> None:
    lines = stages.clean_lines(REAL_START)
    seen, where = [], None
    for start in range(0, len(lines), 5):
        where = stages.advance(where, lines[start:start + 5])
        if where is not None and (not seen or seen[-1] != where.current.name):
            seen.append(where.current.name)
    # TensorRT-LLM allocates a first KV cache (the executor's line) before it autotunes, so a real log goes
    # from NCCL's set-up to the executor stage and stays there through autotune and CUDA graphs
    assert seen == ["launcher", "mpi", "model", "nccl", "executor", "serving"]
    assert where is not None and stages.position(REAL_START).current == where.current


def test_after_model_init_total_the_start_is_in_nccl_init_until_a_later_stage_shows() -> None:
    loaded = REAL_START.split("Model init total -- 49.14s")[0] + "Model init total -- 49.14s\n"
    where = stages.position(loaded)
    assert where is not None and where.reached.stage.name == "model" and where.finished
    assert where.current.name == "nccl"
    assert stages.position(loaded.replace("Model init total -- 49.14s", "")).current.name == "model"


def test_the_hang_log_stays_in_the_launcher_stage() -> None:
    hang = (Path("/work/shared/reference/realworld/logs/hang_trtllm_mgmn_startup__1.log"))
    text = hang.read_text() if hang.exists() else "mpi_rank: 0\ntllm_mpi_size: 2\nRank0 run mgmn leader node"
    where = stages.position(text)
    assert where is not None and where.current.name == "launcher" and not where.finished


# --- progress signals --------------------------------------------------------------------------

def test_output_memory_and_reads_are_progress_and_the_stage_follows_the_output() -> None:
    rank = _rank()
    rank.observe(_chunk("mpi_rank: 1\n"), [_process()], 0, 10.0)
    assert rank.stage.name == "launcher" and rank.moved == "output" and rank.last_progress == 10.0
    rank.observe({}, [_process(rss=40 * MIB + 1000)], 0, 20.0)  # a few KB is noise
    assert rank.last_progress == 10.0
    rank.observe({}, [_process(rss=42 * MIB)], 0, 30.0)
    assert rank.moved == "memory" and rank.last_progress == 30.0
    text = "Loading weights:  25%|██▌       | 102/402 [00:00<00:01, 201.30it/s]\rLoading weights:  50%"
    rank.observe(_chunk(text), [_process(rss=42 * MIB, reads=3000)], 0, 40.0)
    assert rank.stage.name == "model" and rank.moved == "output, model reads"
    assert rank.floor == 42 * MIB and rank.loaded == 0
    rank.observe({}, [_process(rss=45 * MIB, reads=5000)], 2 * MIB, 50.0)
    assert rank.loaded == 5 * MIB and rank.model_read == 5000


def test_cpu_counts_where_a_rank_works_alone_not_where_ranks_wait_on_each_other() -> None:
    rank = _rank()
    rank.observe(_chunk("Loading weights: 100%|██████████| 402/402\nModel init total -- 2.00s\n"), [_process(cpu=1)],
                 0, 0.0)
    assert rank.stage.name == "nccl"
    rank.observe({}, [_process(cpu=50.0)], 0, 100.0)  # a spinning wait in NCCL's bootstrap
    assert rank.last_progress == 0.0
    rank.observe(_chunk("[TRT-LLM] [RANK 1] [I] [Autotuner] Autotuning process starts ...\n", 200), [_process(cpu=50)],
                 0, 110.0)
    rank.observe({}, [_process(cpu=90.0)], 0, 700.0)
    assert rank.stage.name == "warmup" and rank.moved == "CPU" and rank.last_progress == 700.0


def test_a_restarted_output_file_is_read_from_the_top() -> None:
    rank = _rank()
    rank.observe(_chunk("x" * 100 + "\n"), None, 0, 1.0)
    path = rank.files[0]
    assert rank.offsets[path] == 101
    rank.observe({path: ranks.OutputChunk(12, "mpi_rank: 1\n")}, None, 0, 2.0)
    assert rank.offsets[path] == 12 and rank.stage.name == "launcher"


# --- the stall --------------------------------------------------------------------------------------

def _in_nccl(node: str, rank: int, last_progress: float) -> watch.RankWatch:
    watched = _rank(node, rank)
    watched.observe(_chunk("Loading weights: 100%\nModel init total -- 2.00s\n", rank=rank), [_process()], 0,
                    last_progress)
    return watched


def test_both_ranks_silent_in_nccl_init_past_the_limit_is_a_stall_naming_both() -> None:
    pair = [_in_nccl("spark-a", 0, 10.0), _in_nccl("spark-b", 1, 12.0)]
    assert watch.stalled(pair, watch.DEFAULT_LIMITS, 100.0) is None
    stall = watch.stalled(pair, watch.DEFAULT_LIMITS, 103.0)
    assert stall is not None and stall.label == "NCCL init" and stall.limit == 90
    detail = stall.detail()
    assert detail.startswith("no progress for 93 s in NCCL init (NCCL is setting up the communicators")
    assert "on spark-a (rank 0) and spark-b (rank 1)" in detail and "stall limit for NCCL init: 90 s" in detail
    assert "CPU time does not count while ranks wait on each other" in detail


def test_a_rank_waiting_for_a_peer_that_still_loads_is_not_stalled() -> None:
    waiting = _in_nccl("spark-a", 0, 0.0)
    loading = _rank("spark-a", 1)
    loading.observe(_chunk("Loading weights:  45%|████▌     | 180/402"), [_process()], 0, 500.0)
    assert loading.stage.name == "model"
    assert watch.stalled([waiting, loading], watch.DEFAULT_LIMITS, 590.0) is None
    stall = watch.stalled([waiting, loading], watch.DEFAULT_LIMITS, 1101.0)
    assert stall is not None and stall.label == "model load" and stall.where.endswith("spark-a (rank 1)")


def test_the_stall_limit_can_be_changed_per_stage() -> None:
    pair = [_in_nccl("spark-a", 0, 0.0), _in_nccl("spark-b", 1, 0.0)]
    limits = {**watch.DEFAULT_LIMITS, **watch.parse_stall_after("nccl=30")}
    assert watch.stalled(pair, limits, 31.0) is not None and watch.stalled(pair, watch.DEFAULT_LIMITS, 31.0) is None


def test_the_live_line_shows_stage_memory_against_expected_reads_and_silence() -> None:
    rank = _rank()
    assert watch.describe(rank, watch.DEFAULT_LIMITS, 0.0) == "rank 1 start: no rank process yet"
    rank.observe(_chunk("Loading weights:   0%|"), [_process(rss=10 * MIB)], 0, 0.0)
    rank.observe({}, [_process(rss=12 * MIB, reads=3 * MIB)], 0, 1.0)
    assert watch.describe(rank, watch.DEFAULT_LIMITS, 1.0) == (
        "rank 1 model load: 2.0 MiB of 4.0 MiB loaded (50 %), 3.0 MiB read from the model files, CPU 0 s")
    assert watch.describe(rank, watch.DEFAULT_LIMITS, 60.0).endswith(", nothing moved for 59 s (limit 600 s)")


def test_what_a_rank_holds_once_loaded_is_its_share_of_the_target_and_the_whole_draft() -> None:
    target = RepoManifest("r", {"a" * 64: 600, "b" * 64: 400, "c" * 64: 10},
                          {"model-1.safetensors": "a" * 64, "model-2.safetensors": "b" * 64, "config.json": "c" * 64})
    draft = RepoManifest("d", {"d" * 64: 50}, {"model.safetensors": "d" * 64})
    assert watch.weight_bytes(target) == 1000
    assert watch.expected_bytes(target, draft, 2) == 550 and watch.expected_bytes(target, None, 1) == 1000


# --- the probes' parsers -------------------------------------------------------------------------

def test_rank_processes_parse_what_the_stand_in_container_answered() -> None:
    found = ranks.parse_processes((FIXTURES / "standin-rank-processes.json").read_text())
    assert len(found) == 1 and found[0].state == "S" and not found[0].stopped
    assert found[0].rss == 38670336 and found[0].cpu_s == 0.34 and found[0].files == {}
    assert ranks.parse_processes("[]") == [] and ranks.RankProcess(1, "T", 0, 0).stopped


def test_rank_output_sections_give_each_files_size_and_new_bytes() -> None:
    found = ranks.parse_output((FIXTURES / "standin-rank-output.txt").read_text())
    stderr = found["/var/log/sparkpair/ranks/1/rank.1/stderr"]
    assert stderr.size == 1861 and "[RANK 1] [I] Use 0.01 GB for model weights." in stderr.data
    assert found["/var/log/sparkpair/nothing"] == ranks.OutputChunk(-1, "")
    assert stages.position(stderr.data).current.name == "model"


def test_compute_apps_give_each_pids_gpu_memory() -> None:
    used = ranks.parse_compute_apps((FIXTURES / "nvidia-smi-compute-apps.csv").read_text())
    assert used == {1427169: 2892 * MIB, 1427385: 3472 * MIB, 2594254: 4020 * MIB}
    assert ranks.parse_compute_apps("") == {}


def test_the_process_probe_asks_inside_the_container_and_never_returns_command_lines() -> None:
    probe = ranks.processes("trtllm-multinode", "/sparkpair/hf")
    assert probe.command.text.startswith("docker exec trtllm-multinode python3 -c ")
    assert '"args"' not in ranks.PROCESS_SCRIPT and "cmdline" in ranks.PROCESS_SCRIPT


# --- a rank that only repeats itself -----------------------------------------------------------------

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def test_a_worker_retrying_an_unreachable_master_forever_is_no_progress_and_the_start_stalls() -> None:
    """The real vLLM worker whose --master-addr has no host prints a TCPStore retry every ~3 s for 30 minutes
    (tests/fixtures/logs/vllm_master_unreachable__simpair.log); the head waits silently. Before, every retry
    counted as progress, so launch waited until its --timeout instead of the stage's stall limit."""
    lines = (LOGS / "vllm_master_unreachable__simpair.log").read_text().splitlines(keepends=True)
    first = next(index for index, line in enumerate(lines) if "failed to connect" in line)
    starts = [index for index in range(first, len(lines)) if "TCP client failed to connect/validate" in lines[index]]
    retry_blocks = ["".join(lines[begin:end]) for begin, end in zip(starts, [*starts[1:], len(lines)], strict=True)]
    blocks = ["".join(lines[first:starts[0]])] + retry_blocks * 3  # one block per retry, ~90 s of them
    worker = watch.RankWatch("spark-b", 1, ("/var/log/sparkpair/ranks/1/rank.1/stderr",), 0, 0.0,
                             start=stages.of_runtime("vllm"))
    head = watch.RankWatch("spark-a", 0, ("/var/log/sparkpair/ranks/1/rank.0/stderr",), 0, 0.0,
                           start=stages.of_runtime("vllm"))
    sent = 0
    now = 0.0
    for text in blocks:
        sent += len(text.encode())
        now += 3.0
        worker.observe({"/var/log/sparkpair/ranks/1/rank.1/stderr": ranks.OutputChunk(sent, text)}, None, 0, now)
    assert len(blocks) > 6
    assert worker.last_progress <= 4 * 3.0  # the first retries are news; the rest repeat them
    limits = {name: 30.0 for name in watch.DEFAULT_LIMITS}
    assert watch.stalled([head, worker], limits, now) is not None


def test_lines_that_differ_only_in_their_numbers_share_a_shape_and_words_do_not() -> None:
    retry = "[W1125 22:27:05.481112310 TCPStore.cpp:340] [c10d] TCP client failed to connect - retrying (try=0,"
    again = "[W1125 22:27:08.912000000 TCPStore.cpp:340] [c10d] TCP client failed to connect - retrying (try=1,"
    assert watch.line_shape(retry) == watch.line_shape(again)
    assert watch.line_shape("Loading weights took 3.1 s") != watch.line_shape("Model loading took 3.1 s")


def test_a_new_line_is_progress_even_after_many_repeats() -> None:
    rank = _rank()
    for second in range(1, 10):
        rank.observe(_chunk(f"retrying (try={second})\n", 20 * second), None, 0, float(second))
    assert rank.last_progress == 3.0
    rank.observe(_chunk("Loading weights:  45%|████▌     | 180/402\n", 300), None, 0, 20.0)
    assert rank.last_progress == 20.0
