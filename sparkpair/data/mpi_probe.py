"""`sparkpair doctor --deep`: the program every MPI rank runs inside the engine container.

Shipped as package data and run with the container's python3 (`python3 -c`), never imported by
sparkpair. Rank 0 prints one line per finished stage, `SPARKPAIR-DEEP <stage> <json>`, flushed
at once, so a job cut off by the timeout still shows how far it got. The HF token is never
printed: each rank reports only the sha256 of the file HF_TOKEN_PATH names.
"""

import hashlib
import json
import os
import socket
import sys
from array import array

MARK = "SPARKPAIR-DEEP"
VECTOR_INTS = 1 << 20            # 4 MiB allreduce: thousands of full-MTU frames each way
LATENCY_ROUNDS = 200             # 8-byte ping-pongs
BANDWIDTH_BYTES = 8 << 20        # message size of the streaming test
BANDWIDTH_MESSAGES = 24


def emit(stage, value):
    print(MARK, stage, json.dumps(value, sort_keys=True), flush=True)


def token_digest():
    """What this rank sees of the HF token: whether HF_TOKEN_PATH is set, and the file's sha256."""
    path = os.environ.get("HF_TOKEN_PATH", "")
    if not path:
        return {"env": False}
    try:
        with open(path, "rb") as handle:
            data = handle.read().strip()
    except OSError as error:
        return {"env": True, "path": path, "error": error.strerror or type(error).__name__}
    return {"env": True, "path": path, "sha256": hashlib.sha256(data).hexdigest() if data else None}


def allreduce(comm):
    """A scalar and a 4 MiB vector allreduce; the expected sum is known on every rank."""
    size, rank = comm.Get_size(), comm.Get_rank()
    expected = size * (size + 1) // 2
    total = comm.allreduce(rank + 1)
    received = array("i", [0]) * VECTOR_INTS
    comm.Allreduce(array("i", [rank + 1]) * VECTOR_INTS, received)
    return {"sum": total, "expected": expected, "ints": VECTOR_INTS,
            "wrong": VECTOR_INTS - received.count(expected)}


def latency_us(comm, mpi):
    """Half the mean round trip of an 8-byte ping-pong between ranks 0 and 1, in microseconds."""
    rank, buffer = comm.Get_rank(), bytearray(8)
    comm.Barrier()
    start = mpi.Wtime()
    for _ in range(LATENCY_ROUNDS):
        if rank == 0:
            comm.Send([buffer, mpi.BYTE], dest=1)
            comm.Recv([buffer, mpi.BYTE], source=1)
        elif rank == 1:
            comm.Recv([buffer, mpi.BYTE], source=0)
            comm.Send([buffer, mpi.BYTE], dest=0)
    return (mpi.Wtime() - start) / LATENCY_ROUNDS / 2 * 1e6


def bandwidth_mbs(comm, mpi):
    """Rank 0 streams messages to rank 1, which acknowledges the last; MB/s (10^6 bytes per second)."""
    rank, buffer, ack = comm.Get_rank(), bytearray(BANDWIDTH_BYTES), bytearray(1)
    for messages in (2, BANDWIDTH_MESSAGES):  # the first round warms up the connections
        comm.Barrier()
        start = mpi.Wtime()
        for _ in range(messages):
            if rank == 0:
                comm.Send([buffer, mpi.BYTE], dest=1)
            elif rank == 1:
                comm.Recv([buffer, mpi.BYTE], source=0)
        if rank == 0:
            comm.Recv([ack, mpi.BYTE], source=1)
        elif rank == 1:
            comm.Send([ack, mpi.BYTE], dest=0)
        seconds = mpi.Wtime() - start
    return BANDWIDTH_BYTES * BANDWIDTH_MESSAGES / seconds / 1e6


def main():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    ranks = comm.gather({"rank": rank, "host": socket.gethostname(), "token": token_digest()}, root=0)
    if rank == 0:
        emit("hosts", [{"rank": r["rank"], "host": r["host"]} for r in ranks])
        emit("token", [{"rank": r["rank"], "host": r["host"], **r["token"]} for r in ranks])
    result = allreduce(comm)
    if rank == 0:
        emit("allreduce", result)
    if comm.Get_size() >= 2:
        latency = latency_us(comm, MPI)
        bandwidth = bandwidth_mbs(comm, MPI)
        if rank == 0:
            emit("bandwidth", {"latency_us": round(latency, 1), "bandwidth_mbs": round(bandwidth, 1),
                               "message_bytes": BANDWIDTH_BYTES, "messages": BANDWIDTH_MESSAGES})
    comm.Barrier()
    if rank == 0:
        emit("done", {"ranks": comm.Get_size()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
