"""network.flow.plan_setup on two scripted nodes (tests/fakenode.py): one probe round per node answered with
captured output (tests/fixtures/probes), then the plan: each node's netplan file and apply, its SSH key, the
peer's host keys and authorization; a node that cannot be reached names itself. No pair, no root."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakenode import FakeNode, ProbeRound, fake_pair, is_probe_round

from sparkpair import render
from sparkpair.errors import ConnectError
from sparkpair.inventory import read_inventory
from sparkpair.network import flow, netplan
from sparkpair.network.run import SetupOptions
from sparkpair.probes import Probe, format_sections, host, net, ssh

FIXTURES = Path(__file__).parent.parent / "fixtures"
SIM = read_inventory(FIXTURES / "inventory" / "sim.yaml")
CLOUD_INIT = (FIXTURES / "probes" / "netplan-cloud-init.yaml").read_text()
HOST_KEYS = {"spark-a": ("ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"),
             "spark-b": ("ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAIAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8g")}
NOT_YET = (125, "", "the twins are not configured yet")  # what the link checks' probes say on twins not yet set up


def interfaces(name: str, configured: bool) -> str:
    """`ip -j addr show` of a node (captured on a fresh Spark; the management address made the node's own)."""
    items = json.loads((FIXTURES / "probes" / "ip-addr-fresh.json").read_text())
    for item in items:
        if item["ifname"] == "enP7s7":
            item["addr_info"][0]["local"] = SIM.node(name).host
        if configured and item["ifname"] in SIM.node(name).links:
            address = SIM.node(name).links[item["ifname"]]
            item.update(flags=["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], mtu=9000)
            item["addr_info"] = [{"family": "inet", "local": str(address.ip), "prefixlen": 24}]
    return json.dumps(items)


def answers(name: str, configured: bool = False, sudo: str = "helper ours\nfull no\n") -> dict[Probe[Any], str]:
    """Every planning probe's stdout on a node (its twins fresh, or holding the inventory's addresses)."""
    files = {"/etc/netplan/50-cloud-init.yaml": CLOUD_INIT}
    if configured:
        files[netplan.NETPLAN_PATH] = render.netplan_file(SIM, SIM.node(name), "the inventory").content
    return {net.INTERFACES: interfaces(name, configured),
            net.DEFAULT_ROUTES: (FIXTURES / "probes" / "ip-route-default.json").read_text(),
            net.SSH_SESSION: f"198.18.0.1 50000 {SIM.node(name).host} 22",
            net.SESSION_ROUTE: (FIXTURES / "probes" / "ip-route-get-onlink.json").read_text(),
            net.ROUTES: (FIXTURES / "probes" / "ip-route-show.json").read_text(),
            net.NETPLAN_FILES: format_sections(files), host.SUDO: sudo,
            ssh.SSH_FILES: format_sections({"absent pub": "", "absent authorized_keys": "", "absent known_hosts": "",
                                            "present hostname": f"{name}\n",
                                            "present host_keys": " ".join(HOST_KEYS[name]) + f" root@{name}\n",
                                            "absent private_key": ""})}


def pair_of(**rounds: ProbeRound) -> tuple[Any, dict[str, FakeNode]]:
    nodes = {name: FakeNode(name, host=SIM.node(name).host, host_key=HOST_KEYS[name]).on(is_probe_round, answer)
             for name, answer in rounds.items()}
    return fake_pair(*nodes.values()), nodes


def test_a_fresh_pair_gets_its_netplan_file_its_keys_and_trust_planned_from_one_round_each() -> None:
    rounds = {name: ProbeRound(answers(name), others=NOT_YET) for name in ("spark-a", "spark-b")}
    pair, nodes = pair_of(**rounds)
    plan = flow.plan_setup(pair, SIM, SetupOptions())
    assert plan.refusals == [] and plan.network.lockouts == []
    for name, fake in nodes.items():
        assert len(fake.calls) == 1 and len(rounds[name].asked) == 1  # one round trip, nothing changed
        writes = [action for change in plan.network.changes if change.node == name for action in change.actions]
        assert [getattr(action, "path", None) for action in writes][:1] == [netplan.NETPLAN_PATH]
        assert writes[0].content == render.netplan_file(SIM, SIM.node(name), "the inventory").content  # type: ignore[union-attr]
    assert plan.host_keys == HOST_KEYS
    assert sorted(change.node for change in plan.key_changes) == ["spark-a", "spark-b"]  # neither has a key yet
    assert "learn spark-b's host keys for 198.19.1.12, 198.19.2.12, spark-b" in [c.summary for c in plan.trust_changes]


def test_a_pair_already_set_up_plans_no_network_change() -> None:
    rounds = {name: ProbeRound(answers(name, configured=True), others=NOT_YET) for name in ("spark-a", "spark-b")}
    plan = flow.plan_setup(pair_of(**rounds)[0], SIM, SetupOptions(skip_ssh=True))
    assert plan.network.changes == [] and plan.refusals == [] and plan.key_changes == []


def test_a_node_without_passwordless_sudo_is_refused_by_name() -> None:
    rounds = {"spark-a": ProbeRound(answers("spark-a"), others=NOT_YET),
              "spark-b": ProbeRound(answers("spark-b", sudo="helper absent\nfull no\n"), others=NOT_YET)}
    plan = flow.plan_setup(pair_of(**rounds)[0], SIM, SetupOptions(skip_ssh=True))
    assert plan.refusals and all(line.startswith("spark-b") for line in plan.refusals) and "sudo" in plan.refusals[0]
    assert {change.node for change in plan.network.changes} <= {"spark-a"}


def test_both_nodes_unreachable_name_both_and_plan_nothing() -> None:
    nodes = [FakeNode(name).on(is_probe_round, ConnectError("no answer (timed out)", node=name))
             for name in ("spark-a", "spark-b")]
    with pytest.raises(ConnectError) as raised:
        flow.plan_setup(fake_pair(*nodes), SIM, SetupOptions())
    assert [line.split(":")[0] for line in raised.value.lines()] == ["spark-a", "spark-b"]
