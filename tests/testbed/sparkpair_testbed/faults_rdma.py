"""RoCE faults: the RoCE MTU, a missing IPv4 GID, an IPv4 GID at another index.

Each is a change the node's kernel or RDMA driver really holds (rdmad.py keeps the GID tables from
the kernel's addresses, in the order they came): sparkpair sees it only through ibv_devinfo and
/sys/class/infiniband, as on a real Spark.
"""
from __future__ import annotations

import json

from . import rdmad
from .daemons import rdma_settled
from .faults_net import current_mtu, ipv4_addresses
from .hostexec import CommandError, node_sh
from .layout import CABLED_TWINS, Node
from .network import ip

GID_MISSING_TWIN = "enp1s0f1np1"
# IPv6 documentation prefix (RFC 3849): an address that takes GID slots and sends nothing anywhere.
DOC_PREFIX = "2001:db8:5b"


def mtu_1024_apply(node: Node, options) -> dict:
    """Both cabled twins at MTU 1500: their RoCE ports run at active_mtu 1024 (4096 needs 4200)."""
    before = {twin: current_mtu(node, twin) for twin in CABLED_TWINS}
    for twin in CABLED_TWINS:
        ip("link", "set", "dev", twin, "mtu", "1500", netns=node.netns)
    return {"mtu": before}


def mtu_1024_heal(node: Node, data, others) -> None:
    for twin, mtu in data["mtu"].items():
        ip("link", "set", "dev", twin, "mtu", str(mtu), netns=node.netns)


def _set_lost(node: Node, twins: list) -> None:
    """What the node's RDMA driver has lost: the IPv4 GIDs of these twins (rdmad reads it on SIGHUP)."""
    text = json.dumps({"lost_ipv4": sorted(twins)})
    node_sh(node, f"printf '%s\\n' '{text}' > {rdmad.RDMA_FAULTS}.tmp && mv {rdmad.RDMA_FAULTS}.tmp "
                  f"{rdmad.RDMA_FAULTS} && kill -HUP \"$(cat {rdmad.PIDFILE})\"")


def _lost(node: Node) -> list:
    found = node_sh(node, f"cat {rdmad.RDMA_FAULTS} 2>/dev/null", check=False).stdout
    try:
        return list(json.loads(found or "{}").get("lost_ipv4", []))
    except ValueError:
        return []


def _gid_lines(text: str, device: str, gid: str) -> list:
    return [line for line in text.splitlines() if line.startswith(f"{device}/ports/1/gids/") and line.endswith(gid)]


def gid_missing_apply(node: Node, options) -> dict:
    """The RDMA driver of the node's enp1s0f1np1 holds no GID for its IPv4 address (as a kernel that could not
    add them); the address itself stays."""
    _set_lost(node, sorted(set(_lost(node)) | {GID_MISSING_TWIN}))
    device = rdmad.DEVICES[GID_MISSING_TWIN][0]
    addresses = [a.split("/")[0] for a in ipv4_addresses(node, GID_MISSING_TWIN)]
    rdma_settled(node, lambda text: not any(_gid_lines(text, device, rdmad.gid_text(a)) for a in addresses),
                 "the IPv4 GIDs to go")
    return {"twin": GID_MISSING_TWIN}


def gid_missing_heal(node: Node, data, others) -> None:
    _set_lost(node, [twin for twin in _lost(node) if twin != data["twin"]])
    device = rdmad.DEVICES[data["twin"]][0]
    addresses = [a.split("/")[0] for a in ipv4_addresses(node, data["twin"])]
    rdma_settled(node, lambda text: all(_gid_lines(text, device, rdmad.gid_text(a)) for a in addresses),
                 "the IPv4 GIDs to come back")


def _doc_address(node: Node, twin: str) -> str:
    return f"{DOC_PREFIX}:{CABLED_TWINS.index(twin) + 1}::{node.index}/64"


def _remove(node: Node, twin: str, addresses: list) -> None:
    for address in addresses:
        ip("addr", "del", address, "dev", twin, netns=node.netns)
        _gid_of(node, twin, address, present=False)


def _add(node: Node, twin: str, addresses: list) -> None:
    for address in addresses:
        ip("addr", "add", address, "broadcast", "+", "dev", twin, netns=node.netns)
        _gid_of(node, twin, address)


def _gid_of(node: Node, twin: str, address: str, present: bool = True) -> None:
    device, gid = rdmad.DEVICES[twin][0], rdmad.gid_text(address.split("/")[0])
    rdma_settled(node, lambda text: bool(_gid_lines(text, device, gid)) == present,
                 f"the GIDs of {address} on {twin} to {'appear' if present else 'go'}")


def gid_differs_apply(node: Node, options) -> dict:
    """The IPv4 RoCE v2 GID of both cabled twins lands at index 5 instead of 3: the IPv4 addresses go, an IPv6
    address takes the first free GID entries, the IPv4 addresses come back after it (a netplan re-apply). The
    IPv6 address goes again, leaving entries 2 and 3 empty ("index 3 didn't even exist"). A twin without an
    IPv4 address yet keeps the IPv6 one, so that the address it is given later lands at 4 and 5."""
    record = {}
    for twin in CABLED_TWINS:
        extra, addresses = _doc_address(node, twin), ipv4_addresses(node, twin)
        _remove(node, twin, addresses)                     # a netplan re-apply: the addresses go...
        ip("-6", "addr", "add", extra, "dev", twin, "nodad", netns=node.netns)
        _gid_of(node, twin, extra)                         # ...an IPv6 address takes entries 2 and 3...
        _add(node, twin, addresses)                        # ...and the IPv4 ones come back at 4 and 5
        if addresses:
            ip("-6", "addr", "del", extra, "dev", twin, netns=node.netns)
            _gid_of(node, twin, extra, present=False)
        record[twin] = {"extra": extra, "kept": not addresses}
    return record


def gid_differs_heal(node: Node, data, others) -> None:
    """Drop the IPv6 address if it stayed, and add the IPv4 addresses again: they take entries 2 and 3."""
    for twin, item in data.items():
        if item["kept"]:
            try:
                ip("-6", "addr", "del", item["extra"], "dev", twin, netns=node.netns)
            except CommandError:
                pass  # gone with a flush (reset) meanwhile
        addresses = ipv4_addresses(node, twin)
        _remove(node, twin, addresses)
        _add(node, twin, addresses)
