"""The link checks, setup-network's verification and its netplan planner over a ring of three and a switch of
four, from hand-built facts; a crossed ring cable named by its ports; a pair's probes as they always were."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_topology import F0, F0B, F1, F1B, ring_data, switch_data

from sparkpair.checks import Facts, Finding, Status, links, run_checks
from sparkpair.inventory import Inventory, parse_inventory, read_inventory
from sparkpair.network import netplan, verify
from sparkpair.probes import NodeFacts, Probe, host, net
from sparkpair.probes.net import Address, Interface, PingResult

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RING = parse_inventory(ring_data())
SWITCH = parse_inventory(switch_data(4))
LINK_CHECKS = [("links", links.check_pair_links), ("path", links.check_path), ("trust", links.check_trust)]


def mac(inventory: Inventory, node: str, port: str) -> str:
    index = [n.name for n in inventory.nodes].index(node)
    return f"02:00:00:{index:02x}:00:{[F0, F0B, F1, F1B].index(port):02x}"


def healthy_facts(inventory: Inventory) -> dict[str, NodeFacts]:
    """Every node's facts when each expected link answers at full MTU and each neighbour's login works."""
    mtu, found = inventory.cluster.mtu, {}
    for node in inventory.nodes:
        facts: dict[Probe[Any], Any] = {net.INTERFACES: {
            port: Interface(port, mac(inventory, node.name, port), mtu, True, True,
                            (Address(str(address.ip), address.network.prefixlen, "inet", False),))
            for port, address in node.links.items()}}
        ends = links.link_ends(inventory, node)
        if inventory.topology != "switch":
            facts[links.crossing_probe(inventory, node)] = {(end.port, end.address): mac(inventory, end.peer.name, end.peer_port)
                                                           for end in ends}
        for end in ends:
            for size in (None, mtu - 28):
                facts[net.ping(end.port, end.address, size)] = PingResult(3, 3, 0.1)
        for peer in inventory.neighbours(node):
            addresses = links.peer_addresses(inventory, node, peer)
            facts[net.ssh_batch(addresses[0])] = peer.name
            for address in addresses:
                facts[net.known_host(address)] = (("ssh-ed25519", f"AAAA{peer.name}"),)
        found[node.name] = NodeFacts(facts)
    return found


def judged(inventory: Inventory, nodes: dict[str, NodeFacts]) -> list[Finding]:
    return run_checks(Facts(inventory, inventory.profile(), nodes), LINK_CHECKS)


def not_ok(findings: list[Finding]) -> list[tuple[str, str, str, str]]:
    return [(f.check, f.node, f.detail, f.fix) for f in findings if f.status is not Status.OK]


@pytest.mark.parametrize("inventory", [RING, SWITCH], ids=["ring", "switch"])
def test_a_healthy_ring_or_switch_passes_every_link_check(inventory: Inventory) -> None:
    findings = judged(inventory, healthy_facts(inventory))
    assert not_ok(findings) == []
    pings = {(f.node, f.detail.split(":")[0]) for f in findings if f.check == "path.mtu"}
    assert pings == {(node.name, f"{end.port} -> {end.address}") for node in inventory.nodes
                     for end in links.link_ends(inventory, node)}


def test_every_pair_of_nodes_sharing_a_subnet_gets_a_df_ping_at_mtu() -> None:
    """A switch of four, one /24 per twin: each twin pings the same twin of the three others, at MTU."""
    spark_c = SWITCH.node("spark-c")
    full = [p.args for p in links.link_probes(SWITCH, spark_c) if p.kind == "ping" and p.args[2] is not None]
    assert full == [(F1, "198.19.1.11", 8972), (F1, "198.19.1.12", 8972), (F1, "198.19.1.14", 8972),
                    (F1B, "198.19.2.11", 8972), (F1B, "198.19.2.12", 8972), (F1B, "198.19.2.14", 8972)]
    assert not [p for p in links.link_probes(SWITCH, spark_c) if p.kind == "crossing"]  # no cable to cross


def test_trust_is_checked_from_each_node_to_each_neighbour() -> None:
    logins = [p.args[0] for p in links.trust_probes(RING, RING.node("spark-b")) if p.kind == "ssh"]
    assert logins == ["198.19.10.1", "198.19.20.2"]  # spark-a's end of cable 1, spark-c's of cable 2
    facts = healthy_facts(RING)
    facts["spark-b"][net.ssh_batch("198.19.20.2")] = None
    assert not_ok(judged(RING, facts)) == [("trust.ssh", "spark-b", "ssh 198.19.20.2: not probed",
                                            "check path.ping from spark-b to 198.19.20.2; then sparkpair setup-network")]


def _swap_cables_at_spark_a(facts: dict[str, NodeFacts]) -> None:
    """spark-a's two plugs swapped: its port f0 now meets spark-c's port f0, its port f1 spark-b's port f1.
    Nothing answers for the expected addresses; a second crossing round, out of each twin to the other
    neighbour's address, hears the node really at the other end."""
    spark_a = RING.node("spark-a")
    facts["spark-a"][links.crossing_probe(RING, spark_a)] = {}
    facts["spark-a"][net.crossing({F0: "198.19.30.1", F0B: "198.19.31.1", F1: "198.19.10.2", F1B: "198.19.11.2"})] = {
        (F0, "198.19.30.1"): mac(RING, "spark-c", F0), (F0B, "198.19.31.1"): mac(RING, "spark-c", F0B),
        (F1, "198.19.10.2"): mac(RING, "spark-b", F1), (F1B, "198.19.11.2"): mac(RING, "spark-b", F1B)}


