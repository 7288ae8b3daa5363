"""The ranks of one trtllm-serve job and the collectives that tie them together.

Under mpirun (``OMPI_COMM_WORLD_SIZE`` set) this wraps mpi4py's COMM_WORLD; otherwise a
one-rank stand-in is used and MPI is never initialised. Generation steps use
non-blocking collectives polled with short sleeps, so idle ranks do not spin a CPU and
rank 0 can give up on a peer that stopped answering (``CollectiveTimeout``).
"""

import os
import time
from array import array

STEP, READY, STOP = 1, 2, 3
LEADER_POLL_SECONDS = 0.0002
WORKER_FAST_POLL_SECONDS = 0.0002
WORKER_IDLE_POLL_SECONDS = 0.001
WORKER_FAST_WINDOW_SECONDS = 0.2
MPI_ENV_MARKERS = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE")


class CollectiveTimeout(RuntimeError):
    """A peer did not join a collective in time: it is dead or hung."""


def under_mpi(env=None):
    """True when this process was started by an MPI launcher."""
    env = os.environ if env is None else env
    return any(marker in env for marker in MPI_ENV_MARKERS)


class LocalWorld:
    """A single rank without MPI (``--tp_size 1`` started directly)."""

    rank = 0
    size = 1
    is_mpi = False

    def bcast_object(self, obj):
        """Broadcast from rank 0 (identity here)."""
        return obj

    def allgather_object(self, obj):
        """Gather one object from every rank."""
        return [obj]

    def leader_step(self, command, step, batch, draft_len, timeout):
        """Rank 0's side of one engine step (nothing to synchronise with)."""

    def abort(self, code):
        """End the job at once."""
        os._exit(code)


class MpiWorld:
    """COMM_WORLD through mpi4py."""

    is_mpi = True

    def __init__(self):
        from mpi4py import MPI  # initialises MPI

        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    def bcast_object(self, obj):
        """Broadcast a picklable object from rank 0 (startup only; blocking)."""
        return self.comm.bcast(obj, root=0)

    def allgather_object(self, obj):
        """Every rank's object, in rank order (startup only; blocking)."""
        return self.comm.allgather(obj)

    def _wait(self, request, deadline, poll_seconds):
        while not request.Test():
            if deadline is not None and time.monotonic() > deadline:
                raise CollectiveTimeout("a rank did not join the collective in time")
            time.sleep(poll_seconds)

    def _allreduce_step(self, step, deadline, poll_seconds):
        """Every rank contributes (1, step*(rank+1)); the sums prove that all of them took part."""
        contribution = array("d", [1.0, float(step * (self.rank + 1))])
        total = array("d", [0.0, 0.0])
        request = self.comm.Iallreduce(contribution, total, op=self.MPI.SUM)
        self._wait(request, deadline, poll_seconds)
        expected = (float(self.size), float(step * self.size * (self.size + 1) // 2))
        if (total[0], total[1]) != expected:
            raise RuntimeError(f"allreduce mismatch at step {step}: got {tuple(total)}, expected {expected}")

    def leader_step(self, command, step, batch, draft_len, timeout):
        """Rank 0: broadcast the step, then (for STEP) allreduce with every rank, within ``timeout``."""
        deadline = time.monotonic() + timeout
        message = array("q", [command, step, batch, draft_len])
        self._wait(self.comm.Ibcast(message, root=0), deadline, LEADER_POLL_SECONDS)
        if command == STEP:
            self._allreduce_step(step, deadline, LEADER_POLL_SECONDS)

    def worker_receive(self):
        """Ranks > 0: wait (without spinning) for rank 0's next command; returns (command, step)."""
        message = array("q", [0, 0, 0, 0])
        request = self.comm.Ibcast(message, root=0)
        started = time.monotonic()
        while not request.Test():
            idle = time.monotonic() - started > WORKER_FAST_WINDOW_SECONDS
            time.sleep(WORKER_IDLE_POLL_SECONDS if idle else WORKER_FAST_POLL_SECONDS)
        return message[0], message[1]

    def worker_step(self, step):
        """Ranks > 0: this rank's part of one generation step."""
        self._allreduce_step(step, None, WORKER_FAST_POLL_SECONDS)

    def abort(self, code):
        """MPI_Abort: mpirun tears the whole job down."""
        self.comm.Abort(code)


def open_world(env=None):
    """The world this process belongs to."""
    return MpiWorld() if under_mpi(env) else LocalWorld()
