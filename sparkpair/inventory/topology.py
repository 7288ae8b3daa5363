"""How the nodes are cabled: the links the inventory expects, per topology, and every way they are wrong.

`pair` (two Sparks back-to-back, the default for two nodes): each twin meets the twin of the same name.
`ring` (three Sparks, NVIDIA's Connect Three Sparks): each QSFP port is cabled to one neighbour, both
ends of a cable in a subnet of their own. `switch` (NVIDIA's Multi Sparks through a Switch): one port of
each Spark to a switch whose ports share one layer-2 segment; every node's twin in one subnet per twin,
or all of them in one subnet. In a ring or through a switch an interface meets every interface of
another node in its subnet. Pure: the inventory's records in, `Link`s and one-line problems out.
"""

from __future__ import annotations

import ipaddress
import re
import typing
from dataclasses import dataclass

if typing.TYPE_CHECKING:
    from sparkpair.inventory.schema import Inventory, Node

TOPOLOGIES = ("pair", "ring", "switch")
RING_NODES = 3  # NVIDIA's ring: each Spark has two QSFP ports, one per neighbour
# A Spark's QSFP interface names the physical port it is a twin of: enp1s0f1np1 and enP2p1s0f1np1 are port f1.
_PHYSICAL_PORT = re.compile(r"f([0-9]{1,2})np[0-9]{1,2}$")
# The names a Spark's ConnectX-7 ports carry (ibdev2netdev on DGX OS; shared/reference/realworld/outputs), and
# the form of every ConnectX port name (enP<domain>p<bus>s<slot>f<function>np<port>).
SPARK_PORTS = ("enp1s0f0np0", "enp1s0f1np1", "enP2p1s0f0np0", "enP2p1s0f1np1")
_CONNECTX_PORT = re.compile(r"en[pP][0-9]{1,4}(?:p[0-9]{1,4})?s[0-9]{1,4}f[0-9]{1,2}np[0-9]{1,2}")


def is_port_name(interface: str) -> bool:
    """Whether interface is named as a ConnectX-7 port is (a LAN port, Wi-Fi or a typo is not)."""
    return _CONNECTX_PORT.fullmatch(interface) is not None


def _oddness(interface: str) -> int:
    """0 for a name a Spark's ports carry, 1 for another ConnectX port name, 2 for any other name."""
    return 0 if interface in SPARK_PORTS else 1 if is_port_name(interface) else 2


def blamed(links: list[set[str]], reference: int) -> bool:
    """Whether the nodes' interface names differ by the reference node's typo: the names it has that another node
    lacks are further from a Spark's port names than every name another node has beyond it."""
    mine = links[reference]
    others = [names for index, names in enumerate(links) if index != reference]
    odd_mine = max((_oddness(name) for name in mine if any(name not in names for names in others)), default=0)
    odd_others = max((_oddness(name) for names in others for name in names - mine), default=0)
    return odd_mine > odd_others


@dataclass(frozen=True)
class Link:
    """One link the inventory expects: node_a's interface port_a reaches node_b's port_b in subnet
    (node_a comes before node_b in the inventory)."""

    node_a: str
    port_a: str
    node_b: str
    port_b: str
    subnet: ipaddress.IPv4Network

    def far_end(self, node: str) -> tuple[str, str, str]:
        """(node's own port, the node at the other end, its port) for node, one of the link's two ends."""
        return (self.port_a, self.node_b, self.port_b) if node == self.node_a else (self.port_b, self.node_a, self.port_a)


@dataclass(frozen=True)
class LinkEnd:
    """One expected link seen from one of its nodes: its own port, the node at the other end, that node's
    port and its address there."""

    port: str
    peer: Node
    peer_port: str
    address: str


def link_ends(inventory: Inventory, node: Node) -> list[LinkEnd]:
    """node's expected links (`Inventory.links`), in the order of node's interfaces (a pair: one per twin, to the
    peer's twin of the same name; a ring or a switch: to every interface of another node in the twin's subnet)."""
    ends = []
    for link in inventory.links():
        if node.name in (link.node_a, link.node_b):
            port, peer_name, peer_port = link.far_end(node.name)
            peer = inventory.node(peer_name)
            ends.append(LinkEnd(port, peer, peer_port, str(peer.links[peer_port].ip)))
    order = list(node.links)
    return sorted(ends, key=lambda end: order.index(end.port))