def test_a_crossed_ring_cable_is_named_by_its_ports_with_the_fix() -> None:
    facts = healthy_facts(RING)
    _swap_cables_at_spark_a(facts)
    crossed = [f for f in not_ok(judged(RING, facts)) if f[0] == "links.crossed"]
    assert crossed[:2] == [
        ("links.crossed", "spark-a", "enp1s0f0np0 reaches spark-c, expected spark-b: the cables on spark-a's "
                                     "enp1s0f0np0 and enp1s0f1np1 are crossed",
         "swap the QSFP cables on spark-a's enp1s0f0np0 and enp1s0f1np1, or swap their addresses in nodes[0].links"),
        ("links.crossed", "spark-a", "enP2p1s0f0np0 reaches spark-c, expected spark-b: the cables on spark-a's "
                                     "enP2p1s0f0np0 and enP2p1s0f1np1 are crossed",
         "swap the QSFP cables on spark-a's enP2p1s0f0np0 and enP2p1s0f1np1, or swap their addresses in nodes[0].links")]
    assert [f[2] for f in crossed[2:]] == [
        "enp1s0f1np1 reaches spark-b, expected spark-c: the cables on spark-a's enp1s0f1np1 and enp1s0f0np0 are crossed",
        "enP2p1s0f1np1 reaches spark-b, expected spark-c: the cables on spark-a's enP2p1s0f1np1 and enP2p1s0f0np0 are "
        "crossed"]


def test_twins_crossed_on_a_ring_cable_keep_the_pairs_message() -> None:
    facts = healthy_facts(RING)
    probe = links.crossing_probe(RING, RING.node("spark-b"))
    facts["spark-b"][probe] = {**facts["spark-b"][probe], (F0, "198.19.20.2"): mac(RING, "spark-c", F1B)}
    assert not_ok(judged(RING, facts)) == [
        ("links.crossed", "spark-b", "enp1s0f0np0 reaches spark-c's enP2p1s0f1np1, not its enp1s0f1np1: cables "
                                     "crossed between twins",
         "swap the QSFP cables (or the interface names in nodes[].links) so twin meets twin")]


def test_a_ring_mtu_mismatch_names_both_ends_and_the_one_to_change() -> None:
    facts = healthy_facts(RING)
    interfaces = dict(facts["spark-c"][net.INTERFACES])
    interfaces[F1] = Interface(F1, mac(RING, "spark-c", F1), 1500, True, True, interfaces[F1].addresses)
    facts["spark-c"][net.INTERFACES] = interfaces
    [mismatch] = [f for f in not_ok(judged(RING, facts)) if f[0] == "links.mtu-match"]
    assert mismatch == ("links.mtu-match", "cluster", "spark-b enp1s0f0np0 - spark-c enp1s0f1np1 mtu 9000 on "
                        "spark-b, 1500 on spark-c", "sparkpair setup-network (sets enp1s0f1np1 of spark-c to mtu 9000)")


def test_setup_networks_verification_judges_a_ring_with_the_same_checks() -> None:
    facts = healthy_facts(RING)
    assert verify.judge_link(RING, facts) == [] and verify.judge_trust(RING, facts) == []
    facts["spark-c"][net.ping(F0B, "198.19.31.2", 8972)] = PingResult(3, 0, None)
    assert verify.judge_link(RING, facts) == [
        "spark-c: enP2p1s0f0np0 -> 198.19.31.2: 9000-byte don't-fragment pings fail (MTU differs somewhere on the path)"]


def test_a_pairs_link_probes_are_what_they_always_were() -> None:
    sim = read_inventory(FIXTURES / "inventory" / "sim.yaml")
    labels = [p.label for p in links.link_probes(sim, sim.head, verify_only=True)]
    assert labels == ["interfaces", "crossing ('enP2p1s0f1np1', '198.19.2.12') ('enp1s0f1np1', '198.19.1.12')",
                      "ping enp1s0f1np1 198.19.1.12", "ping enp1s0f1np1 198.19.1.12 8972",
                      "ping enP2p1s0f1np1 198.19.2.12", "ping enP2p1s0f1np1 198.19.2.12 8972"]
    assert [p.label for p in links.trust_probes(sim, sim.worker)] == [
        "ssh 198.19.1.11", "known host 198.19.1.11", "known host 198.19.2.11"]
    assert links.peer_addresses(sim, sim.head) == ["198.19.1.12", "198.19.2.12"]


