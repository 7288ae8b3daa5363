"""doctor and setup-network over three or four nodes say what they judged in words that fit: the clock skew over
every node (no crash), every finding about all nodes at once under one label (`cluster`; `pair` for two), skip
lines and fixes that name every node, the ring's environment explained (INFO, its reason from docs/cluster.md),
and setup-network's lines for every node. Two nodes read exactly as before (tests/unit/test_checks.py, the golden
tests)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from cluster_nodes import RING, SWITCH, arming_and_confirming, cluster_of
from test_checks import SIM
from test_checks import node_facts as pair_node_facts

from sparkpair import report
from sparkpair.checks import Facts, Finding, Status, deep, engine, node, run_checks
from sparkpair.checks.catalog import CHECKS, DRIFT_CHECKS
from sparkpair.checks.deep import DeepRun, deep_checks
from sparkpair.checks.playbook import check_playbook, snapshot
from sparkpair.inventory import Inventory
from sparkpair.network import flow, guarded
from sparkpair.network.run import SetupOptions
from sparkpair.probes import NodeFacts, Probe, docker, host, models
from sparkpair.probes.docker import DockerInfo
from sparkpair.probes.host import Gpu, Identity
from sparkpair.progress import Event

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_DOC = (ROOT / "docs" / "cluster.md").read_text()


def facts_of(inventory: Inventory, **changes: Any) -> Facts:
    """Facts of healthy nodes for what the whole-set checks read: identity, memory, GPU, Docker, the image, the
    hub (each node's other probes unasked)."""
    profile = inventory.profile()
    hub = engine.hub_probe(inventory, profile.repos[0])
    nodes = {}
    for item in inventory.nodes:
        values: dict[Probe[Any], Any] = {
            host.IDENTITY: Identity(1000, "nvidia", frozenset({"nvidia", "docker"}), item.name),
            host.SUDO: host.RootAccess("ours", False), host.MEMINFO: {"MemAvailable": 120 * 1024 ** 2, "MemFree": 110 * 1024 ** 2},
            host.GPUS: [Gpu(0, "NVIDIA GB10", "580.95.05", None)],
            docker.DOCKER_INFO: DockerInfo("28.3.3", frozenset({"nvidia", "runc"})),
            docker.image_id(inventory.container.image): "sha256:" + "41" * 32,
            hub: models.HubReach(True, "http 200"),
        }
        nodes[item.name] = NodeFacts(values)
    facts = Facts(inventory, profile, nodes, clock_offsets={n.name: 0.1 for n in inventory.nodes})
    for name, value in changes.items():
        setattr(facts, name, value)
    return facts


def the(findings: list[Finding], check: str) -> Finding:
    [found] = [finding for finding in findings if finding.check == check]
    return found


# 1. clock.skew at three nodes


def test_the_clock_skew_of_three_nodes_is_their_spread_naming_the_two_furthest_apart() -> None:
    facts = facts_of(RING, clock_offsets={"spark-a": 0.4, "spark-b": 6.9, "spark-c": -1.1})
    findings = run_checks(facts, [("clock", node.check_clock)])  # was: check crashed: ValueError (unpack)
    assert findings == [Finding("clock.skew", "cluster", Status.WARN, "8.00 s between spark-c and spark-b",
                                "sudo timedatectl set-ntp true (on every node)")]
    facts.clock_offsets = {"spark-a": 0.0, "spark-b": 45.0, "spark-c": 0.5}
    [far] = node.check_clock(facts)
    assert (far.status, far.detail) == (Status.FAIL, "45.00 s between spark-a and spark-b (image pulls fail: "
                                                     "validating Root CA Certificate)")
    facts.clock_offsets = {"spark-a": 0.0}
    assert [(f.node, f.status, f.detail) for f in node.check_clock(facts)] == [
        ("cluster", Status.SKIP, "needs the clocks of two nodes")]


def test_a_pairs_clock_skew_reads_as_it_always_did() -> None:
    facts = facts_of(SIM, clock_offsets={"spark-a": 2.0, "spark-b": -1.0})
    assert list(node.check_clock(facts)) == [Finding("clock.skew", "pair", Status.WARN, "3.00 s between the nodes",
                                                     "sudo timedatectl set-ntp true (on both nodes)")]
    facts.clock_offsets = {"spark-a": 2.0}
    assert [(f.node, f.detail) for f in node.check_clock(facts)] == [("pair", "needs both nodes")]


# 2. one label for every node at once, and the words that name them


@pytest.mark.parametrize("inventory", [RING, SWITCH], ids=["ring", "switch"])
def test_every_finding_about_all_nodes_is_a_cluster_row(inventory: Inventory) -> None:
    findings = run_checks(facts_of(inventory), CHECKS + DRIFT_CHECKS)
    assert not [f for f in findings if "check crashed" in f.detail]
    assert not [f for f in findings if f.node == "pair"], [f.check for f in findings if f.node == "pair"]
    whole = {f.check for f in findings if f.node == "cluster"}
    assert {"inventory.valid", "reach.same-user", "platform.driver-match", "clock.skew", "docker.image-match",
            "models.hub", "models.token", "playbook.image"} <= whole, whole
    names = [n.name for n in inventory.nodes]
    assert the(findings, "reach.same-user").detail == "; ".join(f"{name}: nvidia uid 1000" for name in names)
    assert the(findings, "platform.driver-match").status is Status.OK
    hub = the(findings, "models.hub").detail
    assert f"answers all {len(names)} nodes: launch downloads on the head, then copies fan out" in hub, hub
    assert "half the files" not in hub and "--split-download is for two nodes only" in hub


def test_a_check_that_crashes_at_three_nodes_is_a_cluster_row() -> None:
    def broken(facts: Facts) -> list[Finding]:
        raise ValueError("too many values to unpack (expected 2)")

    [crashed] = run_checks(facts_of(RING), [("clock", broken)])
    assert (crashed.check, crashed.node, crashed.status) == ("clock", "cluster", Status.FAIL)
    assert run_checks(facts_of(SIM), [("clock", broken)])[0].node == "pair"


def test_skips_and_fixes_about_all_nodes_name_every_node() -> None:
    facts = facts_of(RING)
    del facts.nodes["spark-c"][host.GPUS]
    assert the(list(node.check_platform(facts)), "platform.driver-match").detail == \
        "needs a GPU reading from all 3 nodes"
    facts.nodes["spark-c"][host.IDENTITY] = Identity(1001, "ubuntu", frozenset(), "spark-c")
    same = the(list(node.check_reach(facts)), "reach.same-user")
    assert (same.node, same.status) == ("cluster", Status.FAIL) and "spark-c: ubuntu uid 1001" in same.detail
    facts.nodes["spark-b"][docker.image_id(RING.container.image)] = "sha256:" + "42" * 32
    match = the(list(engine.check_docker(facts)), "docker.image-match")
    assert (match.node, match.status) == ("cluster", Status.FAIL)
    assert match.fix.startswith(f"docker pull {RING.container.image} on all 3 nodes (or docker save")
    del facts.nodes["spark-b"][docker.image_id(RING.container.image)]
    assert the(list(engine.check_docker(facts)), "docker.image-match").detail == "needs the image on all 3 nodes"


def test_a_pairs_whole_set_rows_read_as_they_always_did() -> None:
    facts = Facts(SIM, SIM.profile(), {name: pair_node_facts(SIM, name) for name in ("spark-a", "spark-b")})
    del facts.nodes["spark-b"][host.GPUS]
    assert (the(list(node.check_platform(facts)), "platform.driver-match").detail ==
            "needs a GPU reading from both nodes")
    del facts.nodes["spark-b"][docker.image_id(SIM.container.image)]
    assert the(list(engine.check_docker(facts)), "docker.image-match").detail == "needs the image on both nodes"
    hub = facts_of(SIM)
    assert engine.hub_verdict(SIM, {n: models.HubReach(True, "") for n in ("spark-a", "spark-b")})[1].endswith(
        "answers both nodes")
    assert the(list(engine.check_models(hub)), "models.hub").detail.endswith(
        "answers both nodes: `launch --split-download` can fetch half the files on each")


def test_report_prints_the_whole_set_table_last_whatever_its_label(capsys: pytest.CaptureFixture[str]) -> None:
    report.findings([Finding("clock.skew", "cluster", Status.OK, "0.00 s between spark-a and spark-b"),
                     Finding("links.carrier", "spark-c", Status.OK, "up")])
    out = capsys.readouterr().out
    assert out.index("spark-c") < out.index("cluster"), out


# 3. the ring's environment, explained


def ring_reasons() -> set[tuple[frozenset[str], str]]:
    """The rows of docs/cluster.md's table of the ring's departures: (keys, why)."""
    start = CLUSTER_DOC.index("### Where a ring departs from the two-Spark playbooks, and why")
    found = set()
    for line in CLUSTER_DOC[start:].split("\n")[2:]:
        if line.startswith("#"):
            break
        if line.startswith("| `"):
            cells = line.strip().strip("|").split(" | ")
            found.add((frozenset(re.findall(r"`([^`]+)`", cells[0])), cells[-1].strip()))
    return found


def test_the_rings_reasons_in_docs_cluster_and_the_data_agree() -> None:
    data = {(frozenset(row["keys"]), row["why"]) for group in ("ring", "ring-mpi", "ring-head")
            for row in snapshot()["reasons"][group]}
    assert ring_reasons() == data


@pytest.mark.parametrize("runtime", ["trtllm", "vllm"])
def test_a_rings_interfaces_are_explained_departures_not_warnings(runtime: str) -> None:
    inventory = RING.for_runtime(runtime)
    findings = list(check_playbook(Facts(inventory, inventory.profile(None, runtime))))
    env = [f for f in findings if f.check == "playbook.env"]
    assert env and all(f.status is Status.INFO for f in env), [f.detail for f in env if f.status is not Status.INFO]
    for key in ("NCCL_SOCKET_IFNAME", "UCX_NET_DEVICES"):
        [row] = [f for f in env if f.detail.startswith(f"env.{key}: ")]
        assert row.node == "cluster"
        assert row.detail.endswith("Why (docs/cluster.md): a ring uses both QSFP ports of each Spark, each cabled "
                                   "to one neighbour: every port's twins carry traffic"), row.detail
    if runtime == "vllm":  # spark-b's first twin is its cable to spark-c: it publishes its twin toward the head
        gloo = next(f for f in env if f.detail.startswith("env.GLOO_SOCKET_IFNAME: "))
        assert gloo.node == "spark-b" and "Why (docs/cluster.md): a rank publishes one interface" in gloo.detail


def test_an_operators_ring_override_still_needs_its_own_reason() -> None:
    env = {"NCCL_SOCKET_IFNAME": "enp1s0f1np1,enP2p1s0f1np1,enp1s0f0np0,enP2p1s0f0np0"}  # every port, reordered
    inventory = dataclasses.replace(RING, container=dataclasses.replace(RING.container, env=env))
    found = [f for f in check_playbook(Facts(inventory, inventory.profile()))
             if f.detail.startswith("env.NCCL_SOCKET_IFNAME: ")]
    assert [f.status for f in found] == [Status.WARN]  # not sparkpair's default any more: the operator's reason


# 4. setup-network's lines at three nodes


def test_setup_network_on_a_ring_says_every_node(capsys: pytest.CaptureFixture[str]) -> None:
    pair, nodes = cluster_of(RING)
    for fake in nodes.values():
        arming_and_confirming(fake)
    plan = flow.plan_setup(pair, RING, SetupOptions())
    events: list[Event] = []
    assert flow.apply_setup(pair, RING, plan, events.append, SetupOptions()).ok
    said = [e.text for e in events]
    assert "reaching all 3 nodes again over new SSH connections" in said
    assert ("link verified: carrier, addresses, MTU, pings and full-MTU don't-fragment pings both ways between every "
            "two nodes that share a subnet") in said
    assert ("SSH trust verified: ssh -o BatchMode=yes works both ways between every two nodes that share a subnet, "
            "over every QSFP address") in said
    assert not [text for text in said if "both nodes" in text or "either node" in text], said
    report.plan([], [], nodes=3)
    report.plan([], [])
    assert capsys.readouterr().out.splitlines() == ["nothing to change on any node", "nothing to change on either node"]


def test_a_rings_rollback_names_every_node() -> None:
    three = guarded.Confirmation(["spark-a", "spark-b"], {"spark-c": "no answer"}, False)
    assert three.rolling_back("spark-a").endswith("so that every node ends as before")
    two = guarded.Confirmation(["spark-a"], {"spark-b": "no answer"}, False)
    assert two.rolling_back("spark-a").endswith("so that both nodes end as before")


def test_a_launch_that_failed_on_three_nodes_points_at_every_nodes_evidence(capsys: pytest.CaptureFixture[str]) -> None:
    from sparkpair.engine.launch import LaunchFailure, LaunchResult

    failed = LaunchResult(failure=LaunchFailure("rank 2 exited"))
    report.launch_result(failed, 3)
    report.launch_result(failed)
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert "evidence from every node for a report" in text and "evidence from both nodes for a report" in text



def test_doctor_deep_rows_at_three_nodes_are_cluster_rows() -> None:
    facts = facts_of(RING)
    blocked = DeepRun(blocked="no engine image on spark-c")
    rows = [row for check, function in deep_checks(blocked) for row in function(facts)]
    assert {(row.node, row.status) for row in rows} == {("cluster", Status.SKIP)}
    tokens = [{"host": name, "env": True, "sha256": "ab" * 32} for name in ("spark-a", "spark-b", "spark-c")]
    [token] = deep.check_token(facts, DeepRun(stages={"hosts": [], "token": tokens}, operator_sha256="ab" * 32))
    assert (token.node, token.status) == ("cluster", Status.OK) and token.detail.startswith("all 3 ranks read the same")
    [slow] = deep.check_nccl(facts, DeepRun(stages={"hosts": []}, nccl="garbage"))
    assert slow.node == "cluster"
    assert deep.check_token(facts_of(SIM), DeepRun(stages={"hosts": [], "token": tokens[:2]}))[0].detail.startswith(
        "both ranks read the same")