def ring_routes(inventory: Inventory, node: Node) -> dict[str, list[str]]:
    """node's host routes on a ring: interface -> the /32 addresses it reaches over its cable without a subnet
    of its own (the neighbour's addresses on the neighbour's other cable, each over the twin of the same half).
    In a ring of three every node is every other's neighbour, so each address of every node is one cable away;
    with these scope-link routes a node's MPI, NCCL and Gloo reach any address another node offers (they
    publish all of them) instead of sending it out of the default route. Empty for a pair and a switch."""
    if inventory.topology != "ring":
        return {}
    ends = link_ends(inventory, node)
    routes: dict[str, list[str]] = {}
    for end in ends:
        toward_me = {other.peer_port for other in ends if other.peer.name == end.peer.name}
        for port, address in end.peer.links.items():
            if port not in toward_me and same_half(port, end.port):
                routes.setdefault(end.port, []).append(f"{address.ip}/32")
    return {port: sorted(set(found)) for port, found in routes.items()}


def physical_port(interface: str) -> str | None:
    """The physical QSFP port a Spark interface belongs to (`f1` for enp1s0f1np1 and enP2p1s0f1np1); None for a
    name that does not say (then each interface is taken as a port of its own)."""
    found = _PHYSICAL_PORT.search(interface)
    return f"f{found.group(1)}" if found else None


def same_port(first: str, second: str) -> bool:
    """Whether two Spark interfaces are twins of one physical QSFP port (enp1s0f1np1 and enP2p1s0f1np1 are);
    an interface whose name does not say its port is only the same port as itself."""
    port = physical_port(first)
    return first == second or (port is not None and port == physical_port(second))


def same_half(first: str, second: str) -> bool:
    """Whether two Spark interfaces are the same half of their ports (enp1s0f0np0 and enp1s0f1np1 are, and
    enP2p1s0f0np0 and enP2p1s0f1np1; enp1s0f0np0 and enP2p1s0f1np1 are not)."""
    return _PHYSICAL_PORT.sub("", first) == _PHYSICAL_PORT.sub("", second)


def links(inventory: Inventory) -> list[Link]:
    """Every link the inventory expects, in inventory order: a pair's same-named twins; in a ring or through a
    switch, every two interfaces of different nodes that share a subnet."""
    nodes = inventory.nodes
    if inventory.topology == "pair":
        head, worker = nodes[0], nodes[-1]
        return [Link(head.name, twin, worker.name, twin, address.network) for twin, address in head.links.items()
                if twin in worker.links and worker.links[twin].network == address.network]
    members = _subnet_members(nodes)
    found = []
    for index, node in enumerate(nodes):
        for port, address in node.links.items():
            found += [Link(node.name, port, nodes[other].name, far_port, address.network)
                      for other, far_port in members[address.network] if other > index]
    return found


def neighbours(inventory: Inventory, node: Node) -> list[Node]:
    """The nodes node shares a link with, in inventory order."""
    names = {end for link in inventory.links() for end in (link.node_a, link.node_b)
             if node.name in (link.node_a, link.node_b)} - {node.name}
    return [other for other in inventory.nodes if other.name in names]


def _subnet_members(nodes: list[Node]) -> dict[ipaddress.IPv4Network, list[tuple[int, str]]]:
    """Subnet -> (node index, interface) of every address in it, in inventory order."""
    members: dict[ipaddress.IPv4Network, list[tuple[int, str]]] = {}
    for index, node in enumerate(nodes):
        for port, address in node.links.items():
            members.setdefault(address.network, []).append((index, port))
    return members


def node_count_problems(topology: str, count: int) -> list[str]:
    """The line refusing `count` nodes for topology; empty when the count fits it."""
    if topology == "pair" and count != 2:
        return [f"topology: got 'pair' (the default) with {count} nodes; expected 'ring' (three Sparks cabled in a "
                "ring) or 'switch' (one port of each Spark to a switch) for more than two nodes"]
    if topology == "ring" and count != RING_NODES:
        other = "'pair' for two Sparks back-to-back" if count == 2 else "'switch' for more Sparks"
        return [f"topology: got 'ring' with {count} nodes; expected {RING_NODES} nodes in a ring (each Spark's two "
                f"QSFP ports cabled to its two neighbours), or {other}"]
    return []


