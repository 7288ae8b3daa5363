"""`trtllm-serve`: parse, validate, agree across ranks, then serve (rank 0) or work (others).

Start-up protocol, identical on every rank so that no rank is left waiting:
1. every rank parses the command line (usage errors: exit 2 before MPI starts; only rank 0 prints);
2. rank 0 validates the YAML and binds the port, then broadcasts the configuration or a failure;
3. every rank checks the world size against tp * pp * cp (rank 0 prints the error);
4. every rank checks the model (and draft) on its own node; results are all-gathered;
5. every rank loads its shard of the weights for real (``loading``), the ranks set up NCCL's
   communicator (``nccl``) and warm up;
6. rank 0 serves; ranks > 0 join every engine step until told to stop.
Any rank failing in 2-4 makes all ranks exit 1. Unexpected errors call MPI_Abort.
"""

import os
import socket
import sys
import traceback

from . import TRTLLM_VERSION, trtllm_log
from .allowlist import load_allowlist
from .clickish import parse_or_exit
from .knobs import Timing
from .llm_args import ConfigFileError, backend_errors, load_yaml_file, validate_extra_options
from .loading import load_weights, warm_up
from .mpi_world import STEP, STOP, open_world
from .nccl import init_communicator
from .node_checks import check_node
from .pydantic_errors import ConfigValidationError
from .serve_cli import GROUP_HELP, SERVE_COMMAND, split_subcommand
from .serve_config import build_serve_config

RANK_ENV_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")


class StartupFailure(Exception):
    """Rank 0 could not start; the text has already been printed."""


def launcher_rank(env):
    """This process's rank as the launcher's environment tells it (before MPI starts)."""
    for name in RANK_ENV_VARS:
        if env.get(name, "").isdigit():
            return int(env[name])
    return 0


def parse_command_line(argv, env):
    """Parsed serve options, or an exit status (only rank 0 prints usage errors and help)."""
    quiet = launcher_rank(env) != 0
    sink = open(os.devnull, "w") if quiet else None
    if argv and argv[0] == "--help":
        print(GROUP_HELP, file=sink or sys.stdout)
        return 0
    subcommand, rest = split_subcommand(argv)
    if subcommand != "serve":
        print(f"Error: the simulator implements only 'trtllm-serve serve', not {subcommand!r}.",
              file=sink or sys.stderr)
        return 2
    try:
        return parse_or_exit(SERVE_COMMAND, rest, stdout=sink, stderr=sink)
    except SystemExit as stop:
        return stop.code


def bind_server_socket(host, port):
    """Reserve the port before loading, as trtllm-serve's launch_server does (listen comes later)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise StartupFailure(f"RuntimeError: Failed to bind socket to {host}:{port}: {error}")
    return sock


def prepare_leader(cli, env, log):
    """Rank 0: timing knobs, YAML validation, merged config, bound socket."""
    try:
        timing = Timing.from_env(env)
        yaml_dict = {}
        if cli["extra_llm_api_options"]:
            yaml_dict = load_yaml_file(cli["extra_llm_api_options"])
            validate_extra_options(yaml_dict, load_allowlist(env))
            backend_errors(yaml_dict, yaml_dict.get("backend", cli["backend"]))
        config = build_serve_config(cli, yaml_dict)
    except ConfigFileError as error:
        raise StartupFailure(str(error))
    except ConfigValidationError as error:
        raise StartupFailure(error.render())
    except ValueError as error:
        raise StartupFailure(f"ValueError: {error}")
    for warning in config.warnings:
        log.warning(warning)
    return config, timing, bind_server_socket(config.host, config.port)


def world_size_error(world_size, config):
    """The message for a world that does not match the parallel layout."""
    return (f"RuntimeError: MPI world size is {world_size}, but tp_size * pp_size * cp_size = "
            f"{config.tp_size} * {config.pp_size} * {config.cp_size} = {config.world_size_needed}; "
            f"start exactly {config.world_size_needed} rank(s), one per GPU (e.g. mpirun -np "
            f"{config.world_size_needed} ... trtllm-llmapi-launch trtllm-serve ...).")


def agree_on_config(world, cli, env, log):
    """Steps 2-3: returns (config, timing, socket) on rank 0, (config, timing, None) elsewhere; or None."""
    leader = None
    if world.rank == 0:
        try:
            leader = prepare_leader(cli, env, log)
        except StartupFailure as failure:
            trtllm_log.fatal(str(failure))
    shared = world.bcast_object(leader[:2] if leader else None)
    if shared is None:
        return None
    config, timing = shared
    if world.size != config.world_size_needed:
        if world.rank == 0:
            trtllm_log.fatal(world_size_error(world.size, config))
        return None
    return config, timing, (leader[2] if leader else None)


def check_every_node(world, config, env, log):
    """Step 4: True when every rank found its model files."""
    host = socket.gethostname()
    problems = check_node(config, world.rank, host, env)
    for problem in problems:
        print(problem, file=sys.stderr, flush=True)
    everyone = world.allgather_object((host, problems))
    failed = [(rank, host) for rank, (host, found) in enumerate(everyone) if found]
    if failed and world.rank == 0:
        where = ", ".join(f"rank {rank} on {host}" for rank, host in failed)
        log.error(f"{len(failed)} of {world.size} rank(s) failed their startup checks ({where}); "
                  "aborting before serving.")
    return not failed


def run_worker(world, config, log):
    """Ranks > 0: take part in every engine step until rank 0 says stop."""
    log.info(f"rank {world.rank} on {socket.gethostname()} holds its shard of {config.model} "
             f"(tp_size={config.tp_size}); waiting for executor steps")
    while True:
        command, step = world.worker_receive()
        if command == STEP:
            world.worker_step(step)
        elif command == STOP:
            return 0


def run_rank(world, cli, env):
    """Steps 2-5 on this rank; returns the exit status."""
    log = trtllm_log.TrtLogger(cli["log_level"], world.rank)
    agreed = agree_on_config(world, cli, env, log)
    if agreed is None:
        return 1
    config, timing, sock = agreed
    if not check_every_node(world, config, env, log):
        return 1
    if world.rank == 0:
        from .leader import announce

        announce(world, config, env, log)
    else:
        print(f"[TensorRT-LLM] TensorRT-LLM version: {TRTLLM_VERSION}", flush=True)
    weights = load_weights(config, world.rank, world.size, timing, env, log)
    init_communicator(world, env)
    from .leader import model_max_seq_len

    warm_up(config, model_max_seq_len(config, env), log)
    if world.rank != 0:
        status = run_worker(world, config, log)
    else:
        from .leader import run_leader

        status = run_leader(world, config, timing, sock, env, log)
    del weights  # this rank's shard stays resident while it serves
    return status


def main(argv=None, env=None):
    """Entry point of the `trtllm-serve` executable."""
    argv = sys.argv[1:] if argv is None else argv
    env = os.environ if env is None else env
    cli = parse_command_line(argv, env)
    if not isinstance(cli, dict):
        return cli
    world = open_world(env)
    try:
        return run_rank(world, cli, env)
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        world.abort(1)
        return 1
