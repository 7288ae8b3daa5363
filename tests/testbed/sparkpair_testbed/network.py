"""The wires: namespaces, the management bridge, and the QSFP twins with their cable.

    root namespace (operator)         spark-a / spark-b               spark-cable
    spk-mgmt 198.18.0.1/24 --veth-- enP7s7 198.18.0.1x/24
                                      enp1s0f1np1   --veth-- a-enp1s0f1np1 --+ cable-p1 +-- b-enp1s0f1np1 ...
                                      enP2p1s0f1np1 --veth-- a-enP2p1s0f1np1 + cable-p2 +-- b-enP2p1s0f1np1 ...
                                      enp1s0f0np0   --veth-- a-enp1s0f0np0   (down: no cable)
                                      enP2p1s0f0np0 --veth-- a-enP2p1s0f0np0 (down: no cable)

A node-side twin has carrier only while its cable-side peer is up, so
`ip link set CABLE_PEER down` in spark-cable is a real unplug: the node keeps
its admin state but loses carrier.

In a ring or through a switch (shape.py) the same namespace holds that shape's bridges instead:
one per twin of each ring cable (cable-ab-p1 joins a-enp1s0f0np0 and b-enp1s0f1np1), or one per
twin of the switch (switch-p1 joins every node's enp1s0f1np1). A twin is cabled when the node has
an address for it (Node.links); the others stay unplugged.
"""
from __future__ import annotations

import json
import shutil
import time

from .hostexec import CommandError, run, succeeds
from .layout import (
    CABLE_MTU,
    CABLE_NS,
    CABLED_TWINS,
    MGMT_BRIDGE,
    MGMT_GATEWAY,
    MGMT_IFACE,
    MGMT_PREFIX,
    NODES,
    QSFP_TWINS,
    Node,
)
from .shape import PORT_F0, cable_plan, every_possible_node, load

CABLE_BRIDGES = {"enp1s0f1np1": "cable-p1", "enP2p1s0f1np1": "cable-p2"}


def ip(*args: str, netns: str | None = None, check=True):
    """Run `ip [-n NETNS] ARGS`."""
    prefix = ["ip", "-n", netns] if netns else ["ip"]
    return run([*prefix, *args], check=check)


def link_exists(name: str, netns: str | None = None) -> bool:
    """True when link NAME exists (in NETNS, or in the root namespace)."""
    prefix = ["ip", "-n", netns] if netns else ["ip"]
    return succeeds([*prefix, "link", "show", "dev", name])


def links(netns: str | None = None) -> list:
    """All links of a namespace, as `ip -j link` reports them."""
    prefix = ["ip", "-n", netns] if netns else ["ip"]
    return json.loads(run([*prefix, "-j", "link", "show"]).stdout or "[]")


def netns_list() -> list:
    """Names of the named network namespaces."""
    return [entry["name"] for entry in json.loads(run(["ip", "-j", "netns", "list"]).stdout or "[]")]


def netns_dir_mounted() -> bool:
    """True when /run/netns is a mount point (`ip netns add` makes it one, once)."""
    return succeeds(["mountpoint", "-q", "/run/netns"])


def unmount_netns_dir() -> None:
    """Undo the /run/netns mount `ip netns add` made, when no namespace is left in it."""
    if netns_dir_mounted() and not netns_list():
        run(["umount", "/run/netns"], check=False)


def ensure_netns(name: str) -> None:
    """Create the named network namespace when missing."""
    if name not in netns_list():
        run(["ip", "netns", "add", name])


def sysctl(netns: str, key: str, value: str) -> None:
    """Set a sysctl inside NETNS (only /proc/sys/net is per namespace)."""
    run(["nsenter", f"--net=/var/run/netns/{netns}", "sysctl", "-qw", f"{key}={value}"])


def ensure_mgmt_bridge() -> None:
    """The operator side of the management network: bridge spk-mgmt, 198.18.0.1/24."""
    if not link_exists(MGMT_BRIDGE):
        ip("link", "add", MGMT_BRIDGE, "type", "bridge", "stp_state", "0", "forward_delay", "0",
           "nf_call_iptables", "0", "nf_call_ip6tables", "0", "nf_call_arptables", "0")
        ip("addr", "add", f"{MGMT_GATEWAY}/{MGMT_PREFIX}", "dev", MGMT_BRIDGE)
    # Nodes route via 198.18.0.1, but nothing they send is ever forwarded beyond the operator.
    run(["sysctl", "-qw", f"net.ipv4.conf.{MGMT_BRIDGE}.forwarding=0"])
    run(["sysctl", "-qw", f"net.ipv6.conf.{MGMT_BRIDGE}.forwarding=0"], check=False)
    ip("link", "set", MGMT_BRIDGE, "up")
    allow_bridged_mgmt()


