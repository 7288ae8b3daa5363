"""The gate on commands that reach the nodes: setup-network and doctor drive every node of a ring or a switch;
and so do launch, status, logs, stop and bundle (tests/unit/test_cluster_launch.py); the commands not yet
done over more than two nodes (diff, bench, train-draft) still refuse
with one line, exit 2. Nothing is reached: the nodes are on loopback and the SSH key does not exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkpair.cli import main
from sparkpair.cli.app import CLUSTER_COMMANDS

REFUSAL = "nodes: got 3 (ring); expected two for a command that reaches the nodes"


@pytest.mark.parametrize("command", [["setup-network", "--dry-run"], ["doctor", "--only", "links", "--timeout", "5"]])
def test_setup_network_and_doctor_take_a_ring(ring_file: Path, command: list[str],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["-i", str(ring_file), *command])
    out, err = capsys.readouterr()
    assert REFUSAL not in err and "Traceback" not in err
    if command[0] == "doctor":  # every node of the ring is judged, each unreachable here
        assert all(name in out for name in ("spark-a", "spark-b", "spark-c")) and "node unreachable" in out
    else:  # every node is named for the missing key: the three of them were to be reached
        assert code == 1 and all(f"spark-{n}: the SSH key" in err for n in "abc")


@pytest.mark.parametrize("command", [["diff"], ["bench"]])
def test_commands_not_done_over_more_than_two_nodes_refuse_a_ring_with_one_line(
        ring_file: Path, command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-i", str(ring_file), *command]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and REFUSAL in err


def test_the_cluster_commands_are_the_network_doctor_and_the_engines_lifecycle() -> None:
    # launch, status, logs, stop and bundle over N: tests/unit/test_cluster_launch.py
    assert CLUSTER_COMMANDS == {"setup-network", "doctor", "launch", "status", "logs", "stop", "bundle"}
