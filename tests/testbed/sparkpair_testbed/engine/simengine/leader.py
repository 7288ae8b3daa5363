"""Rank 0 after start-up agreement: announce, then (once the weights are loaded) serve HTTP and run the executor."""

import json
import os
import signal
import sys
import threading
import time

from . import TRTLLM_VERSION, trtllm_log
from .engine import Engine, EngineDead
from .http_server import ServingApp, SimHTTPServer
from .mpi_world import READY, STOP
from .node_checks import model_config_path
from .stats import EngineStats

READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 2.0
DEATH_GRACE_SECONDS = 0.5


def model_max_seq_len(config, env):
    """``--max_seq_len`` or, as TensorRT-LLM derives it, the model's max_position_embeddings."""
    if config.max_seq_len:
        return config.max_seq_len
    path = model_config_path(config.model, config.revision, env)
    try:
        with open(path) as handle:
            return int(json.load(handle).get("max_position_embeddings") or 0) or None
    except (OSError, TypeError, ValueError):
        return None


def announce(world, config, env, log):
    """What rank 0 prints before it loads: the version, the backend, the MPI session, the draft."""
    print(f"[TensorRT-LLM] TensorRT-LLM version: {TRTLLM_VERSION}", flush=True)
    log.info(f"Using LLM with {'PyTorch' if config.backend == 'pytorch' else config.backend} backend")
    if world.is_mpi:
        address = env.get("TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR", "tcp://127.0.0.1:10012")
        if not env.get("TLLM_SPAWN_PROXY_PROCESS"):
            log.warning("running under MPI without trtllm-llmapi-launch (TLLM_SPAWN_PROXY_PROCESS unset); "
                        "the simulator proceeds as if it had been used")
        log.info(f"Using RemoteMpiCommSessionClient to bind to external MPI processes at {address}")
    log.info(f"Loading model {config.model} with tp_size={config.tp_size}, pp_size={config.pp_size} "
             f"on {world.size} rank(s)")
    spec = config.speculative
    if spec:
        log.info(f"Speculative decoding: {spec.decoding_type}, max_draft_len={spec.max_draft_len}, "
                 f"draft model {spec.draft_model or '(none)'}")


def start_http(config, sock, app):
    """listen() on the reserved socket and serve in a background thread; print uvicorn's lines."""
    server = SimHTTPServer(sock, app)
    server.server_activate()
    pid = os.getpid()
    trtllm_log.uvicorn(f"Started server process [{pid}]")
    trtllm_log.uvicorn("Waiting for application startup.")
    trtllm_log.uvicorn("Application startup complete.")
    trtllm_log.uvicorn(f"Uvicorn running on http://{config.host}:{config.port} (Press CTRL+C to quit)")
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server


def install_stop_handlers(stop_event):
    """SIGTERM/SIGINT end serving gracefully."""
    def request_stop(_signum, _frame):
        stop_event.set()
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)


def shut_down(world, server, log):
    """uvicorn's shutdown lines; tell the workers to stop (they may already be gone)."""
    trtllm_log.uvicorn("Shutting down")
    server.shutdown()
    trtllm_log.uvicorn("Waiting for application shutdown.")
    trtllm_log.uvicorn("Application shutdown complete.")
    trtllm_log.uvicorn(f"Finished server process [{os.getpid()}]")
    if world.is_mpi:
        try:
            world.leader_step(STOP, 0, 0, 0, STOP_TIMEOUT_SECONDS)
        except Exception:
            log.warning("workers did not acknowledge shutdown")
            sys.stdout.flush()
            os._exit(0)


def run_leader(world, config, timing, sock, env, log):
    """Serve until stopped (the weights are loaded) and return the exit status (MPI_Abort if a rank is lost)."""
    world.leader_step(READY, 0, 0, 0, READY_TIMEOUT_SECONDS)
    stats = EngineStats(config)
    engine = Engine(config, timing, world, stats)
    app = ServingApp(config, engine, stats, model_max_seq_len(config, env))
    log.info("get signal from executor worker")
    stop_event = threading.Event()
    install_stop_handlers(stop_event)
    server = start_http(config, sock, app)
    try:
        engine.run(stop_event)
    except EngineDead as death:
        log.error(f"Executor died: {death}. Failing all requests and aborting the MPI job.")
        time.sleep(DEATH_GRACE_SECONDS)
        sys.stdout.flush()
        world.abort(1)
        return 1
    shut_down(world, server, log)
    return 0
