"""Undoing a network apply: the journal's files back, netplan re-applied, the twins as they were."""

from __future__ import annotations

import ipaddress
import json

from sparkpair import apply
from sparkpair.inventory import Node
from sparkpair.network.plan import APPLY_NETPLAN, JOURNAL
from sparkpair.probes import net
from sparkpair.transport import NodeConnection, Shell


def twins_snapshot(node: Node, interfaces: dict[str, net.Interface]) -> str:
    """The twins as they are now (MTU, IPv4 addresses, up or down), as JSON for the journal."""
    return json.dumps({name: {"mtu": i.mtu, "up": i.admin_up, "ipv4": i.ipv4}
                       for name, i in interfaces.items() if name in node.links})


def twin_commands(node: Node, snapshot: str) -> list[Shell]:
    """Commands that put node's twins back as snapshot says, in order; values are re-validated, never trusted."""
    commands = []
    for name, state in json.loads(snapshot).items():
        if name not in node.links:
            continue
        addresses = [str(ipaddress.IPv4Interface(a)) for a in state.get("ipv4", [])]
        commands.append(Shell("ip addr flush dev {} scope global", name))
        commands.append(Shell("ip link set dev {} mtu {}", name, int(state["mtu"])))
        commands += [Shell("ip addr add {} dev {}", address, name) for address in addresses]
        commands.append(Shell("ip link set dev {} {}", name, "up" if state.get("up") else "down"))
    return commands


def snapshot_commands(node: Node, snapshot: str) -> Shell:
    """twin_commands as one command line (stops at the first failure)."""
    return Shell.compose(twin_commands(node, snapshot), " && ")


def describe_twins(node: Node, snapshot: str) -> str:
    """The twins' state in a snapshot, in words: `enp1s0f1np1 down mtu 1500 no address; ...`."""
    parts = []
    for name, state in json.loads(snapshot).items():
        if name in node.links:
            parts.append(f"{name} {'up' if state.get('up') else 'down'} mtu {int(state['mtu'])} "
                         f"{','.join(state.get('ipv4', [])) or 'no address'}")
    return "; ".join(parts)


def roll_back(connection: NodeConnection, node: Node) -> list[str]:
    """Undo the last network apply on one node: files back, netplan re-applied, twins as they were."""
    journal = apply.read_journal(connection, JOURNAL)
    if journal is None:
        return ["nothing to restore"]
    done = apply.restore(connection, journal)
    connection.check(APPLY_NETPLAN.command, sudo=True)
    done.append("netplan generate && netplan apply")
    if journal.extra.get("twins_before"):
        connection.check(snapshot_commands(node, journal.extra["twins_before"]), sudo=True)
        done.append("twins back to their previous MTU, addresses and link state")
    return done
