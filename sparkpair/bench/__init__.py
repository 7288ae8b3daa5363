"""sparkpair bench: what speculative decoding buys on this pair, measured against the running server.

Check the server serves the profile -> for each engine configuration (as launched, each other
--draft-len, the no-draft baseline), relaunch if needed, then per concurrency level: warm-up
requests, then measured streaming requests while the engine's iteration stats are collected ->
relaunch the profile as the operator had it -> results.json, results.csv, plots, summary.md and
a table. docs/bench.md explains every figure.

Holds the flow here (`run_bench`), `client` (timed streaming requests; the engine's counters),
`stats`, `configs` (the engine configurations compared), `prompts`, `record` (results.json,
results.csv, summary.md) and `plots`. Never prints: `report` shows its result. May import: only the
layers below its own in pyproject.toml's `[tool.importlinter]` (`engine` and everything below it).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sparkpair import __version__
from sparkpair.bench import plots as benchplots
from sparkpair.bench import record as benchrecord
from sparkpair.bench.client import CounterStats, Endpoint, IterationStats, run_streams, served_models
from sparkpair.bench.configs import EngineConfig, launched_draft_len, plan_configs
from sparkpair.bench.prompts import PromptSet, load_prompts
from sparkpair.bench.stats import (
    LevelStats,
    acceptance_from_iterations,
    summarize_level,
)
from sparkpair.engine import credentials, fabric
from sparkpair.engine.launch import LaunchOptions, config_changes, launch
from sparkpair.engine.state import LaunchState, read_state
from sparkpair.errors import Interrupted, SparkpairError, UsageError
from sparkpair.inventory import Inventory, json_data
from sparkpair.progress import Event, Progress
from sparkpair.runtimes import Metrics, runtime_named, runtime_of
from sparkpair.transport import Pair

RELAUNCH_TIMEOUT_S = 1800.0
TEMPERATURE = 0.0  # benchclient sends greedy requests: acceptance depends on sampling, greedy repeats


@dataclass(frozen=True)
class BenchOptions:
    """What `sparkpair bench` was asked to do (cli.py builds it from the command line)."""

    profile: str
    concurrency: list[int]
    requests: int
    max_tokens: int
    prompts: Path | None
    compare_baseline: bool
    draft_lengths: list[int]
    out_dir: Path
    as_json: bool
    inventory_path: Path | None = None  # recorded in results.json when given


@dataclass(frozen=True)
class Serving:
    """The engine bench measures: its launch state, rank nodes and endpoint."""

    state: LaunchState
    nodes: list[str]
    endpoint: Endpoint


@dataclass(frozen=True)
class BenchResult:
    """What bench measured: the whole record (rows, provenance, settings) and the failed requests."""

    record: dict[str, Any]
    rows: list[benchrecord.Row]
    errors: list[str]


def serving(pair: Pair, inventory: Inventory, profile_name: str) -> Serving:
    """The engine that serves profile_name now; SparkpairError (run `sparkpair launch` first) when none does."""
    fix = f"run `sparkpair launch {profile_name}` first (`sparkpair status` shows what runs)"
    state = read_state(pair.head)
    if state is None or not state.running:
        raise SparkpairError("the server is not serving: nothing was launched, or it was stopped", hint=fix)
    nodes = state.nodes or [inventory.head.name]
    target = inventory.for_runtime(state.runtime).profile(profile_name).target
    runtime = runtime_named(state.runtime)
    bearer = credentials.launched_headers(inventory, runtime, profile_name).get("Authorization", "")
    endpoint = Endpoint(inventory.node(nodes[0]).host, inventory.server.port, target, runtime.api, bearer)
    if state.profile != profile_name:
        raise SparkpairError(f"the server runs profile {state.profile}, not {profile_name}", hint=fix)
    models = served_models(endpoint)
    if models is None:
        raise SparkpairError(f"the server is not serving: nothing answers at {endpoint.url}"
                             f"{endpoint.api.models(target).removeprefix(endpoint.api.base)}", hint=fix)
    if endpoint.model not in models:
        raise SparkpairError(f"the server at {endpoint.url} serves {', '.join(models) or 'nothing'}, "
                             f"not {endpoint.model}", hint=fix)
    return Serving(state, nodes, endpoint)


def _relaunch(pair: Pair, config: EngineConfig, nodes: list[str], progress: Progress) -> None:
    """Launch config (containers and cached models reused); launch's own progress goes to stderr."""
    single = None if config.inventory.profile(config.profile).is_pair else nodes[0]
    options = LaunchOptions(profile=config.profile, runtime=config.inventory.runtime, timeout=RELAUNCH_TIMEOUT_S,
                            model_source="cached", node=single)
    progress(Event("bench", f"relaunching as {config.label} (profile {config.profile})"))
    result = launch(pair, config.inventory, options, lambda event: progress(_demoted(event)))
    if not result.ok:
        why = result.failure.detail if result.failure else (
            f"{len(result.preflight)} launch-critical check(s) FAIL" if result.preflight else "see the lines above")
        raise SparkpairError(f"relaunching {config.profile} ({config.label}) failed: {why}")


