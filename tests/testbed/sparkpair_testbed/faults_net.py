"""Network faults: cables pulled, crossed, MTU and address mistakes.

Each fault is a real change in the kernel (an `ip` command), never a flag.
apply(node, options) returns what heal(node, data, others) needs to undo it
exactly; OTHERS are the records of the faults that stay active, so healing
one pulled cable does not plug back a cable another fault keeps pulled.
"""
from __future__ import annotations

import ipaddress
import json

from .hostexec import CommandError
from .layout import CABLED_TWINS, Node
from .network import apply_cabling, bridge_partners, ip, set_cable_state

WRONG_IP_TWIN = "enp1s0f1np1"
MTU_TWIN = "enp1s0f1np1"
LINK_DOWN_TWIN = "enP2p1s0f1np1"


def held_down(others) -> set:
    """Cable ends that other active faults keep pulled."""
    return {peer for record in others for peer in record["data"].get("peers", [])}


def pull(peers) -> dict:
    """Pull the cable ends PEERS: the twins on both sides lose carrier."""
    set_cable_state(peers, up=False)
    return {"peers": list(peers)}


def plug(data, others) -> None:
    """Plug back the cable ends a fault pulled, except those still pulled by OTHERS."""
    set_cable_state([p for p in data["peers"] if p not in held_down(others)], up=True)


def link_down_apply(node: Node, options) -> dict:
    """One twin (enP2p1s0f1np1) loses its link: both ends of that cable are down."""
    return pull(bridge_partners(node, LINK_DOWN_TWIN))


def cable_unplugged_apply(node: Node, options) -> dict:
    """The QSFP cable is pulled: both twins of the cabled port lose carrier on both nodes."""
    peers = sorted({p for twin in CABLED_TWINS for p in bridge_partners(node, twin)})
    return pull(peers)


def crossed_apply(node: Node, options) -> dict:
    """Cross the cables: A.enp1s0f1np1 meets B.enP2p1s0f1np1 and vice versa."""
    apply_cabling(crossed=True)
    return {}


def crossed_heal(node: Node, data, others) -> None:
    """Straighten the cables again."""
    apply_cabling(crossed=False)


def link_heal(node: Node, data, others) -> None:
    """Undo link-down / cable-unplugged."""
    plug(data, others)


def current_mtu(node: Node, iface: str) -> int:
    """MTU of IFACE inside NODE."""
    return json.loads(ip("-j", "link", "show", "dev", iface, netns=node.netns).stdout)[0]["mtu"]


def mtu_apply(node: Node, options) -> dict:
    """The node's enp1s0f1np1 goes back to MTU 1500 while its peer expects 9000."""
    before = current_mtu(node, MTU_TWIN)
    ip("link", "set", "dev", MTU_TWIN, "mtu", "1500", netns=node.netns)
    return {"iface": MTU_TWIN, "mtu": before}


def mtu_heal(node: Node, data, others) -> None:
    """Restore the MTU the twin had."""
    ip("link", "set", "dev", data["iface"], "mtu", str(data["mtu"]), netns=node.netns)


def ipv4_addresses(node: Node, iface: str) -> list:
    """Global IPv4 addresses of IFACE inside NODE, as 'ADDR/PREFIX'."""
    data = json.loads(ip("-j", "-4", "addr", "show", "dev", iface, netns=node.netns).stdout or "[]")
    return [f"{a['local']}/{a['prefixlen']}" for entry in data for a in entry.get("addr_info", [])
            if a.get("scope") == "global"]


def wrong_address(address: str) -> str:
    """Another host of ADDRESS's subnet, that neither node is meant to have."""
    iface = ipaddress.ip_interface(address)
    hosts = list(iface.network.hosts())
    wrong = hosts[(hosts.index(iface.ip) + 100) % len(hosts)]
    return f"{wrong}/{iface.network.prefixlen}"


def wrong_ip_apply(node: Node, options) -> dict:
    """Replace the node's enp1s0f1np1 address by a wrong one in the same subnet."""
    current = ipv4_addresses(node, WRONG_IP_TWIN)
    wrong = wrong_address(current[0] if current else node.links[WRONG_IP_TWIN])
    for address in current:
        ip("addr", "del", address, "dev", WRONG_IP_TWIN, netns=node.netns)
    ip("addr", "add", wrong, "broadcast", "+", "dev", WRONG_IP_TWIN, netns=node.netns)
    return {"iface": WRONG_IP_TWIN, "removed": current, "added": wrong}


def wrong_ip_heal(node: Node, data, others) -> None:
    """Put the original addresses back."""
    try:
        ip("addr", "del", data["added"], "dev", data["iface"], netns=node.netns)
    except CommandError:
        pass  # already removed by someone else (e.g. netplan apply)
    present = set(ipv4_addresses(node, data["iface"]))
    for address in data["removed"]:
        if address not in present:
            ip("addr", "add", address, "broadcast", "+", "dev", data["iface"], netns=node.netns)
