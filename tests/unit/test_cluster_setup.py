"""setup-network over a ring of three and a switch of four, through scripted nodes (tests/unit/cluster_nodes.py):
one planning round per node, every node's netplan and lockout guard, SSH trust as a full mesh, the self-reverting
apply confirmed on every node, every expected link verified (a crossed ring cable named by its ports), and
--restore on every node. The pair's own flow is tests/unit/test_seam_network_plan.py's, unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster_nodes import RING, SWITCH, arming_and_confirming, cluster_of, expected_cabling, host_key, interfaces
from test_topology import F0, F0B, F1, F1B

from sparkpair import render
from sparkpair.checks import links
from sparkpair.inventory import Inventory, read_inventory
from sparkpair.network import flow, netplan, verify
from sparkpair.network.run import SetupOptions
from sparkpair.probes import net
from sparkpair.progress import Event


@pytest.mark.parametrize("inventory", [RING, SWITCH], ids=["ring", "switch"])
def test_every_node_gets_its_netplan_and_the_full_trust_mesh_from_one_round_each(inventory: Inventory) -> None:
    pair, nodes = cluster_of(inventory)
    plan = flow.plan_setup(pair, inventory, SetupOptions())
    names = [node.name for node in inventory.nodes]
    assert plan.refusals == [] and plan.network.lockouts == []
    assert all(len(fake.calls) == 1 for fake in nodes.values())  # one round trip each, nothing changed
    for node in inventory.nodes:
        written = [action for change in plan.network.changes if change.node == node.name for action in change.actions]
        assert getattr(written[0], "path", None) == netplan.NETPLAN_PATH
        assert written[0].content == render.netplan_file(inventory, node, "the inventory").content  # type: ignore[union-attr]
    assert plan.host_keys == {name: host_key(name) for name in names}
    assert sorted(change.node for change in plan.key_changes) == names
    learnt = {(c.node, peer) for c in plan.trust_changes if c.summary.startswith("learn")
              for peer in names if f"{peer}'s host keys" in c.summary}
    assert learnt == {(a, b) for a in names for b in names if a != b}  # every node pins every other


def test_the_lockout_guard_refuses_the_one_node_whose_session_rides_a_qsfp_subnet() -> None:
    twin, address = next(iter(RING.node("spark-c").links.items()))
    operator = address.network.network_address + 200  # the operator reaches spark-c over its first twin's subnet
    pair, _ = cluster_of(RING, extra={"spark-c": {net.SSH_SESSION: f"{operator} 50000 {address.ip} 22"}})
    plan = flow.plan_setup(pair, RING, SetupOptions(skip_ssh=True))
    assert plan.network.lockouts and all(line.startswith("spark-c: ") for line in plan.network.lockouts)
    assert str(address.network) in plan.network.lockouts[0], plan.network.lockouts
    assert {change.node for change in plan.network.changes} == {"spark-a", "spark-b"}


@pytest.mark.parametrize("inventory", [RING, SWITCH], ids=["ring", "switch"])
def test_the_apply_arms_applies_verifies_every_link_and_confirms_on_every_node(inventory: Inventory) -> None:
    pair, nodes = cluster_of(inventory)
    for fake in nodes.values():
        arming_and_confirming(fake)
    options = SetupOptions(skip_ssh=True)
    plan = flow.plan_setup(pair, inventory, options)
    events: list[Event] = []
    result = flow.apply_setup(pair, inventory, plan, events.append, options)
    assert result.ok and result.link_verified and not result.rolled_back, [e.text for e in events]
    for name, fake in nodes.items():
        assert fake.text(netplan.NETPLAN_PATH) == render.netplan_file(inventory, inventory.node(name),
                                                                      "the inventory").content
        assert fake.commands.count("sparkpair-root confirm") == 1
    confirmed = [e.node for e in events if e.text.startswith("confirmed over a new SSH connection")]
    assert confirmed == [node.name for node in inventory.nodes]


def test_a_ring_whose_links_all_answer_verifies() -> None:
    pair, _ = cluster_of(RING, configured=True)
    assert verify.verify_link(pair, RING, deadline_s=0) == []


def test_a_crossed_ring_cable_is_named_by_its_ports_from_one_probe_round() -> None:
    """spark-a's two plugs swapped: its f0 twins meet spark-c's f0 twins, its f1 twins spark-b's f1 twins."""
    cabling = expected_cabling(RING)
    for twin, far in ((F0, ("spark-c", F0)), (F0B, ("spark-c", F0B)), (F1, ("spark-b", F1)), (F1B, ("spark-b", F1B))):
        cabling[("spark-a", twin)], cabling[far] = far, ("spark-a", twin)
    pair, nodes = cluster_of(RING, cabling, configured=True)
    found = verify.verify_link(pair, RING, deadline_s=0)
    assert "spark-a: enp1s0f0np0 reaches spark-c, expected spark-b: the cables on spark-a's enp1s0f0np0 and " \
           "enp1s0f1np1 are crossed (fix: swap the QSFP cables on spark-a's enp1s0f0np0 and enp1s0f1np1, or swap " \
           "their addresses in nodes[0].links)" in found
    assert "spark-a: enp1s0f1np1 reaches spark-b, expected spark-c: the cables on spark-a's enp1s0f1np1 and " \
           "enp1s0f0np0 are crossed (fix: swap the QSFP cables on spark-a's enp1s0f1np1 and enp1s0f0np0, or swap " \
           "their addresses in nodes[0].links)" in found
    assert all(len(fake.calls) == 1 for fake in nodes.values())  # the crossing facts ride in the one round