def _demoted(event: Event) -> Event:
    """A relaunch's own output lines are progress of the benchmark, not its results."""
    return replace(event, level="info") if event.level == "result" else event


def _measure_level(endpoint: Endpoint, prompts: PromptSet, config: EngineConfig, level: int,
                   options: BenchOptions, progress: Progress) -> tuple[LevelStats, list[str]]:
    """One warm-up request per stream (excluded), then the measured requests; (stats, error messages)."""
    warmup = list(reversed(prompts.messages))
    description, total = f"{config.label}, {level} stream(s)", level + options.requests
    done = [0]
    lock = threading.Lock()

    def advance(_: object) -> None:
        with lock:
            done[0] += 1
            progress(Event("bench", description, key=f"bench {description}", done=done[0], total=total,
                           unit="requests"))

    run_streams(endpoint, warmup, level, level, options.max_tokens, advance)
    runtime = runtime_of(config.inventory.profile(config.profile))
    names = runtime.metrics
    if names.drafts and (names.drafted and names.accepted or names.accept_length and names.accept_rate):
        # acceptance from the engine's Prometheus counters (vLLM), or its gauges over the verifies counted (SGLang)
        counters = CounterStats(replace(endpoint, port=runtime.metrics_port(config.inventory)), names.path,
                                (names.drafted, names.accepted, names.drafts), (names.accept_length, names.accept_rate))
        with counters:
            timings, wall_s = run_streams(endpoint, prompts.messages, options.requests, level, options.max_tokens,
                                          advance)
        acceptance = counters.acceptance
    elif names.iterations:  # per-iteration JSON statistics (TensorRT-LLM's /metrics)
        with IterationStats(endpoint, names.iterations) as iterations:
            timings, wall_s = run_streams(endpoint, prompts.messages, options.requests, level, options.max_tokens,
                                          advance)
        acceptance = acceptance_from_iterations(iterations.items)
    else:  # the engine publishes no draft statistics bench can read
        timings, wall_s = run_streams(endpoint, prompts.messages, options.requests, level, options.max_tokens, advance)
        acceptance = None
    stats = summarize_level(level, timings, wall_s, acceptance)
    return stats, [t.error for t in timings if not t.ok]


def no_draft_statistics(metrics: Metrics) -> str:
    """The warning when a configuration with a draft measured no acceptance: where bench looked, what the engine
    needs before it publishes draft statistics."""
    return f"the server reported no draft statistics on {metrics.path}; acceptance needs {metrics.needs}"


