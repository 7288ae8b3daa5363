"""The pair lock on the simulated pair's head: two runs that judged one stale lock at once, each over its
own SSH connection, take it over at the same moment; exactly one holds the pair, the other is refused
naming it (the compare-and-delete runs under flock on the real node)."""

from __future__ import annotations

import json
import subprocess
import threading

import pytest
from test_setup_network import _connection

from sparkpair.errors import SparkpairError
from sparkpair.transport import CommandResult, NodeConnection, lock

LOCK = "/home/nvidia/.sparkpair/lock"
WAIT_S = 30.0


class Gated:
    """A connection to the head whose second command (the takeover) waits at a barrier shared by both runs."""

    def __init__(self, connection: NodeConnection, barrier: threading.Barrier) -> None:
        self.connection, self.barrier, self.commands = connection, barrier, 0
        self.name, self.home = connection.name, connection.home

    def run(self, command: object, **options: object) -> CommandResult:
        self.commands += 1
        if self.commands == 2:
            self.barrier.wait()
        return self.connection.run(command, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("round_", range(3))
def test_two_runs_taking_over_one_stale_lock_at_once_exactly_one_wins(testbed, round_: int) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = {**lock.holder("launch qwen3-235b"), "user": "op", "pid": gone.pid, "started": "1"}
    testbed.exec("spark-a", ["sh", "-c", 'mkdir -p "$(dirname "$1")" && printf %s "$2" > "$1"', "-", LOCK,
                             json.dumps(stale)], user="nvidia")
    barrier = threading.Barrier(2, timeout=WAIT_S)
    connections = [_connection(testbed, "spark-a") for _ in range(2)]
    held: list[str] = []
    refused: list[str] = []
    both_tried = threading.Barrier(2, timeout=WAIT_S)

    def attempt(connection: NodeConnection) -> None:
        try:
            with lock.held(Gated(connection, barrier), "stop"):  # type: ignore[arg-type]
                held.append(testbed.exec("spark-a", f"cat {LOCK}").stdout)
                both_tried.wait()  # hold the pair until the other run has tried
        except SparkpairError as error:
            refused.append(error.message)
            both_tried.wait()

    threads = [threading.Thread(target=attempt, args=(c,), daemon=True) for c in connections]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT_S * 2)
            assert not thread.is_alive(), "a run hung"
    finally:
        for connection in connections:
            connection.close()
    assert len(held) == 1, f"{len(held)} runs held the pair at once: {held}"
    assert len(refused) == 1 and refused[0].startswith("another sparkpair run holds the pair: "), refused
    winner = json.loads(held[0])
    assert winner["machine"] == lock.machine_id() and winner["command"] == "stop"
    assert testbed.exec("spark-a", f"ls -A {LOCK.rsplit('/', 1)[0]} | grep '^lock' || true").stdout == ""
