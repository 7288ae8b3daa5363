"""links.crossed, the judge: which node's interface answered for the address each twin should reach.

A pair's twin must meet the peer's twin of the same name; a ring's port its neighbour's port (a cable that
reaches the other neighbour, or the right neighbour on its other port, is named by the ports to swap on the
node where the two cables are crossed). Through a switch there is no cable between nodes to cross. The facts
are the crossing probes `links.crossing_probe` makes; the checks module `links` calls this judge.
"""

from __future__ import annotations

from collections.abc import Iterable

from sparkpair.checks import Facts, Finding, fail, ok, skip
from sparkpair.inventory import Inventory, Node
from sparkpair.inventory.topology import LinkEnd, link_ends, same_half, same_port
from sparkpair.probes import NodeFacts, ProbeFailure, net


def interfaces_of(facts: Facts, name: str) -> dict[str, net.Interface]:
    """Node name's interfaces as probed ({} when the probe failed or did not run)."""
    value = facts.fact(name, net.INTERFACES)
    return {} if isinstance(value, ProbeFailure) or value is None else value


def _answers(facts: Facts, name: str) -> dict[tuple[str, str], str]:
    """(interface, address) -> the MAC that answered for it on node name, from every crossing probe it ran."""
    found: dict[tuple[str, str], str] = {}
    for probe, value in facts.nodes.get(name, NodeFacts()).items():
        if probe.kind == "crossing" and isinstance(value, dict):
            found.update(value)
    return found


def judge_crossing(facts: Facts) -> Iterable[Finding]:
    """Each twin's neighbour answering for the address it should reach must be the interface the inventory
    pairs it with (a pair: the peer's twin of the same name; a ring: its neighbour's port). Through a switch
    there is no cable between nodes to cross."""
    inventory = facts.inventory
    if inventory.topology == "switch":
        return
    owners = {i.mac: (name, port) for name in facts.reachable() for port, i in interfaces_of(facts, name).items()}
    for node in inventory.nodes:
        answers = _answers(facts, node.name)
        ends = link_ends(inventory, node)
        expected: dict[str, LinkEnd] = {}
        for end in ends:
            expected.setdefault(end.port, end)
        for twin, end in expected.items():
            mac = answers.get((twin, end.address))
            owner = owners.get(mac) if mac else None
            if mac is None or (owner is not None and owner[0] not in (end.peer.name, node.name)):
                heard = owner or next((owners[m] for (dev, _), m in answers.items() if dev == twin and m in owners
                                       and owners[m][0] not in (end.peer.name, node.name)), None)
                yield (_ring_crossed(inventory, node, end, heard[0], ends) if heard else
                       skip("links.crossed", node.name, f"{twin}: no answer from {end.peer.name} (see path.ping)"))
            elif owner == (end.peer.name, end.peer_port):
                yield ok("links.crossed", node.name, f"{twin} is cabled to {end.peer.name}'s {end.peer_port}")
            elif owner is not None and inventory.topology == "ring" and not same_port(owner[1], end.peer_port):
                yield _crossed_at_peer(inventory, node, end, owner[1])
            else:
                reached = owner[1] if owner and owner[0] == end.peer.name else f"unknown interface {mac}"
                yield fail("links.crossed", node.name,
                           f"{twin} reaches {end.peer.name}'s {reached}, not its {end.peer_port}: cables crossed "
                           "between twins",
                           "swap the QSFP cables (or the interface names in nodes[].links) so twin meets twin")


def _crossed_at_peer(inventory: Inventory, node: Node, end: LinkEnd, reached: str) -> Finding:
    """links.crossed for a twin whose cable reaches the right neighbour on that neighbour's other QSFP port: the
    two cables are crossed at the neighbour, so the finding names the neighbour's ports and the same fix the
    neighbour's own finding gives."""
    index = inventory.nodes.index(end.peer)
    return fail("links.crossed", node.name, f"{end.port} reaches {end.peer.name}'s {reached}, not its "
                                            f"{end.peer_port}: the cables on {end.peer.name}'s {end.peer_port} and "
                                            f"{reached} are crossed",
                f"swap the QSFP cables on {end.peer.name}'s {end.peer_port} and {reached}, or swap their addresses "
                f"in nodes[{index}].links")


def _ring_crossed(inventory: Inventory, node: Node, end: LinkEnd, reached: str, ends: list[LinkEnd]) -> Finding:
    """links.crossed for a twin whose cable reaches another node than the one its address expects."""
    index = inventory.nodes.index(node)
    others = [e.port for e in ends if e.peer.name == reached and e.port != end.port]
    other = next((port for port in others if same_half(port, end.port)), others[0] if others else None)
    if other is None:
        return fail("links.crossed", node.name, f"{end.port} reaches {reached}, expected {end.peer.name}",
                    f"cable {node.name}'s {end.port} to {end.peer.name}, or change the addresses in "
                    f"nodes[{index}].links")
    return fail("links.crossed", node.name, f"{end.port} reaches {reached}, expected {end.peer.name}: the cables on "
                                            f"{node.name}'s {end.port} and {other} are crossed",
                f"swap the QSFP cables on {node.name}'s {end.port} and {other}, or swap their addresses in "
                f"nodes[{index}].links")