def _measure_config(endpoint: Endpoint, prompts: PromptSet, config: EngineConfig,
                    options: BenchOptions, progress: Progress) -> tuple[list[benchrecord.Row], list[str]]:
    rows, errors = [], []
    for level in options.concurrency:
        stats, failed = _measure_level(endpoint, prompts, config, level, options, progress)
        rows.append(benchrecord.level_row(config.label, config.profile, config.max_draft_len, stats))
        errors += failed
        progress(Event("", benchrecord.level_line(rows[-1])))
        if config.max_draft_len is not None and stats.acceptance is None and stats.errors < stats.requests:
            progress(Event("", no_draft_statistics(runtime_of(config.inventory.profile(config.profile)).metrics),
                           "warning"))
    return rows, errors


def _measure_all(pair: Pair, configs: list[EngineConfig], found: Serving, prompts: PromptSet,
                 options: BenchOptions, progress: Progress) -> tuple[list[benchrecord.Row], list[str]]:
    """Every configuration in turn; when any needed a relaunch, relaunch the first (the operator's) last."""
    rows: list[benchrecord.Row] = []
    errors: list[str] = []
    relaunched = False
    try:
        for config in configs:
            if config.relaunch:
                relaunched = True
                _relaunch(pair, config, found.nodes, progress)
            measured, failed = _measure_config(found.endpoint, prompts, config, options, progress)
            rows, errors = rows + measured, errors + failed
    except (KeyboardInterrupt, Interrupted):  # launch() reports Ctrl-C as Interrupted: no restore, just say how
        if relaunched:
            progress(Event("", f"interrupted: a bench variant may be running; `sparkpair launch {options.profile}` "
                           "restores the profile", "warning"))
        raise
    except Exception:
        if relaunched:
            _restore(pair, configs[0], found.nodes, progress, raise_on_failure=False)
        raise
    if relaunched:
        _restore(pair, configs[0], found.nodes, progress)
    return rows, errors


def _restore(pair: Pair, original: EngineConfig, nodes: list[str], progress: Progress,
             raise_on_failure: bool = True) -> None:
    progress(Event("bench", f"restoring {original.profile} as the operator launched it"))
    try:
        _relaunch(pair, EngineConfig("the launched profile", original.profile, original.inventory,
                                     original.max_draft_len, relaunch=True), nodes, progress)
    except Interrupted:
        raise
    except SparkpairError:
        if raise_on_failure:
            raise SparkpairError(f"could not restore {original.profile} after the benchmark",
                                 hint=f"sparkpair launch {original.profile}") from None
        progress(Event("", f"could not restore {original.profile}; run `sparkpair launch {original.profile}`", "error"))


def _warn_if_drifted(pair: Pair, inventory: Inventory, profile_name: str, nodes: list[str], progress: Progress) -> None:
    files = fabric.node_files(inventory, inventory.profile(profile_name), fabric.gather_fabrics(pair, inventory, nodes))
    if config_changes(pair, files, nodes):
        progress(Event("", f"the running engine's config differs from what the inventory renders for {profile_name}: "
                           "the results describe what runs (`sparkpair launch --dry-run` shows the difference)",
                       "warning"))


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def provenance(inventory: Inventory, options: BenchOptions, found: Serving) -> dict[str, Any]:
    """What ran: inventory (path, digests), profile, image and its ID, model revisions, endpoint."""
    profile = inventory.profile(options.profile)
    resolved = {"inventory": json_data(inventory), "profiles": json_data(inventory.profiles)}
    path = options.inventory_path
    file_sha = hashlib.sha256(path.read_bytes()).hexdigest() if path and path.is_file() else None
    return {"inventory": {"path": str(path) if path else None, "sha256": _digest(resolved), "file_sha256": file_sha},
            "profile": options.profile, "target": profile.target, "draft": profile.draft,
            "max_draft_len": launched_draft_len(profile), "runtime": profile.runtime, "image": inventory.container.image,
            "image_id": found.state.image_id, "revisions": found.state.revisions,
            "endpoint": found.endpoint.url, "nodes": found.nodes, "transport": found.state.transport,
            "fabric": fabric_facts(found.state)}


