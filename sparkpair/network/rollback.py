"""Undoing a network apply: the journal's files back, netplan re-applied, the twins as they were."""

from __future__ import annotations

import ipaddress
import json

from sparkpair import apply, boundedjson, probes, transport
from sparkpair.inventory import Node
from sparkpair.network.netplan import APPLY_NETPLAN, JOURNAL
from sparkpair.probes import net
from sparkpair.transport import Root, Shell


def twins_snapshot(node: Node, interfaces: dict[str, net.Interface]) -> str:
    """The twins as they are now (MTU, IPv4 addresses, up or down), as JSON for the journal."""
    return json.dumps({name: {"mtu": i.mtu, "up": i.admin_up, "ipv4": i.ipv4}
                       for name, i in interfaces.items() if name in node.links})


def twin_states(node: Node, snapshot: str) -> list[list[str]]:
    """Each of node's twins in snapshot as the root helper takes it: name, MTU, up or down, IPv4 addresses with
    their prefix; values are re-validated, never trusted (and checked once more by the helper)."""
    states = []
    for name, state in boundedjson.loads(snapshot).items():
        if name not in node.links:
            continue
        addresses = [str(ipaddress.IPv4Interface(a)) for a in state.get("ipv4", [])]
        states.append([name, str(int(state["mtu"])), "up" if state.get("up") else "down", *addresses])
    return states


def snapshot_commands(node: Node, snapshot: str) -> Shell:
    """The root helper's `twin` for each twin (addresses flushed, MTU, addresses, up or down) as one command
    line (stops at the first failure)."""
    return Shell.compose([Root("twin", *state) for state in twin_states(node, snapshot)], " && ")


def _words(state: dict[str, object] | None) -> str:
    """One twin's state in words: `down mtu 1500 no address`, `up mtu 9000 198.19.1.11/24`, or `absent`."""
    if state is None:
        return "absent"
    addresses = state.get("ipv4")
    shown = ",".join(map(str, addresses)) if isinstance(addresses, list) else ""
    return f"{'up' if state.get('up') else 'down'} mtu {int(str(state['mtu']))} {shown or 'no address'}"


def describe_twins(node: Node, snapshot: str) -> str:
    """The twins' state in a snapshot, in words: `enp1s0f1np1 down mtu 1500 no address; ...`."""
    return "; ".join(f"{name} {_words(state)}" for name, state in boundedjson.loads(snapshot).items() if name in node.links)


def _comparable(state: dict[str, object] | None) -> tuple[int, bool, list[str]] | None:
    if state is None:
        return None
    addresses = state.get("ipv4")
    return int(str(state["mtu"])), bool(state.get("up")), sorted(map(str, addresses if isinstance(addresses, list)
                                                                     else []))


def twins_changed(node: Node, snapshot: str, interfaces: dict[str, net.Interface]) -> list[str]:
    """Each of node's twins that is not as snapshot says (MTU, up or down, IPv4 addresses), in words:
    `enp1s0f1np1 is up mtu 9000 198.19.1.11/24, was down mtu 1500 no address`; empty when all are."""
    before, now = boundedjson.loads(snapshot), boundedjson.loads(twins_snapshot(node, interfaces))
    return [f"{name} is {_words(now.get(name))}, was {_words(before.get(name))}" for name in node.links
            if _comparable(now.get(name)) != _comparable(before.get(name))]


def files_changed(connection: transport.Node, journal: apply.Journal) -> list[str]:
    """Each file of an apply's journal that is not as before that apply (its backup's content, or absent)."""
    entries = [(str(entry["path"]), entry.get("backup")) for entry in journal.entries]
    checks = [Shell.compose([Root("differs", journal.stamp, path, "saved" if backup else "absent"),
                             Shell("|| echo {}", index)], " ") for index, (path, backup) in enumerate(entries)]
    if not checks:
        return []
    differing = connection.check(Shell.compose(checks, "; ")).split()
    return [f"{path} {'differs from its backup' if backup else 'is there (it was not)'}"
            for index, (path, backup) in enumerate(entries) if str(index) in differing]


def differences(connection: transport.Node, node: Node, snapshot: str, journal: apply.Journal | None) -> list[str]:
    """What on node is not as before an apply: its journal's files, then its twins (snapshot); empty when
    the node is as before."""
    found = files_changed(connection, journal) if journal is not None else []
    interfaces = probes.gather(connection, [net.INTERFACES]).get(net.INTERFACES)
    if not isinstance(interfaces, dict):
        return [*found, f"its twins could not be read: {interfaces}"]
    return found + twins_changed(node, snapshot, interfaces)


def roll_back(connection: transport.Node, node: Node) -> list[str]:
    """Undo the last network apply on one node: files back, netplan re-applied, twins as they were."""
    journal = apply.read_journal(connection, JOURNAL)
    if journal is None:
        return ["nothing to restore"]
    done = apply.restore(connection, journal)
    connection.check(APPLY_NETPLAN.command)
    done.append("netplan generate && netplan apply")
    if journal.extra.get("twins_before"):
        connection.check(snapshot_commands(node, journal.extra["twins_before"]))
        done.append("twins back to their previous MTU, addresses and link state")
    return done