FORWARD_RULE = ["FORWARD", "-i", MGMT_BRIDGE, "-o", MGMT_BRIDGE, "-j", "ACCEPT"]


def allow_bridged_mgmt() -> None:
    """Let node-to-node management traffic through the host's FORWARD chain.

    With br_netfilter loaded, bridged frames traverse iptables; a host running its
    own Docker sets FORWARD to DROP, which would cut spark-a from spark-b."""
    if shutil.which("iptables") and not succeeds(["iptables", "-C", *FORWARD_RULE]):
        run(["iptables", "-I", *FORWARD_RULE], check=False)


def remove_bridged_mgmt_rule() -> None:
    """Remove the FORWARD rule allow_bridged_mgmt added."""
    while shutil.which("iptables") and succeeds(["iptables", "-C", *FORWARD_RULE]):
        run(["iptables", "-D", *FORWARD_RULE])


def ensure_mgmt_link(node: Node) -> None:
    """The node's RJ45 port enP7s7, bridged to the operator, with address and default route."""
    if not link_exists(MGMT_IFACE, node.netns):
        if link_exists(node.mgmt_host_veth):
            ip("link", "del", node.mgmt_host_veth)
        ip("link", "add", node.mgmt_host_veth, "type", "veth", "peer", "name", MGMT_IFACE,
           "address", f"02:5b:00:0{node.index}:00:01", "netns", node.netns)
    ip("link", "set", node.mgmt_host_veth, "master", MGMT_BRIDGE, "up")
    ip("link", "set", MGMT_IFACE, "up", netns=node.netns)
    ip("addr", "replace", f"{node.mgmt_ip}/{MGMT_PREFIX}", "dev", MGMT_IFACE, netns=node.netns)
    ip("route", "replace", "default", "via", MGMT_GATEWAY, "dev", MGMT_IFACE, netns=node.netns)


def ensure_cable_ns() -> None:
    """The namespace that plays the cables: no IPv6 chatter, one bridge per cabled twin."""
    ensure_netns(CABLE_NS)
    sysctl(CABLE_NS, "net.ipv6.conf.default.disable_ipv6", "1")
    sysctl(CABLE_NS, "net.ipv6.conf.all.disable_ipv6", "1")
    for bridge in current_plan():
        if not link_exists(bridge, CABLE_NS):
            ip("link", "add", bridge, "mtu", str(CABLE_MTU), "type", "bridge", "stp_state", "0",
               "forward_delay", "0", netns=CABLE_NS)
        ip("link", "set", bridge, "up", netns=CABLE_NS)


def ensure_twin(node: Node, twin: str) -> bool:
    """One QSFP twin of NODE as a veth into spark-cable; True when it was created.

    A new twin is left DOWN without addresses on the node side; its cable-side
    peer is up (MTU 9216) when the port is cabled, down when it is not."""
    peer = node.cable_peer(twin)
    if link_exists(twin, node.netns) and link_exists(peer, CABLE_NS):
        return False
    for name, netns in ((twin, node.netns), (peer, CABLE_NS)):
        if link_exists(name, netns):
            ip("link", "del", name, netns=netns)
    ip("link", "add", twin, "netns", node.netns, "address", node.twin_mac(twin), "type", "veth",
       "peer", "name", peer, "netns", CABLE_NS)
    ip("link", "set", peer, "mtu", str(CABLE_MTU), netns=CABLE_NS)
    if twin in node.links:
        ip("link", "set", peer, "up", netns=CABLE_NS)
    return True


def cabling(crossed: bool = False) -> dict:
    """Which cable-side peers each bridge of the pair joins: straight (twin to same twin) or crossed."""
    head, worker = NODES
    plan = {}
    for index, twin in enumerate(CABLED_TWINS):
        other = CABLED_TWINS[1 - index] if crossed else twin
        plan[CABLE_BRIDGES[twin]] = (head.cable_peer(twin), worker.cable_peer(other))
    return plan


