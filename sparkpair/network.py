"""setup-network: netplan for the QSFP twins, planned from probes, applied, verified, rolled back.

`plan_network` is pure (facts in, changes or refusals out) so it is tested from captured probe
output. Applying goes through the generic `steps` executor; verification probes both nodes until
the link works or a deadline passes, and a failed verification restores both nodes.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from sparkpair import probes, render, steps
from sparkpair.inventory import Inventory, Node
from sparkpair.probes import ProbeFailure, host, net
from sparkpair.transport import NodeConnection, Pair, Shell

NETPLAN_PATH = f"/etc/netplan/{render.NETPLAN_FILE}"
JOURNAL = "network"
PLAN_PROBES = [net.INTERFACES, net.DEFAULT_ROUTES, net.SSH_SESSION, net.NETPLAN_FILES, host.SUDO]
APPLY_NETPLAN = steps.RunCommand(Shell("netplan generate && netplan apply"), sudo=True)


@dataclass
class NetworkPlan:
    """What setup-network would change on each node, or why it refuses to."""

    changes: list[steps.Change] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)


def probe_nodes(pair: Pair, extra: Sequence[probes.Probe[Any]] = ()) -> dict[str, dict[str, Any]]:
    """The facts planning needs (and extra's), from both nodes at once (one round trip each)."""
    return probes.gather_pair(pair, [*PLAN_PROBES, *extra])


def plan_network(inventory: Inventory, facts: dict[str, dict[str, Any]], replace: bool = False) -> NetworkPlan:
    """Changes that make both nodes' QSFP twins match the inventory; refusals when unsafe."""
    plan = NetworkPlan()
    for node in inventory.nodes:
        node_facts = facts[node.name]
        refusals = _refusals(inventory, node, node_facts, replace)
        if refusals:
            plan.refusals += refusals
            continue
        plan.changes += _node_changes(inventory, node, node_facts)
    return plan


def _refusals(inventory: Inventory, node: Node, facts: dict[str, Any], replace: bool) -> list[str]:
    failed = [f"{node.name}: cannot read {value}" for value in facts.values() if isinstance(value, ProbeFailure)]
    if failed:
        return failed
    problems = []
    if not facts["sudo"]:
        problems.append(f"{node.name}: sudo asks for a password; sparkpair needs non-interactive sudo for netplan "
                        f"(fix: echo '{inventory.cluster.user} ALL=(ALL) NOPASSWD:ALL' | sudo tee "
                        "/etc/sudoers.d/sparkpair)")
    interfaces = facts["interfaces"]
    for name in node.links:
        if name not in interfaces:
            present = ", ".join(sorted(n for n in interfaces if n.startswith("en"))) or "none"
            problems.append(f"{node.name}: no interface {name} (present: {present}); fix nodes[].links")
    problems += _lockout_problems(node, interfaces, facts["default_routes"], facts["ssh_session"])
    for path, netplan_file in sorted(facts["netplan_files"].items()):
        overlap = sorted(netplan_file.interfaces & set(node.links))
        if path == NETPLAN_PATH or not overlap:
            continue
        indirect = sorted(set(overlap) & net.netplan_indirect(netplan_file.content))
        if not replace:
            problems.append(f"{node.name}: {path} already configures {', '.join(overlap)}; refusing to fight it "
                            "(fix: remove those stanzas, or rerun with --replace to take them over, keeping a backup)")
        elif indirect:
            problems.append(f"{node.name}: {path} configures {', '.join(indirect)} through match: name:, a bond's or "
                            "bridge's interfaces:, a vlan's link: or wifis, which --replace cannot take over "
                            f"(it only removes stanzas keyed by the interface name); fix: edit {path} by hand")
    return problems


def _lockout_problems(node: Node, interfaces: dict[str, net.Interface], routes: list[str], session: str) -> list[str]:
    """The interface carrying this SSH session or the default route must never be touched."""
    problems = []
    session_interface = next((i.name for i in interfaces.values() if any(a.ip == session for a in i.addresses)), "")
    for name in node.links:
        if name == session_interface:
            problems.append(f"{node.name}: {name} carries this SSH session ({session}); refusing to reconfigure it "
                            "(lockout guard: fix nodes[].links or nodes[].host)")
        if name in routes:
            problems.append(f"{node.name}: {name} carries the default route; refusing to reconfigure it "
                            "(lockout guard: fix nodes[].links)")
    if session:
        for name, address in node.links.items():
            if ipaddress.ip_address(session) in address.network:
                problems.append(f"{node.name}: {name}'s subnet {address.network} contains the management address "
                                f"{session}; applying it would reroute this SSH session (fix: another subnet)")
    return problems


def _node_changes(inventory: Inventory, node: Node, facts: dict[str, Any]) -> list[steps.Change]:
    wanted = render.netplan_file(inventory, node, "the inventory").content
    files = facts["netplan_files"]
    current = files.get(NETPLAN_PATH)
    changes = [c for c in _takeovers(node, files) if c]
    ours = steps.write_change(node.name, NETPLAN_PATH, current.content if current else None, wanted,
                              mode=0o600, sudo=True)
    changes += [ours] if ours else []
    drift = live_drift(inventory, node, facts["interfaces"])
    if changes or drift:
        why = "files changed" if changes else "live state differs: " + "; ".join(drift)
        changes.append(steps.Change(node.name, f"netplan generate && netplan apply ({why})", (APPLY_NETPLAN,)))
    return changes


def _takeovers(node: Node, files: dict[str, net.NetplanFile]) -> list[steps.Change | None]:
    """With --replace: other files lose their stanzas for our twins (a file left empty is removed)."""
    changes: list[steps.Change | None] = []
    for path, netplan_file in sorted(files.items()):
        overlap = netplan_file.interfaces & set(node.links)
        if path == NETPLAN_PATH or not overlap:
            continue
        remaining = _without_interfaces(netplan_file.content, overlap)
        if remaining is None:
            changes.append(steps.Change(node.name, f"take over {path} (backed up, then removed)",
                                        (steps.RemoveFile(path, sudo=True),), steps.file_diff(path, netplan_file.content, None)))
        else:
            changes.append(steps.write_change(node.name, path, netplan_file.content, remaining, mode=0o600, sudo=True,
                                              summary=f"take {', '.join(sorted(overlap))} out of {path} (backed up)"))
    return changes


def _without_interfaces(content: str, names: set[str]) -> str | None:
    """The netplan document without stanzas for names; None when nothing else is left."""
    document = yaml.safe_load(content) or {}
    network = document.get("network", {})
    for kind in ("ethernets", "bonds", "bridges", "vlans"):
        section = network.get(kind)
        if isinstance(section, dict):
            for name in names & set(section):
                del section[name]
            if not section:
                del network[kind]
    if not set(network) - {"version", "renderer"}:
        return None
    return "# Edited by sparkpair setup-network --replace (original backed up)\n" + yaml.safe_dump(document, sort_keys=False)


def live_drift(inventory: Inventory, node: Node, interfaces: dict[str, net.Interface]) -> list[str]:
    """How the kernel state of the twins differs from the inventory (empty: it matches)."""
    drift = []
    for name, address in node.links.items():
        interface = interfaces.get(name)
        if interface is None:
            drift.append(f"{name} missing")
            continue
        if not interface.admin_up:
            drift.append(f"{name} is down")
        if interface.mtu != inventory.cluster.mtu:
            drift.append(f"{name} mtu {interface.mtu}")
        if str(address) not in interface.ipv4:
            drift.append(f"{name} lacks {address}")
        extra = [a for a in interface.ipv4 if a != str(address)]
        if extra:
            drift.append(f"{name} also has {', '.join(extra)}")
    return drift


def verification_probes(inventory: Inventory, node: Node) -> list[probes.Probe[Any]]:
    """Interfaces plus, for each twin, a ping and a full-MTU don't-fragment ping to the peer's twin."""
    peer = inventory.peer_of(node)
    checks: list[probes.Probe[Any]] = [net.INTERFACES, net.crossing({n: str(peer.links[n].ip) for n in node.links})]
    for name in node.links:
        target = str(peer.links[name].ip)
        checks += [net.ping(name, target), net.ping(name, target, inventory.cluster.mtu - 28)]
    return checks


def link_problems(inventory: Inventory, node: Node, facts: dict[str, Any],
                  peer_facts: dict[str, Any] | None = None) -> list[str]:
    """What is wrong with node's side of the link, from verification_probes facts of both nodes."""
    if isinstance(facts.get("interfaces"), ProbeFailure):
        return [f"{node.name}: {facts['interfaces']}"]
    problems = [f"{node.name}: {d}" for d in live_drift(inventory, node, facts["interfaces"])]
    for name in node.links:
        if name in facts["interfaces"] and not facts["interfaces"][name].carrier:
            problems.append(f"{node.name}: {name} has no carrier (cable?)")
    problems += _crossed(inventory, node, facts, peer_facts or {})
    for key, value in facts.items():
        if key.startswith("ping") and (isinstance(value, ProbeFailure) or not value.ok):
            problems.append(f"{node.name}: {key.replace('df', 'mtu payload ')} failed"
                            + (f" ({value})" if isinstance(value, ProbeFailure) else
                               f" ({value.received}/{value.sent} replies)"))
    return problems


def _crossed(inventory: Inventory, node: Node, facts: dict[str, Any], peer_facts: dict[str, Any]) -> list[str]:
    """Twins whose neighbour for the peer's same-named twin address is another peer interface."""
    neighbors, peer_interfaces = facts.get("neighbors"), peer_facts.get("interfaces")
    if not isinstance(neighbors, dict) or not isinstance(peer_interfaces, dict):
        return []
    peer = inventory.peer_of(node)
    owner = {interface.mac: name for name, interface in peer_interfaces.items()}
    problems = []
    for twin in node.links:
        mac = neighbors.get((twin, str(peer.links[twin].ip)))
        if mac is not None and owner.get(mac, twin) != twin:
            problems.append(f"{node.name}: {twin} is cabled to {peer.name}'s {owner[mac]} (cables crossed)")
    return problems


def verify_link(pair: Pair, inventory: Inventory, deadline_s: float = 20.0) -> list[str]:
    """Poll both nodes until the link verifies or the deadline passes; the remaining problems."""
    end = time.monotonic() + deadline_s
    while True:
        results = pair.each(lambda c: probes.gather(c, verification_probes(inventory, inventory.node(c.name))))
        problems = []
        for name, facts in results.items():
            peer_facts = results[inventory.peer_of(inventory.node(name)).name]
            problems += ([f"{name}: {facts}"] if isinstance(facts, BaseException)
                         else link_problems(inventory, inventory.node(name), facts,
                                            peer_facts if isinstance(peer_facts, dict) else None))
        if not problems or time.monotonic() >= end:
            return problems
        time.sleep(1.0)


def twins_snapshot(node: Node, interfaces: dict[str, net.Interface]) -> str:
    """The twins as they are now (MTU, IPv4 addresses, up or down), as JSON for the journal."""
    return json.dumps({name: {"mtu": i.mtu, "up": i.admin_up, "ipv4": i.ipv4}
                       for name, i in interfaces.items() if name in node.links})


def snapshot_commands(node: Node, snapshot: str) -> Shell:
    """Commands that put node's twins back as snapshot says; values are re-validated, never trusted."""
    commands = []
    for name, state in json.loads(snapshot).items():
        if name not in node.links:
            continue
        addresses = [str(ipaddress.IPv4Interface(a)) for a in state.get("ipv4", [])]
        commands.append(Shell("ip addr flush dev {} scope global && ip link set dev {} mtu {}",
                              name, name, int(state["mtu"])))
        commands += [Shell("ip addr add {} dev {}", address, name) for address in addresses]
        commands.append(Shell("ip link set dev {} {}", name, "up" if state.get("up") else "down"))
    return Shell.compose(commands, " && ")


def roll_back(connection: NodeConnection, node: Node) -> list[str]:
    """Undo the last network apply on one node: files back, netplan re-applied, twins as they were."""
    journal = steps.read_journal(connection, JOURNAL)
    if journal is None:
        return ["nothing to restore"]
    done = steps.restore(connection, journal)
    connection.check(APPLY_NETPLAN.command, sudo=True)
    done.append("netplan generate && netplan apply")
    if journal.extra.get("twins_before"):
        connection.check(snapshot_commands(node, journal.extra["twins_before"]), sudo=True)
        done.append("twins back to their previous MTU, addresses and link state")
    return done


def node_state(connection: NodeConnection, node: Node) -> str:
    """One line describing a node's twins now (for reports after a failure)."""
    facts = probes.gather(connection, [net.INTERFACES])
    interfaces = facts["interfaces"]
    if isinstance(interfaces, ProbeFailure):
        return str(interfaces)
    parts = []
    for name in node.links:
        interface = interfaces.get(name)
        parts.append(f"{name} absent" if interface is None else
                     f"{name} {'up' if interface.admin_up else 'down'} mtu {interface.mtu} "
                     f"{','.join(interface.ipv4) or 'no address'}")
    return "; ".join(parts)
