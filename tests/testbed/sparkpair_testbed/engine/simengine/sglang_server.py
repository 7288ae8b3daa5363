"""`run_server` of the stand-in SGLang: what `python3 -m sglang.launch_server` does after SGLang's
own `prepare_server_args` parsed and checked the command line (the image keeps the wheel's
launch_server.py and swaps only its run_server for this one: simengine/sglang_launch.py).

Every node runs one scheduler rank (a DGX Spark has one GPU, so `--tp` times `--pp-size` must equal
`--nnodes`). The stages, each printing SGLang's lines (sglang_log.py):
server_args; the model and draft on this node (their config.json in the HF cache); the rendezvous,
NCCL, PyNccl's warm-up, the MessageQueue (sglang_world.py, with its traps); the weights read for
real over SIM_LOAD_SECONDS (the target split across the ranks, the draft whole); the KV pool;
then node rank 0 serves HTTP (sglang_http.py) and runs simengine's executor, every step a round
trip to every rank, while the other ranks answer steps. Timing and acceptance: simengine's knobs
(SIM_*; README.md), the draft length being `--speculative-num-steps`.
"""

import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass

from . import hub_layout, loading, nccl, sglang_log
from .engine import Engine, EngineDead
from .knobs import Timing
from .leader import install_stop_handlers
from .mpi_world import STEP, STOP
from .sglang_world import SglangWorld, gloo_problem, nccl_settings, warmup_freezes

SGLANG_NCCL_VERSION = "2.28.9"          # what the stand-in's NCCL reports (simengine.nccl)
GB10_AVAILABLE_GB = 119.6               # a GB10's MemTotal (the testbed's meminfo), what SGLang sees free
KV_TOKENS = 65536
DEFAULT_RUNNING = 256
HANG_POLL_SECONDS = 60.0
EAGLE3_DEFAULTS = (3, 1, 4)             # _auto_choose_speculative_params for most architectures (steps, topk, tokens)


class StartFailure(Exception):
    """A start-up failure: the lines were printed, the process exits 1."""


@dataclass
class Speculative:
    """A draft as simengine's executor needs it."""

    decoding_type: str
    draft_model: str
    max_draft_len: int
    topk: int
    num_draft_tokens: int
    max_concurrency: int = None


@dataclass
class SimConfig:
    """The few settings the stand-in acts on, taken from SGLang's own ServerArgs."""

    model: str
    revision: str
    served_model_name: str
    host: str
    port: int
    tp_size: int
    pp_size: int
    nnodes: int
    node_rank: int
    dist_init_addr: str
    enable_metrics: bool
    context_length: int
    speculative: Speculative = None
    max_batch_size: int = DEFAULT_RUNNING
    max_num_tokens: int = 16384
    kv_tokens_per_block: int = 1
    kv_max_tokens: int = KV_TOKENS
    enable_iter_perf_stats: bool = False
    iter_stats_max_iterations: int = 0
    return_perf_metrics: bool = False
    perf_metrics_max_requests: int = 0

    @classmethod
    def from_server_args(cls, args):
        spec = None
        if args.speculative_algorithm:
            steps, topk, tokens = EAGLE3_DEFAULTS
            steps = args.speculative_num_steps or steps
            topk = args.speculative_eagle_topk or topk
            tokens = args.speculative_num_draft_tokens or (steps + 1 if topk == 1 else tokens)
            spec = Speculative(args.speculative_algorithm, args.speculative_draft_model_path, steps, topk, tokens)
        return cls(model=args.model_path, revision=args.revision, served_model_name=args.served_model_name
                   or args.model_path, host=args.host, port=args.port, tp_size=args.tp_size, pp_size=args.pp_size,
                   nnodes=args.nnodes, node_rank=args.node_rank, dist_init_addr=args.dist_init_addr,
                   enable_metrics=bool(args.enable_metrics), context_length=args.context_length, speculative=spec,
                   max_batch_size=args.max_running_requests or DEFAULT_RUNNING)


def fail(message):
    """Print a failure the way SGLang's launcher ends (an exception's last line) and stop."""
    print(message, file=sys.stderr, flush=True)
    raise StartFailure(message)


def model_config(name, revision, env):
    """config.json of NAME (hub id in the HF cache, or a directory) on this node, or None."""
    if hub_layout.looks_like_local_path(name):
        path = os.path.join(os.path.expanduser(name), "config.json")
    else:
        found, _missing = hub_layout.find_cached_file(hub_layout.hub_cache_dir(env), name, "config.json",
                                                      revision or "main")
        path = str(found) if found else ""
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def check_models(config, env):
    """(target config, draft config) from this node's HF cache; a missing one fails the start.
    HAND-MADE wording after transformers' offline error: no public SGLang log of it was found."""
    target = model_config(config.model, config.revision, env)
    if target is None:
        fail(f"OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find "
             f"them in the cached files. Check your internet connection or see how to run the library in "
             f"offline mode at 'https://huggingface.co/docs/transformers/installation#offline-mode'. "
             f"(model {config.model} on {socket.gethostname()})")
    draft = None
    if config.speculative:
        if not config.speculative.draft_model:
            fail("ValueError: --speculative-draft-model-path is required for speculative decoding "
                 f"(--speculative-algorithm {config.speculative.decoding_type})")
        draft = model_config(config.speculative.draft_model, None, env)
        if draft is None:
            fail(f"OSError: {config.speculative.draft_model} is not a local folder and is not a valid model "
                 f"identifier listed on 'https://huggingface.co/models' (draft on {socket.gethostname()})")
    return target, draft