def test_a_ring_apply_whose_link_does_not_verify_is_rolled_back_on_every_node() -> None:
    cabling = expected_cabling(RING)
    del cabling[("spark-b", F0)], cabling[("spark-c", F1)]  # the cable between spark-b and spark-c is dead
    pair, nodes = cluster_of(RING, cabling)
    for fake in nodes.values():
        arming_and_confirming(fake)
    options = SetupOptions(skip_ssh=True, confirm_timeout=6)  # verification polls for about a second
    plan = flow.plan_setup(pair, RING, options)
    events: list[Event] = []
    result = flow.apply_setup(pair, RING, plan, events.append, options)
    assert not result.ok and not result.link_verified and result.rolled_back
    errors = [e.text for e in events if e.level == "error"]
    assert "spark-b: enp1s0f0np0 -> 198.19.20.2: no reply (0 of 3 answered)" in errors, errors
    assert "spark-c: enp1s0f1np1 -> 198.19.20.1: no reply (0 of 3 answered)" in errors
    for name, fake in nodes.items():  # every node reverted by its watchdog, checked as before
        assert netplan.NETPLAN_PATH not in fake.files
        assert [e.text for e in events if e.node == name and e.text.startswith("reverted now")]
        assert "sparkpair-root revert-soon" in fake.commands
        assert "sparkpair-root confirm" not in fake.commands


@pytest.mark.parametrize("last", [False, True], ids=["restore", "restore-last"])
def test_restore_puts_every_node_of_a_ring_back_as_before(last: bool) -> None:
    pair, nodes = cluster_of(RING)
    for fake in nodes.values():
        arming_and_confirming(fake)
    before = {name: dict(fake.files) for name, fake in nodes.items()}
    options = SetupOptions(skip_ssh=True)
    assert flow.apply_setup(pair, RING, flow.plan_setup(pair, RING, options), lambda event: None, options).ok
    events: list[Event] = []
    assert flow.restore(pair, RING, events.append, last=last)
    assert [e.node for e in events if e.level == "result"] == ["spark-a", "spark-b", "spark-c"]
    for name, fake in nodes.items():
        assert netplan.NETPLAN_PATH not in fake.files
        kept = {path: data for path, data in fake.files.items()  # but sparkpair's records, backups and uploads
                if not path.startswith(("/home/nvidia/.sparkpair", "/var/"))}
        assert kept == before[name]


@pytest.mark.parametrize("inventory", [RING, SWITCH], ids=["ring", "switch"])
def test_ssh_trust_is_set_up_and_verified_as_a_full_mesh_with_host_keys_pinned(inventory: Inventory) -> None:
    pair, nodes = cluster_of(inventory)
    for fake in nodes.values():
        arming_and_confirming(fake)
    plan = flow.plan_setup(pair, inventory, SetupOptions())
    events: list[Event] = []
    result = flow.apply_setup(pair, inventory, plan, events.append, SetupOptions())
    assert result.ok and result.trust_verified, [e.text for e in events if e.level == "error"]
    for node in inventory.nodes:
        files = nodes[node.name].files
        authorized = files[f"{nodes[node.name].home}/.ssh/authorized_keys"].decode()
        known = files[f"{nodes[node.name].home}/.ssh/known_hosts"].decode()
        for other in inventory.nodes:
            if other.name == node.name:
                continue
            assert f"sparkpair@{other.name}" in authorized  # every other node's key, authorized here
            line = next(line for line in known.splitlines() if other.name in line.split()[0].split(","))
            assert line.split()[1:] == list(host_key(other.name))  # its host key, pinned under its addresses
            assert {str(address.ip) for address in other.links.values()} <= set(line.split()[0].split(","))


def test_a_pairs_crossing_round_is_the_one_it_always_was() -> None:
    sim = read_inventory(Path(__file__).resolve().parents[1] / "fixtures" / "inventory" / "sim.yaml")
    assert links.crossing_probe(sim, sim.head).command.text == (
        "ping -n -c 1 -W 1 -I enp1s0f1np1 198.19.1.12 >/dev/null 2>&1; "
        "ping -n -c 1 -W 1 -I enP2p1s0f1np1 198.19.2.12 >/dev/null 2>&1; ip -j neigh show")


def test_a_rings_crossing_round_asks_the_other_neighbour_only_when_the_expected_one_is_silent() -> None:
    command = links.crossing_probe(RING, RING.node("spark-a")).command.text
    assert command.startswith("{ ping -n -c 1 -W 1 -I enp1s0f0np0 198.19.10.2 >/dev/null 2>&1 || "
                              "ping -n -c 1 -W 1 -I enp1s0f0np0 198.19.30.1 >/dev/null 2>&1 || true; } & ")
    assert command.count("} & ") == 4 and command.endswith(" & wait; ip -j neigh show")  # every twin at once


def test_a_switch_port_that_is_down_is_named_with_the_switch_in_its_fix() -> None:
    """spark-c's switch port down: both its twins lose carrier; setup-network's problem names the cable to the
    switch and the switch port, not a back-to-back cable on both Sparks."""
    items = json.loads(interfaces(SWITCH, "spark-c", configured=True))
    for item in items:
        if item["ifname"] in (F1, F1B):
            item["flags"] = ["NO-CARRIER", "BROADCAST", "MULTICAST", "UP"]
    pair, _ = cluster_of(SWITCH, configured=True, extra={"spark-c": {net.INTERFACES: json.dumps(items)}})
    found = verify.verify_link(pair, SWITCH, deadline_s=0)
    assert f"spark-c: {F1}: no carrier (fix: check the QSFP cable from spark-c's {F1} to the switch and that its " \
           "switch port is up (enabled, in the bridge of the other nodes' ports))" in found
    assert not [line for line in found if "no carrier" in line and not line.startswith("spark-c:")]
