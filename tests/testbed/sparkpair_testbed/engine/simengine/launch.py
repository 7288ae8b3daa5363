"""`trtllm-llmapi-launch CMD ...`: set TensorRT-LLM's launch environment and run CMD on every rank.

The real script decides the rank (``SLURM_PROCID`` wins over ``OMPI_COMM_WORLD_RANK``),
logs ``mpi_rank: N`` to stderr, exports ``TLLM_SPAWN_PROXY_PROCESS=1`` with an IPC address
and HMAC key, then runs the command on rank 0 and an MPI worker elsewhere. The simulator
runs the same command on every rank (its trtllm-serve plays both roles), keeping the MPI
environment intact so the ranks can join one communicator.
"""

import os
import secrets
import socket
import sys

YELLOW, RESET = "\033[33m", "\033[0m"
FIRST_IPC_PORT = 10012


def detect_rank(env):
    """SLURM_PROCID, else OMPI_COMM_WORLD_RANK, else PMI_RANK, else PMI_ID, else 0."""
    for name in ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMI_ID"):
        if env.get(name):
            return int(env[name])
    return 0


def detect_world_size(env):
    """SLURM_NTASKS, else OMPI_COMM_WORLD_SIZE, else WORLD_SIZE, else 1."""
    for name in ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"):
        if env.get(name):
            return int(env[name])
    return 1


def free_ipc_port(start=FIRST_IPC_PORT):
    """The first port from ``start`` that can be bound on 127.0.0.1."""
    for port in range(start, start + 1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    return start


def launch_environment(env):
    """The variables the launcher exports to the command."""
    updated = dict(env)
    updated["TLLM_SPAWN_PROXY_PROCESS"] = "1"
    updated["tllm_mpi_size"] = str(detect_world_size(env))
    updated["TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR"] = f"tcp://127.0.0.1:{free_ipc_port()}"
    updated["TLLM_SPAWN_PROXY_PROCESS_IPC_HMAC_KEY"] = secrets.token_hex(32)
    return updated


def main(argv=None, env=None):
    """Entry point of the `trtllm-llmapi-launch` executable."""
    argv = sys.argv[1:] if argv is None else argv
    env = dict(os.environ if env is None else env)
    if not argv:
        print("usage: trtllm-llmapi-launch COMMAND [ARGS...]", file=sys.stderr)
        return 2
    rank = detect_rank(env)
    print(f"{YELLOW}mpi_rank: {rank}{RESET}", file=sys.stderr, flush=True)
    role = "leader" if rank == 0 else "worker"
    print(f"{YELLOW}run mgmn {role} node with mpi_world_size: {detect_world_size(env)} ...{RESET}",
          file=sys.stderr, flush=True)
    try:
        os.execvpe(argv[0], argv, launch_environment(env))
    except OSError as error:
        print(f"trtllm-llmapi-launch: {argv[0]}: {error.strerror}", file=sys.stderr)
        return 127
