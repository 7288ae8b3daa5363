"""Changing the testbed's shape (shape.py) before `up` brings the new one up.

From one shape to another: every active fault is healed first (a fault of a ring has no meaning on a
pair); the nodes the new shape has not got are stopped and removed (their dockerd, sshd, holder,
namespace, management veth and private files), except their SSH host keys: a node that comes back in
a later shape is the same machine, not a reinstalled one, so what other nodes pinned of it stays true.
The nodes that stay get their QSFP twins back as `up` made them (no addresses, down, MTU 1500: the old
shape's addresses mean nothing in the new one), the bridges of the old cabling leave spark-cable, and
the cable ends the new shape cables on the nodes that stay are plugged in; `up` then makes what is
missing and wires the new plan. The same shape again changes nothing.
"""
from __future__ import annotations

import json
import shutil

from . import faults, network
from .hostexec import CommandError, holder_pid, node_sh, run
from .layout import CABLE_NS, MGMT_BRIDGE, QSFP_TWINS, STATE_DIR, Node
from .lifecycle import stop_node
from .reset import ResetSpec, node_script
from .shape import Shape, every_possible_node, load, nodes_of, record

KEPT_HOST_KEYS = STATE_DIR / "kept-host-keys"  # NODE/: the /etc/ssh of a node the current shape has not got


def remove_node(node: Node) -> None:
    """Stop NODE (engine, daemons, holder) and remove its namespace, management veth and files."""
    stop_node(node)
    if node.netns in network.netns_list():
        run(["ip", "netns", "del", node.netns])
    if network.link_exists(node.mgmt_host_veth):
        try:
            network.ip("link", "del", node.mgmt_host_veth)
        except CommandError:
            pass  # went with its namespace meanwhile
    if (node.dir / "etc-ssh").is_dir():
        KEPT_HOST_KEYS.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.rmtree(KEPT_HOST_KEYS / node.name, ignore_errors=True)
        (node.dir / "etc-ssh").rename(KEPT_HOST_KEYS / node.name)
    shutil.rmtree(node.dir, ignore_errors=True)
    if node.dir.exists():
        raise CommandError(f"could not remove {node.dir} (a mount left behind?); fix: scripts/testbed down, then up")


def bring_back_host_keys(node: Node) -> bool:
    """Give a node that is not made yet the host keys it had in an earlier shape; True when it had some."""
    kept = KEPT_HOST_KEYS / node.name
    if node.dir.exists() or not kept.is_dir():
        return False
    node.dir.mkdir(parents=True)
    kept.rename(node.dir / "etc-ssh")
    return True


def cable_bridges() -> list:
    """Names of the bridges in spark-cable now (none when it does not exist)."""
    if CABLE_NS not in network.netns_list():
        return []
    found = json.loads(network.ip("-j", "link", "show", "type", "bridge", netns=CABLE_NS).stdout or "[]")
    return [entry["ifname"] for entry in found if entry["ifname"] != MGMT_BRIDGE]


def reshape(new: Shape, log) -> bool:
    """Take the testbed from its recorded shape to NEW (see the module docstring); True when it changed."""
    try:
        old: Shape | None = load()
    except CommandError:
        old = None  # an unreadable record: sweep every node the new shape has not got, and rewrite it
    if old == new:
        return False
    healed = faults.heal() if old is not None else []
    if healed:
        log(f"healed before changing the shape: {', '.join(healed)}")
    kept = {node.name for node in nodes_of(new)}
    removed = [node.name for node in every_possible_node()
               if node.name not in kept and (node.dir.exists() or node.netns in network.netns_list())]
    for node in every_possible_node():
        if node.name not in kept:
            remove_node(node)
    fresh_twins = node_script(ResetSpec(interfaces=QSFP_TWINS))
    for node in nodes_of(new):
        if holder_pid(node) is not None:
            node_sh(node, fresh_twins)
    record(new)
    for node in nodes_of(new):
        bring_back_host_keys(node)
    wanted = set(network.current_plan())
    for bridge in cable_bridges():
        if bridge not in wanted:
            network.ip("link", "del", bridge, netns=CABLE_NS)
    for node in nodes_of(new):
        for twin in node.links:
            if CABLE_NS in network.netns_list() and network.link_exists(node.cable_peer(twin), CABLE_NS):
                network.ip("link", "set", node.cable_peer(twin), "up", netns=CABLE_NS)
    log(f"shape {old.label if old else 'unknown'} -> {new.label}" + (f"; removed {', '.join(removed)}" if removed else ""))
    return True