def fabric_facts(state: LaunchState) -> dict[str, Any]:
    """The fabric the measured engine ran on: each node's NCCL_IB_HCA and GID index as launched, and what
    `launch --check-fabric` measured (NCCL's transport and devices per node, the bus bandwidth), when it ran."""
    recorded = state.fabric or {}
    proof = recorded.get("proof") or {}
    return {"nodes": recorded.get("nodes", {}), "transport": proof.get("transport"), "devices": proof.get("devices"),
            "bus_bandwidth_gbs": proof.get("bus_bandwidth_gbs"),
            "measured": "launch --check-fabric" if proof else "not measured (sparkpair launch --check-fabric does)"}


def _settings(options: BenchOptions, prompts: PromptSet) -> dict[str, Any]:
    return {"concurrency": options.concurrency, "requests": options.requests, "max_tokens": options.max_tokens,
            "warmup": "1 warm-up request per stream (excluded)", "temperature": TEMPERATURE,
            "prompts": {"source": prompts.source, "count": len(prompts.messages), "sha256": prompts.sha256}}


def _when(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat(timespec="seconds")


def check_out_dir(out_dir: Path) -> None:
    """Create out_dir and write a scratch file there, so a bad --out stops bench before it measures."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as error:
        raise UsageError(f"--out {out_dir}: cannot write there ({error.strerror or error})",
                         hint="pass --out a directory you can write to") from None


def write_outputs(record: dict[str, Any], out_dir: Path) -> list[Path]:
    """results.json, results.csv, the plots and summary.md under out_dir; the paths written.
    SparkpairError when writing fails (disk full, permissions): the results were shown already."""
    title = (f"{record['provenance']['profile']} ({record['provenance']['target']}), "
             f"max_tokens {record['settings']['max_tokens']}, {record['settings']['requests']} requests per point")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        plots = benchplots.write_plots(record["rows"], out_dir, title)
        return [benchrecord.write_json(record, out_dir / "results.json"),
                benchrecord.write_csv(record["rows"], out_dir / "results.csv"), *plots,
                benchrecord.write_summary(record, plots, out_dir / "summary.md")]
    except OSError as error:
        raise SparkpairError(f"could not write {error.filename or out_dir}: {error.strerror or error}; the results "
                             "above were measured but not saved", hint="free space or fix permissions under --out, "
                             "or pass another --out, and rerun") from None


def plan_bench(pair: Pair, inventory: Inventory, options: BenchOptions) -> list[EngineConfig]:
    """`bench --dry-run`: what run_bench would measure, in order, and which configurations relaunch the engine
    (asked of the running server's launch state); relaunches, measures and writes nothing."""
    found = serving(pair, inventory, options.profile)
    inventory = inventory.for_runtime(found.state.runtime)
    return plan_configs(inventory, options.profile, options.draft_lengths, options.compare_baseline)


def run_bench(pair: Pair, inventory: Inventory, options: BenchOptions, progress: Progress) -> BenchResult:
    """The whole benchmark against the running server (relaunching variants when asked); the results,
    not yet written (`write_outputs`), so that a failed write loses nothing measured."""
    benchplots.ensure_matplotlib()
    prompts = load_prompts(options.prompts)
    found = serving(pair, inventory, options.profile)
    inventory = inventory.for_runtime(found.state.runtime)  # the profile as it runs: on the launched runtime
    configs = plan_configs(inventory, options.profile, options.draft_lengths, options.compare_baseline)
    check_out_dir(options.out_dir)
    _warn_if_drifted(pair, inventory, options.profile, found.nodes, progress)
    started = time.time()
    rows, errors = _measure_all(pair, configs, found, prompts, options, progress)
    benchrecord.add_speedups(rows)
    finished = time.time()
    record = {"sparkpair_version": __version__, "started": _when(started), "finished": _when(finished),
              "duration_s": round(finished - started, 1), "provenance": provenance(inventory, options, found),
              "settings": _settings(options, prompts), "configs": [c.as_dict() for c in configs], "rows": rows,
              "errors": sorted(set(errors))[:20]}
    return BenchResult(record, rows, errors)
