"""Faults of the larger shapes (shape.py): a crossed ring cable and a switch port that is down.

`crossed-ring-cable` on NODE (a ring): the cables on NODE's ports f0 and f1 are swapped, so each of
its ports reaches the other neighbour (spark-b's enp1s0f0np0 answers spark-a's cable, not spark-c's).
`switch-port-down` on NODE (a switch): NODE's switch port loses its link (both twins' cable ends down),
as a switch port that is unplugged or shut. Both are real kernel changes in spark-cable, healed by `heal`.
"""
from __future__ import annotations

from .faults_net import link_heal, pull
from .hostexec import CommandError
from .layout import Node
from .network import apply_cabling, crossed_ring_nodes
from .shape import load


def require_topology(fault: str, topology: str, shape_option: str) -> None:
    """Raise CommandError naming FAULT and the `up` that makes TOPOLOGY when the testbed runs another shape."""
    running = load()
    if running.topology != topology:
        raise CommandError(f"fault {fault}: the testbed runs the {running.label} shape; this fault needs a "
                           f"{topology} (scripts/testbed up {shape_option})")


def crossed_ring_apply(node: Node, options) -> dict:
    """Swap the cables on NODE's two ports (the other crossings stay); returns the node it crossed."""
    require_topology("crossed-ring-cable", "ring", "--nodes 3 --topology ring")
    apply_cabling(crossed_at=crossed_ring_nodes() | {node.name})
    return {"crossed_at": node.name}


def crossed_ring_heal(node: Node, data, others) -> None:
    """Put NODE's two cables back on their own ports (other crossed nodes stay crossed)."""
    apply_cabling(crossed_at=crossed_ring_nodes() - {data["crossed_at"]})


def switch_port_down_apply(node: Node, options) -> dict:
    """NODE's switch port goes down: the cable ends of every twin NODE has on the switch lose their link."""
    require_topology("switch-port-down", "switch", "--nodes 4 --topology switch")
    return pull([node.cable_peer(twin) for twin in node.links])


def switch_port_down_heal(node: Node, data, others) -> None:
    """Bring the switch port back up (unless another active fault keeps a cable end down)."""
    link_heal(node, data, others)