def ranks_of(config):
    """(this node's rank, world size): one scheduler rank per Spark."""
    size = config.tp_size * config.pp_size
    if size != config.nnodes:
        fail(f"RuntimeError: tp_size * pp_size = {size} ranks over {config.nnodes} node(s): a DGX Spark has one "
             "GPU, so every node runs exactly one rank (HAND-MADE: the stand-in's own limit)")
    return config.node_rank, size


def hang_forever():
    """What a rank stuck in a collective does: nothing, without a CPU, until it is killed."""
    while True:
        time.sleep(HANG_POLL_SECONDS)


def init_distributed(config, rank, size, env):
    """Rendezvous, NCCL with its warm-up, the MessageQueue; returns the world (None on one node)."""
    if size == 1:
        return None
    if not config.dist_init_addr:
        fail("ValueError: --dist-init-addr is required when --nnodes > 1 (HAND-MADE wording)")
    host, _, port = config.dist_init_addr.rpartition(":")
    sglang_log.world_line(rank, size, f"tcp://{config.dist_init_addr}")
    sglang_log.init_dist_begin(rank)
    problem = gloo_problem(env)
    if problem:
        fail(problem)
    world = SglangWorld.rendezvous(rank, size, host.strip("[]"), int(port))
    nccl.init_communicator(world, env)
    sglang_log.nccl_version(rank, SGLANG_NCCL_VERSION)
    if warmup_freezes(nccl_settings(env)):
        hang_forever()
    world.barrier()
    sglang_log.spans_nodes(rank)
    world.open_message_queue(env)
    sglang_log.init_dist_end(rank, 0.77)
    return world


def load_weights(config, target, draft, rank, size, timing, env):
    """Read the target (this rank's share kept) and the draft (kept whole) for real; SGLang's lines."""
    jobs = [(config.model, config.revision, target, True)]
    if config.speculative:
        jobs.append((config.speculative.draft_model, None, draft, False))
    kept = []
    for name, revision, model, split in jobs:
        files = loading.model_files(name, revision, env)
        sglang_log.load_begin(rank, GB10_AVAILABLE_GB)
        sglang_log.weights_format(rank)
        started = time.monotonic()
        seconds = max(0.0, timing.load_seconds) * loading.slowdown_factor() * (1.0 if split else 0.25)
        sglang_log.shards_bar(0, len(files), 0.0)
        for index, path in enumerate(files, 1):
            with open(path, "rb") as handle:
                data = handle.read()
            kept.append(data[rank::size] if split else data)
            loading._pace(started, seconds * index / max(1, len(files)))  # noqa: SLF001 (simengine's pacing)
            sglang_log.shards_bar(index, len(files), time.monotonic() - started)
        used = sum(len(part) for part in kept) / 1e9
        arch = (model.get("architectures") or ["?"])[0]
        sglang_log.load_end(rank, time.monotonic() - started, arch, GB10_AVAILABLE_GB - used, used)
    return kept


def serve_worker(world):
    """Ranks > 0: answer every step until rank 0 stops (or the connection ends with it)."""
    while True:
        try:
            command, step = world.worker_receive()
        except (ConnectionError, OSError, ValueError):
            return 0
        if command == STEP:
            world.worker_step(step)
        elif command == STOP:
            return 0


class LocalWorld:
    """One rank: nothing to synchronise with."""

    rank, size, is_mpi = 0, 1, False

    def leader_step(self, command, step, batch, draft_len, timeout):
        """Nothing to tell anyone."""


def serve_leader(config, server_args, world, timing, target, env):
    """Node rank 0: HTTP, the warm-up request, then the executor until SIGTERM."""
    from .sglang_http import SglangApp, SglangStats, start_http

    stats = SglangStats(config, target)
    engine = Engine(config, timing, world or LocalWorld(), stats)
    stats.engine = engine
    app = SglangApp(config, server_args, engine, stats, target)
    stop_event = threading.Event()
    install_stop_handlers(stop_event)
    server = start_http(config, app)
    threading.Thread(target=app.warm_up, name="warmup", daemon=True).start()
    try:
        engine.run(stop_event)
    except EngineDead as death:
        sglang_log.main(f"Scheduler hit an exception: {death} (HAND-MADE wording)")
        return 1
    server.shutdown()
    if world is not None:
        try:
            world.leader_step(STOP, 0, 0, 0, 2.0)
        except Exception:  # noqa: BLE001 (workers may be gone already)
            pass
    return 0


def run_server(server_args, env=None):
    """The stand-in's start and serving loop on this node; returns the exit status."""
    env = os.environ if env is None else env
    config = SimConfig.from_server_args(server_args)
    try:
        timing = Timing.from_env(env)
        sglang_log.server_args_line(server_args)
        rank, size = ranks_of(config)
        target, draft = check_models(config, env)
        world = init_distributed(config, rank, size, env)
        weights = load_weights(config, target, draft, rank, size, timing, env)
        context = config.context_length or int(target.get("max_position_embeddings") or 32768)
        sglang_log.kv_pool(rank, KV_TOKENS, 0.5, GB10_AVAILABLE_GB * 0.1)
        sglang_log.limits(rank, KV_TOKENS, config.max_batch_size, context, GB10_AVAILABLE_GB * 0.1)
        config.context_length = context
    except StartFailure:
        return 1
    status = serve_worker(world) if rank else serve_leader(config, server_args, world, timing, target, env)
    del weights  # this rank's weights stay resident while it serves
    return status
