"""An action that fails on both nodes says both: `PairResult.raise_failures` keeps every node's error
(`PairError`), and a caller that catches the class both errors share still catches it."""

from __future__ import annotations

import pytest
from fakenode import FakeNode, ProbeRound, fake_pair, is_probe_round

from sparkpair import probes
from sparkpair.errors import (
    ConnectError,
    ConnectionLost,
    Interrupted,
    PairError,
    RemoteCommandError,
    SparkpairError,
    UsageError,
)
from sparkpair.probes import host
from sparkpair.transport import PairResult


def test_two_unreachable_nodes_are_one_connect_error_naming_both() -> None:
    errors = {"spark-a": ConnectError("no answer from nvidia@198.18.0.11:22 (timed out)", node="spark-a",
                                      hint="is the node up?"),
              "spark-b": ConnectionLost("connection lost while running `true`", node="spark-b")}
    with pytest.raises(ConnectError) as raised:
        PairResult({}, errors).raise_failures()
    error = raised.value
    assert isinstance(error, PairError) and not isinstance(error, ConnectionLost)
    assert error.errors == errors and error.exit_code == 1
    assert error.lines() == ["spark-a: no answer from nvidia@198.18.0.11:22 (timed out) (fix: is the node up?)",
                             "spark-b: connection lost while running `true`"]


def test_a_lone_failure_is_raised_as_it_was() -> None:
    alone = RemoteCommandError("spark-b", "docker ps", 1, "permission denied")
    with pytest.raises(RemoteCommandError) as raised:
        PairResult({"spark-a": 1}, {"spark-b": alone}).raise_failures()
    assert raised.value is alone


def test_errors_of_different_kinds_are_a_pair_error_with_every_line_and_the_shared_exit_code() -> None:
    errors = {"spark-a": UsageError("bad --node"), "spark-b": RemoteCommandError("spark-b", "ls", 2, "no such file")}
    with pytest.raises(PairError) as raised:
        PairResult({}, errors).raise_failures()
    assert type(raised.value) is PairError and raised.value.exit_code == 1
    assert raised.value.lines() == ["spark-a: bad --node", "spark-b: `ls` failed: no such file"]
    both_usage = {"spark-a": UsageError("bad --node"), "spark-b": UsageError("bad --node")}
    with pytest.raises(UsageError) as usage:
        PairResult({}, both_usage).raise_failures()
    assert usage.value.exit_code == 2 and len(usage.value.lines()) == 2


def test_an_interrupt_on_both_nodes_stays_an_interrupt() -> None:
    errors = {name: Interrupted("interrupted while starting", node=name) for name in ("spark-a", "spark-b")}
    with pytest.raises(Interrupted) as raised:
        PairResult({}, errors).raise_failures()
    assert raised.value.exit_code == 130 and isinstance(raised.value, PairError)


def test_a_bug_on_one_node_is_raised_as_the_bug_it_is() -> None:
    bug = KeyError("engine")
    with pytest.raises(KeyError):
        PairResult({}, {"spark-a": ConnectError("x", node="spark-a"), "spark-b": bug}).raise_failures()


def test_gather_pair_with_both_nodes_failing_reports_both() -> None:
    """Through a real caller: both nodes' probe rounds fail to connect; the error names both nodes, and is
    still the ConnectError the CLI and doctor catch."""
    nodes = [FakeNode(name).on(is_probe_round, ConnectError("no answer (timed out)", node=name))
             for name in ("spark-a", "spark-b")]
    with pytest.raises(ConnectError) as raised:
        probes.gather_pair(fake_pair(*nodes), [host.SUDO])
    assert [line.split(":")[0] for line in raised.value.lines()] == ["spark-a", "spark-b"]
    assert isinstance(raised.value, SparkpairError) and " ".join(raised.value.lines()).count("no answer") == 2


def test_gather_pair_with_both_nodes_answering_gives_each_nodes_facts() -> None:
    answer = ProbeRound({host.SUDO: "helper ours\nfull no\n"})
    nodes = [FakeNode(name).on(is_probe_round, answer) for name in ("spark-a", "spark-b")]
    facts = probes.gather_pair(fake_pair(*nodes), [host.SUDO])
    assert {name: node_facts[host.SUDO] for name, node_facts in facts.items()} == dict.fromkeys(("spark-a", "spark-b"),
                                                                                    host.RootAccess("ours", False))