def _plan_facts(inventory: Inventory) -> dict[str, NodeFacts]:
    """Fresh nodes: the captured `ip -j addr` of a Spark (all four QSFP interfaces, none configured)."""
    cloud_init = (FIXTURES / "probes" / "netplan-cloud-init.yaml").read_text()
    routes = net.parse_routes((FIXTURES / "probes" / "ip-route-show.json").read_text())[:2]
    session = net.parse_routes((FIXTURES / "probes" / "ip-route-get-onlink.json").read_text())
    found = {}
    for node in inventory.nodes:
        items = json.loads((FIXTURES / "probes" / "ip-addr-fresh.json").read_text())
        for item in items:
            if item["ifname"] == "enP7s7":
                item["addr_info"][0]["local"] = node.host
        files = {"/etc/netplan/50-cloud-init.yaml": net.NetplanFile.read("/etc/netplan/50-cloud-init.yaml", cloud_init)}
        found[node.name] = NodeFacts({net.INTERFACES: net.parse_interfaces(json.dumps(items)),
                                      net.DEFAULT_ROUTES: ["enP7s7"], net.SSH_SESSION: node.host,
                                      net.SESSION_ROUTE: session, net.ROUTES: routes, net.NETPLAN_FILES: files,
                                      host.SUDO: host.RootAccess("ours", False)})
    return found


def _planned_addresses(diff: str) -> list[str]:
    return [line.strip().removeprefix("+").strip().removeprefix("- ") for line in diff.splitlines()
            if line.strip().startswith("+") and "/24" in line]


@pytest.mark.parametrize("inventory", [RING, SWITCH], ids=["ring of 3", "switch of 4"])
def test_the_netplan_planner_plans_every_node_of_a_ring_or_a_switch(inventory: Inventory) -> None:
    plan = netplan.plan_network(inventory, _plan_facts(inventory))
    assert plan.refusals == [] and plan.lockouts == []
    assert [(c.node, c.summary.split(" (")[0]) for c in plan.changes] == [
        step for node in inventory.nodes for step in ((node.name, f"create {netplan.NETPLAN_PATH}"),
                                                      (node.name, "netplan generate && netplan apply"))]
    for node, change in zip(inventory.nodes, plan.changes[::2], strict=True):
        assert sorted(_planned_addresses(change.diff)) == sorted(str(a) for a in node.links.values())
        assert change.diff.count("+      mtu: 9000") == len(node.links)


def test_the_neighbours_of_a_node_whose_cables_are_crossed_name_that_nodes_ports() -> None:
    """spark-b's two plugs swapped, as the testbed's crossed-ring-cable fault does: spark-a's f0 cable lands on
    spark-b's f0 (not its f1) and spark-c's f1 cable on spark-b's f1 (not its f0). Both neighbours name spark-b's
    ports with spark-b's fix, not a swap of twins."""
    facts = healthy_facts(RING)
    for name, twin, address, reached in (("spark-a", F0, "198.19.10.2", F0), ("spark-a", F0B, "198.19.11.2", F0B),
                                         ("spark-c", F1, "198.19.20.1", F1), ("spark-c", F1B, "198.19.21.1", F1B)):
        probe = links.crossing_probe(RING, RING.node(name))
        facts[name][probe] = {**facts[name][probe], (twin, address): mac(RING, "spark-b", reached)}
    crossed = [f for f in not_ok(judged(RING, facts)) if f[0] == "links.crossed"]
    assert [(f[1], f[2]) for f in crossed] == [
        ("spark-a", f"{F0} reaches spark-b's {F0}, not its {F1}: the cables on spark-b's {F1} and {F0} are crossed"),
        ("spark-a", f"{F0B} reaches spark-b's {F0B}, not its {F1B}: the cables on spark-b's {F1B} and {F0B} are "
                    "crossed"),
        ("spark-c", f"{F1} reaches spark-b's {F1}, not its {F0}: the cables on spark-b's {F0} and {F1} are crossed"),
        ("spark-c", f"{F1B} reaches spark-b's {F1B}, not its {F0B}: the cables on spark-b's {F0B} and {F1B} are "
                    "crossed")]
    assert {f[3] for f in crossed[:2]} == {f"swap the QSFP cables on spark-b's {F1} and {F0}, or swap their addresses "
                                           "in nodes[1].links", f"swap the QSFP cables on spark-b's {F1B} and {F0B}, "
                                           "or swap their addresses in nodes[1].links"}
