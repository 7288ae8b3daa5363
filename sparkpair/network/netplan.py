"""setup-network's planner: netplan for the QSFP twins from probe facts, guarded by `lockout`.

`plan_network` is pure (facts in, changes, refusals or warnings out) so it is tested from captured
probe output; `probe_nodes` gathers those facts from every node in one round trip each (a plan is
per node, so any topology's nodes are planned alike).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from sparkpair import apply, paths, probes, render
from sparkpair.checks import SETUP_NETWORK, Status, judge, links
from sparkpair.inventory import Inventory, Node
from sparkpair.network import lockout
from sparkpair.probes import NodeFacts, ProbeFailure, host, net
from sparkpair.transport import Pair, Root, root

NETPLAN_PATH = paths.NETPLAN_PATH
JOURNAL = "network"
PLAN_PROBES = [net.INTERFACES, net.DEFAULT_ROUTES, net.SSH_SESSION, net.SESSION_ROUTE, net.ROUTES, net.NETPLAN_FILES,
               host.SUDO]
NETPLAN_APPLY = Root("netplan-apply")  # netplan generate && netplan apply, as root
APPLY_NETPLAN = apply.RunCommand(NETPLAN_APPLY)


@dataclass
class NetworkPlan:
    """What setup-network would change on each node, or why it refuses to.

    lockouts: refusals of the lockout guard (bad input: the inventory's subnets; exit 2).
    """

    changes: list[apply.Change] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    lockouts: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def probe_nodes(pair: Pair, extra: Sequence[probes.Probe[Any]] = (),
                beside: Mapping[str, Sequence[probes.Probe[Any]]] | None = None) -> tuple[dict[str, NodeFacts],
                                                                                         dict[str, NodeFacts]]:
    """The facts planning needs (and extra's), and beside them each node's probes in beside (node -> probes,
    kept apart: planning refuses on any failed fact of its own), from both nodes at once, one round trip each."""
    asked = [*PLAN_PROBES, *extra]
    wanted = beside or {}
    found = pair.each(lambda c: probes.gather(c, [*asked, *wanted.get(c.name, [])])).raise_failures()
    planning = {name: NodeFacts({probe: facts[probe] for probe in asked}) for name, facts in found.values.items()}
    others = {name: NodeFacts({probe: facts[probe] for probe in wanted.get(name, [])})
              for name, facts in found.values.items()}
    return planning, others


def wanted_netplan(inventory: Inventory) -> dict[str, str]:
    """Node name -> the netplan file the inventory asks for (rendered; setup-network renders it while the
    connections open, before the probe round's answers are in)."""
    return {node.name: render.netplan_file(inventory, node, "the inventory").content for node in inventory.nodes}


def plan_network(inventory: Inventory, facts: Mapping[str, NodeFacts], replace: bool = False,
                 wanted: Mapping[str, str] | None = None) -> NetworkPlan:
    """Changes that make both nodes' QSFP twins match the inventory (wanted: `wanted_netplan`, rendered
    here when not given); refusals when unsafe."""
    wanted = wanted_netplan(inventory) if wanted is None else wanted
    plan = NetworkPlan()
    for node in inventory.nodes:
        node_facts = facts[node.name]
        refusals = _refusals(inventory, node, node_facts, replace)
        plan.refusals += refusals
        if any(isinstance(value, ProbeFailure) for value in node_facts.values()):
            continue
        found = lockout.guard(node, node_facts[net.INTERFACES], node_facts[net.DEFAULT_ROUTES],
                              node_facts[net.SSH_SESSION], node_facts[net.SESSION_ROUTE], node_facts[net.ROUTES])
        plan.lockouts += found.refusals
        plan.warnings += found.warnings
        if not refusals and not found.refusals:
            plan.changes += _node_changes(inventory, node, node_facts, wanted[node.name])
    return plan


def _refusals(inventory: Inventory, node: Node, facts: NodeFacts, replace: bool) -> list[str]:
    failed = [f"{node.name}: cannot read {value}" for value in facts.values() if isinstance(value, ProbeFailure)]
    if failed:
        return failed
    problems = []
    if not facts[host.SUDO].works:
        problems.append(f"{node.name}: sparkpair cannot act as root there (sudo -n runs neither its root helper nor "
                        f"anything else); fix: install the root helper (sparkpair root-helper > sparkpair-root, copy it "
                        f"there, then: {'; '.join(root.install_commands(inventory.cluster.user))})")
    interfaces = facts[net.INTERFACES]
    for name in node.links:
        if name not in interfaces:
            present = ", ".join(sorted(n for n in interfaces if n.startswith("en"))) or "none"
            problems.append(f"{node.name}: no interface {name} (present: {present}); fix nodes[].links")
    for path, netplan_file in sorted(facts[net.NETPLAN_FILES].items()):
        if not net.is_netplan_path(path):  # never backed up, rewritten or removed (the probe's parser refuses it too)
            problems.append(f"{node.name}: refusing the netplan path {path!r} the node reported: not a plain file "
                            f"under {net.NETPLAN_DIR}")
            continue
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


def _node_changes(inventory: Inventory, node: Node, facts: NodeFacts, wanted: str) -> list[apply.Change]:
    files = facts[net.NETPLAN_FILES]
    current = files.get(NETPLAN_PATH)
    changes = [c for c in _takeovers(node, files) if c]
    ours = apply.write_change(node.name, NETPLAN_PATH, current.content if current else None, wanted,
                              mode=0o600, sudo=True)
    changes += [ours] if ours else []
    drift = live_drift(inventory, node, facts[net.INTERFACES])
    if changes or drift:
        why = "files changed" if changes else "live state differs: " + "; ".join(drift)
        changes.append(apply.Change(node.name, f"netplan generate && netplan apply ({why})", (APPLY_NETPLAN,)))
    return changes


def _takeovers(node: Node, files: dict[str, net.NetplanFile]) -> list[apply.Change | None]:
    """With --replace: other files lose their stanzas for our twins (a file left empty is removed)."""
    changes: list[apply.Change | None] = []
    for path, netplan_file in sorted(files.items()):
        overlap = netplan_file.interfaces & set(node.links)
        if path == NETPLAN_PATH or not overlap:
            continue
        remaining = _without_interfaces(netplan_file.content, set(overlap))
        if remaining is None:
            changes.append(apply.Change(node.name, f"take over {path} (backed up, then removed)",
                                        (apply.RemoveFile(path, sudo=True),), apply.file_diff(path, netplan_file.content, None)))
        else:
            changes.append(apply.write_change(node.name, path, netplan_file.content, remaining, mode=0o600, sudo=True,
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
    """How the kernel state of node's twins differs from the inventory (empty: it matches), as judged by
    doctor's own link checks: their findings that a netplan apply fixes."""
    facts = {node.name: NodeFacts({net.INTERFACES: interfaces})}
    found = judge(inventory, facts, [("links", links.check_links)], links.LIVE_STATE)
    return [f.detail for f in found if f.node == node.name and f.status is not Status.OK and f.fixed_by == SETUP_NETWORK]
