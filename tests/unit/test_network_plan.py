"""The setup-network planner, from captured probe output: changes, no-ops, and every refusal."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from sparkpair import render
from sparkpair.checks import judge, links
from sparkpair.inventory import parse_inventory, read_inventory
from sparkpair.network import netplan, verify
from sparkpair.probes import NodeFacts, format_sections, host, net

PLAN_KEYS = {"interfaces": net.INTERFACES, "default_routes": net.DEFAULT_ROUTES, "ssh_session": net.SSH_SESSION,
             "session_route": net.SESSION_ROUTE, "routes": net.ROUTES, "netplan_files": net.NETPLAN_FILES,
             "sudo": host.SUDO}

FIXTURES = Path(__file__).parent.parent / "fixtures"
SIM = read_inventory(FIXTURES / "inventory" / "sim.yaml")
CLOUD_INIT = (FIXTURES / "probes" / "netplan-cloud-init.yaml").read_text()


def _interfaces(node: str, configured: bool, mtu: int = 9000) -> dict[str, net.Interface]:
    items = json.loads((FIXTURES / "probes" / "ip-addr-fresh.json").read_text())
    host = "198.18.0.11" if node == "spark-a" else "198.18.0.12"
    for item in items:
        if item["ifname"] == "enP7s7":
            item["addr_info"][0]["local"] = host
        if configured and item["ifname"] in SIM.node(node).links:
            address = SIM.node(node).links[item["ifname"]]
            item.update(flags=["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], mtu=mtu)
            item["addr_info"] = [{"family": "inet", "local": str(address.ip), "prefixlen": 24}]
    return net.parse_interfaces(json.dumps(items))


def _routes(fixture: str) -> list[net.Route]:
    """Routes from a captured `ip -j route` (tests/fixtures/probes/SOURCES.md)."""
    return net.parse_routes((FIXTURES / "probes" / fixture).read_text())


def _facts(configured: bool = False, **overrides: object) -> dict[str, NodeFacts]:
    facts = {}
    for node in SIM.nodes:
        files = {"/etc/netplan/50-cloud-init.yaml": net.NetplanFile.read("/etc/netplan/50-cloud-init.yaml", CLOUD_INIT)}
        if configured:
            ours = render.netplan_file(SIM, node, "the inventory").content
            files[netplan.NETPLAN_PATH] = net.NetplanFile.read(netplan.NETPLAN_PATH, ours)
        facts[node.name] = NodeFacts({net.INTERFACES: _interfaces(node.name, configured), net.DEFAULT_ROUTES: ["enP7s7"],
                                      net.SSH_SESSION: node.host, net.SESSION_ROUTE: _routes("ip-route-get-onlink.json"),
                                      net.ROUTES: _routes("ip-route-show.json")[:2], net.NETPLAN_FILES: files,
                                      host.SUDO: host.RootAccess("ours", False)})
        facts[node.name].update({PLAN_KEYS[key]: copy.deepcopy(value) for key, value in overrides.items()})
    return facts


def test_fresh_pair_gets_a_netplan_file_and_an_apply_on_each_node() -> None:
    plan = netplan.plan_network(SIM, _facts())
    assert plan.refusals == []
    assert [(c.node, c.summary.split(" (")[0]) for c in plan.changes] == [
        ("spark-a", f"create {netplan.NETPLAN_PATH}"), ("spark-a", "netplan generate && netplan apply"),
        ("spark-b", f"create {netplan.NETPLAN_PATH}"), ("spark-b", "netplan generate && netplan apply")]
    diff = plan.changes[2].diff
    assert "+        - 198.19.1.12/24" in diff and "+      mtu: 9000" in diff and diff.startswith("--- /dev/null")


def test_configured_pair_needs_nothing() -> None:
    assert netplan.plan_network(SIM, _facts(configured=True)).changes == []


def test_netplan_rendered_ahead_is_the_one_planned() -> None:
    """setup-network renders the wanted files while it connects and hands them in: the plan is the same."""
    wanted = netplan.wanted_netplan(SIM)
    assert netplan.plan_network(SIM, _facts(configured=True), wanted=wanted).changes == []
    assert [c.diff for c in netplan.plan_network(SIM, _facts(), wanted=wanted).changes] == \
        [c.diff for c in netplan.plan_network(SIM, _facts()).changes]
    changed = {**wanted, "spark-b": wanted["spark-b"] + "# handed in\n"}
    assert "+# handed in" in netplan.plan_network(SIM, _facts(configured=True), wanted=changed).changes[0].diff


def test_live_drift_alone_plans_a_reapply_with_the_reason() -> None:
    facts = _facts(configured=True)
    facts["spark-b"][net.INTERFACES] = _interfaces("spark-b", True, mtu=1500)
    plan = netplan.plan_network(SIM, facts)
    assert [c.node for c in plan.changes] == ["spark-b"]
    assert "live state differs: enp1s0f1np1 mtu 1500" in plan.changes[0].summary


def test_lockout_guard_refuses_the_management_interface() -> None:
    data = yaml.safe_load((FIXTURES / "inventory" / "sim.yaml").read_text())
    for node in data["nodes"]:
        node["links"] = {"enP7s7": node["links"].pop("enp1s0f1np1"), **node["links"]}
    inventory = parse_inventory(data)
    facts = _facts()
    plan = netplan.plan_network(inventory, facts)
    assert any("enP7s7 carries this SSH session (198.18.0.11)" in r for r in plan.lockouts)
    assert any("enP7s7 carries the default route" in r for r in plan.lockouts)
    assert plan.changes == []


def test_link_subnet_holding_the_management_address_is_refused() -> None:
    data = yaml.safe_load((FIXTURES / "inventory" / "sim.yaml").read_text())
    data["nodes"][0]["links"]["enp1s0f1np1"] = "198.18.0.21/16"
    data["nodes"][1]["links"]["enp1s0f1np1"] = "198.18.0.22/16"
    plan = netplan.plan_network(parse_inventory(data), _facts())
    assert any("contains the management address 198.18.0.11" in r for r in plan.lockouts)


def test_conflicting_netplan_file_is_named_and_taken_over_with_replace() -> None:
    other = "network:\n  version: 2\n  ethernets:\n    enp1s0f1np1:\n      addresses: [198.19.9.9/24]\n"
    facts = _facts()
    for node in facts.values():
        node[net.NETPLAN_FILES]["/etc/netplan/40-cx7.yaml"] = net.NetplanFile.read("/etc/netplan/40-cx7.yaml", other)
    refused = netplan.plan_network(SIM, facts)
    assert any("/etc/netplan/40-cx7.yaml already configures enp1s0f1np1" in r and "--replace" in r
               for r in refused.refusals)
    taken = netplan.plan_network(SIM, facts, replace=True)
    assert taken.refusals == []
    assert taken.changes[0].summary == "take over /etc/netplan/40-cx7.yaml (backed up, then removed)"


@pytest.mark.parametrize("other", [
    "network:\n  version: 2\n  ethernets:\n    cx7:\n      match: {name: enp1s0f1np1}\n      mtu: 1500\n",
    "network:\n  version: 2\n  bonds:\n    bond0:\n      interfaces: [enp1s0f1np1, enP2p1s0f1np1]\n",
    "network:\n  version: 2\n  ethernets:\n    enp1s0f1np1: {}\n  vlans:\n    v7:\n      id: 7\n"
    "      link: enp1s0f1np1\n",
])
def test_replace_refuses_a_twin_configured_through_match_bond_or_vlan(other: str) -> None:
    facts = _facts()
    path = "/etc/netplan/40-cx7.yaml"
    for node in facts.values():
        node[net.NETPLAN_FILES][path] = net.parse_netplan_files(format_sections({path: other}))[path]
    plan = netplan.plan_network(SIM, facts, replace=True)
    assert plan.changes == [] and len(plan.refusals) == 2
    assert plan.refusals[0].startswith(f"spark-a: {path} configures ") and "enp1s0f1np1" in plan.refusals[0]
    assert "--replace cannot take over" in plan.refusals[0] and "match: name:" in plan.refusals[0]


def test_replace_takes_over_a_stanza_keyed_by_the_twin_even_with_its_own_match() -> None:
    other = "network:\n  version: 2\n  ethernets:\n    enp1s0f1np1:\n      match: {name: enp1s0f1np1}\n"
    facts = _facts()
    for node in facts.values():
        node[net.NETPLAN_FILES]["/etc/netplan/40-cx7.yaml"] = net.NetplanFile.read(
            "/etc/netplan/40-cx7.yaml", other)
    plan = netplan.plan_network(SIM, facts, replace=True)
    assert plan.refusals == [] and plan.changes[0].summary.startswith("take over /etc/netplan/40-cx7.yaml")


def test_takeover_keeps_other_interfaces_of_a_shared_file() -> None:
    shared = CLOUD_INIT + "    enp1s0f1np1:\n      dhcp4: true\n"
    remaining = netplan._without_interfaces(shared, {"enp1s0f1np1"})
    assert remaining is not None and "enP7s7" in remaining and "enp1s0f1np1" not in remaining


def test_password_sudo_and_missing_interface_are_refused() -> None:
    facts = _facts()
    facts["spark-a"][host.SUDO] = host.RootAccess("absent", False)
    del facts["spark-b"][net.INTERFACES]["enP2p1s0f1np1"]
    refusals = netplan.plan_network(SIM, facts).refusals
    [root] = [r for r in refusals if r.startswith("spark-a: sparkpair cannot act as root there")]
    assert "nvidia ALL=(root) NOPASSWD: /usr/local/sbin/sparkpair-root" in root and "NOPASSWD:ALL" not in root
    assert any(r.startswith("spark-b: no interface enP2p1s0f1np1") for r in refusals)


def test_link_problems_name_the_node_and_interface() -> None:
    facts = NodeFacts({net.INTERFACES: _interfaces("spark-a", True),
                       net.ping("enp1s0f1np1", "198.19.1.12"): net.PingResult(2, 0, None)})
    facts[net.INTERFACES]["enP2p1s0f1np1"] = net.Interface("enP2p1s0f1np1", "", 9000, True, False,
                                                         facts[net.INTERFACES]["enP2p1s0f1np1"].addresses)
    problems = verify.problems(judge(SIM, {"spark-a": facts}, verify.LINK_CHECKS, links.VERIFIED))
    assert "spark-a: enP2p1s0f1np1: no carrier (fix: reseat the QSFP cable of enP2p1s0f1np1 on spark-a (same port " \
           "on both Sparks))" in problems
    assert "spark-a: enp1s0f1np1 -> 198.19.1.12: no reply (0 of 2 answered)" in problems


@pytest.mark.parametrize("size", [None, 8972])
def test_verification_pings_each_peer_twin(size: int | None) -> None:
    asked = verify.verification_probes(SIM, SIM.node("spark-b"))
    assert net.ping("enp1s0f1np1", "198.19.1.11", size) in asked and net.ping("enP2p1s0f1np1", "198.19.2.11", size) in asked