def ring_problems(inventory: Inventory) -> list[str]:
    """A ring's cabling problems: each cable a subnet of its own, each port cabled to one neighbour, each node's
    two ports to its two neighbours."""
    nodes = inventory.nodes
    members = _subnet_members(nodes)
    problems = []
    for subnet, ends in members.items():
        node_indexes = sorted({index for index, _ in ends})
        if len(node_indexes) == 1:
            index, port = ends[0]
            problems.append(f"nodes[{index}].links.{port}: got {nodes[index].links[port]}, and no other node has an "
                            f"address in {subnet}; expected the neighbour at the other end of this cable in the same "
                            "subnet")
        for index in node_indexes[2:]:
            port = next(port for i, port in ends if i == index)
            shared = " and ".join(nodes[i].name for i in node_indexes[:2])
            problems.append(f"nodes[{index}].links.{port}: got {nodes[index].links[port]}, in {subnet} with {shared} "
                            "too; expected a subnet of its own for each cable (only its two ends in it), or topology: switch "
                            "when a switch joins them")
    problems += _overlap_problems(inventory)
    for index, node in enumerate(nodes):
        problems += _port_problems(index, node, members, nodes)
    for first in range(len(nodes)):
        for second in range(first + 1, len(nodes)):
            if not any(i == second for address in nodes[first].links.values() for i, _ in members[address.network]):
                problems.append(f"nodes[{second}].links: no address shares a subnet with {nodes[first].name} "
                                f"(nodes[{first}]); expected a cable between them: in a ring each Spark's two ports go "
                                "to its two neighbours, both ends of a cable in one subnet")
    return problems


def _port_problems(index: int, node: Node, members: dict[ipaddress.IPv4Network, list[tuple[int, str]]],
                   nodes: list[Node]) -> list[str]:
    """A ring node's ports: a port's twins reach one neighbour; two ports never reach the same one."""
    reached: dict[str, tuple[str, str]] = {}  # physical port -> (first interface, the neighbour it reaches)
    problems = []
    for port, address in node.links.items():
        others = [nodes[i].name for i, _ in members[address.network] if i != index]
        physical = physical_port(port)
        if len(others) != 1 or physical is None:
            continue
        twin, neighbour = reached.setdefault(physical, (port, others[0]))
        if neighbour != others[0]:
            problems.append(f"nodes[{index}].links.{port}: reaches {others[0]}, but {twin} on the same QSFP port "
                            f"{physical} reaches {neighbour}; expected both twins of a port on one cable (one "
                            "neighbour): fix the addresses")
    by_neighbour: dict[str, list[str]] = {}
    for physical, (_, neighbour) in reached.items():
        by_neighbour.setdefault(neighbour, []).append(physical)
    problems += [f"nodes[{index}].links: ports {' and '.join(ports)} both reach {neighbour}; expected each QSFP port "
                 "cabled to a different neighbour (port f0 to one, port f1 to the other)"
                 for neighbour, ports in by_neighbour.items() if len(ports) > 1]
    return problems


def switch_problems(inventory: Inventory) -> list[str]:
    """Through a switch: every node has the switch port's twins, each twin in one subnet on every node."""
    head, *others = inventory.nodes
    names = [set(node.links) for node in inventory.nodes]
    if any(one != names[0] for one in names) and blamed(names, 0):   # the head's own typo: blame the head
        most = max((one for one in names[1:]), key=lambda one: sum(other == one for other in names[1:]))
        return [f"nodes[0].links: got {', '.join(sorted(names[0]))}; expected the interfaces every other node has: "
                f"{', '.join(sorted(most))} (cable the same port of every Spark to the switch)"]
    problems = []
    for index, node in enumerate(others, start=1):
        if set(node.links) != set(head.links):
            problems.append(f"nodes[{index}].links: got {', '.join(sorted(node.links))}; expected the same interfaces "
                            f"as nodes[0] ({head.name}): {', '.join(sorted(head.links))} (cable the same port of "
                            "every Spark to the switch)")
            continue
        problems += [f"nodes[{index}].links.{twin}: got {address}, outside {head.name}'s subnet "
                     f"{head.links[twin].network}; expected every node's {twin} in one subnet (the switch joins "
                     "them in one layer-2 segment), or every address in one subnet"
                     for twin, address in node.links.items() if address.network != head.links[twin].network]
    return problems + _overlap_problems(inventory)


def _overlap_problems(inventory: Inventory) -> list[str]:
    """Two different subnets that overlap (a /16 holding a /24): the kernel would route one through the other.
    Sorted once, so a long inventory costs n log n, not n squared."""
    first: dict[ipaddress.IPv4Network, str] = {}
    for index, node in enumerate(inventory.nodes):
        for port, address in node.links.items():
            first.setdefault(address.network, f"nodes[{index}].links.{port}")
    problems = []
    outer: ipaddress.IPv4Network | None = None
    for subnet in sorted(first, key=lambda net: (net.network_address, net.prefixlen)):
        if outer is not None and subnet.network_address <= outer.broadcast_address:
            problems.append(f"{first[subnet]}: got a subnet {subnet} that overlaps {first[outer]}'s {outer}; expected "
                            "subnets that are equal or apart")
        elif outer is None or subnet.broadcast_address > outer.broadcast_address:
            outer = subnet
    return problems
