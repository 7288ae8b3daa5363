"""strand-on-apply: the node's next `netplan apply` also cuts its management port, as a bad netplan
file would, so that the node can only come back by itself (whatever re-applies its previous netplan
files on the node: nothing from outside can reach it).

The fault leaves a trigger in the node's private /run that the netplan stand-in takes away on its
next apply (standins/netplan); heal removes a trigger still waiting, and brings the management port
back as `up` made it if an apply cut it and nothing brought it back.
"""
from __future__ import annotations

from .hostexec import node_run
from .layout import Node
from .network import ensure_mgmt_link

TRIGGER = "/run/sparkpair-testbed/strand-on-apply"  # read by standins/netplan (STRAND_TRIGGER)


def strand_apply(node: Node, options) -> dict:
    """Arm the node's next `netplan apply` to cut its management port."""
    node_run(node, ["touch", TRIGGER])
    return {}


def strand_heal(node: Node, data, others) -> None:
    """Disarm a trigger not yet taken; the management port as `up` made it (idempotent)."""
    node_run(node, ["rm", "-f", TRIGGER])
    ensure_mgmt_link(node)