def current_plan(crossed: bool = False, crossed_at: frozenset = frozenset()) -> dict:
    """Bridge -> the cable-side peers it joins, for the recorded shape: the pair's cabling (CROSSED:
    its twins crosswise), or the ring's or switch's (CROSSED_AT: ring nodes whose two cables are swapped)."""
    shape = load()
    return cabling(crossed) if shape.topology == "pair" else cable_plan(shape, crossed_at)


def apply_cabling(crossed: bool = False, crossed_at: frozenset = frozenset()) -> None:
    """Plug the cabled ports' twins into the bridges as the recorded shape's plan says. A cable end that moves
    to another bridge is unplugged while it moves (down, then up again unless a fault keeps it down), as a
    cable moved by hand is: the node's twin loses carrier, and with it the kernel's neighbour entries."""
    for bridge, peers in current_plan(crossed, crossed_at).items():
        for peer in peers:
            if link_master(peer) == bridge:
                continue
            plugged = is_up(peer)
            if plugged:
                ip("link", "set", peer, "down", netns=CABLE_NS)
            ip("link", "set", peer, "master", bridge, netns=CABLE_NS)
            if plugged:
                ip("link", "set", peer, "up", netns=CABLE_NS)


def is_up(name: str, netns: str = CABLE_NS) -> bool:
    """True when link NAME is administratively up."""
    info = json.loads(ip("-j", "link", "show", "dev", name, netns=netns).stdout)
    return bool(info) and "UP" in info[0].get("flags", [])


def is_crossed() -> bool:
    """True when the cables are currently crossed."""
    head = NODES[0]
    master = link_master(head.cable_peer(CABLED_TWINS[0]))
    worker_peer = NODES[1].cable_peer(CABLED_TWINS[1])
    return master is not None and link_master(worker_peer) == master


def crossed_ring_nodes() -> frozenset:
    """Ring nodes whose port f0 cable currently sits where their port f1 cable belongs (read from the
    kernel: which bridge each f0 cable end is enslaved to)."""
    shape = load()
    if shape.topology != "ring":
        return frozenset()
    straight = {peer: bridge for bridge, peers in cable_plan(shape).items() for peer in peers}
    crossed = set()
    for node in NODES:
        peer = node.cable_peer(PORT_F0[0])
        master = link_master(peer)
        if master is not None and master != straight[peer]:
            crossed.add(node.name)
    return frozenset(crossed)


def link_master(name: str, netns: str = CABLE_NS) -> str | None:
    """The bridge link NAME is enslaved to, or None."""
    info = json.loads(ip("-j", "link", "show", "dev", name, netns=netns).stdout)
    return info[0].get("master") if info else None


def bridge_partners(node: Node, twin: str) -> list:
    """Cable-side peers that are wired to NODE's TWIN (itself included)."""
    master = link_master(node.cable_peer(twin))
    if master is None:
        return [node.cable_peer(twin)]
    members = json.loads(ip("-j", "link", "show", "master", master, netns=CABLE_NS).stdout)
    return sorted(member["ifname"] for member in members)


def set_cable_state(peers, up: bool) -> None:
    """Plug (up) or pull (down) the cable ends PEERS in spark-cable."""
    for peer in peers:
        ip("link", "set", peer, "up" if up else "down", netns=CABLE_NS)


def ensure_wires(node: Node) -> None:
    """Every link of NODE: management port and the four QSFP twins."""
    ensure_mgmt_link(node)
    for twin in QSFP_TWINS:
        ensure_twin(node, twin)
    for twin in QSFP_TWINS:
        if twin not in node.links:
            ip("link", "set", node.cable_peer(twin), "down", netns=CABLE_NS)


def teardown() -> None:
    """Delete the namespaces, the bridge and the management veths; wait until they are gone."""
    for name in [*(n.netns for n in every_possible_node()), CABLE_NS]:
        if name in netns_list():
            run(["ip", "netns", "del", name])
    for name in [*(n.mgmt_host_veth for n in every_possible_node()), MGMT_BRIDGE]:
        if link_exists(name):
            try:
                ip("link", "del", name)
            except CommandError:
                pass  # gone meanwhile with its namespace
    remove_bridged_mgmt_rule()
    deadline = time.monotonic() + 15
    leftovers = [n.mgmt_host_veth for n in every_possible_node()] + [MGMT_BRIDGE]
    while any(link_exists(name) for name in leftovers):
        if time.monotonic() > deadline:
            raise CommandError(f"links still present after down: {leftovers}")
        time.sleep(0.1)
