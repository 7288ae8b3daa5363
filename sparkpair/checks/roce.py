"""links.roce: each twin's RoCE port is ACTIVE, runs the full RoCE MTU, and has a RoCE v2 GID carrying
its IPv4 address; and what NCCL must be told on each node (`node_fabric`), from the same facts.

NCCL over RoCE needs, per node, the RDMA devices of the twins (`NCCL_IB_HCA`) and the GID index of
their IPv4 RoCE v2 entry (`NCCL_IB_GID_INDEX`). Both are asked of the node (ibdev2netdev and the
sysfs GID table), never derived from names: the GID index depends on the order in which the twin
gained its addresses and differs between otherwise identical Sparks (3 on one, 4 on the other).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sparkpair.checks import Facts, Finding, fail, ok, reachable_nodes, skip, unreachable_skips, warn
from sparkpair.inventory import Inventory, Node
from sparkpair.probes import NodeFacts, Probe, ProbeFailure, net, rdma
from sparkpair.render.recipe import NodeFabric

CHECK = "links.roce"
ROCE_MTU = 4096
# The RoCE MTU is the largest IB MTU that fits in the netdev MTU after the RoCE v2 headers
# (the kernel's iboe_get_mtu): 4096 needs a netdev MTU of at least 4192 (4200 is the usual setting).
ROCE_HEADERS = 96
IB_MTUS = (4096, 2048, 1024, 512, 256)
GID_ENV = "NCCL_IB_GID_INDEX"
SETUP = "sparkpair setup-network"


def roce_probes() -> list[Probe[Any]]:
    """What links.roce and node_fabric judge on a node: ibdev2netdev, ibv_devinfo, the sysfs GID tables."""
    return [rdma.DEVICES, rdma.PORTS, rdma.GID_TABLES]


def roce_mtu(netdev_mtu: int) -> int:
    """The RoCE MTU a netdev MTU allows: 9000 -> 4096, 1500 -> 1024."""
    return next((mtu for mtu in IB_MTUS if mtu <= netdev_mtu - ROCE_HEADERS), 256)


def _value(node_facts: NodeFacts, probe: Probe[Any]) -> Any:
    found = node_facts.get(probe)
    return None if isinstance(found, ProbeFailure) else found


def twin_gid(node_facts: NodeFacts, node: Node, twin: str) -> rdma.Gid | None:
    """The RoCE v2 GID carrying the twin's inventory IPv4 address on its RDMA device, or None."""
    link = (_value(node_facts, rdma.DEVICES) or {}).get(twin)
    table = (_value(node_facts, rdma.GID_TABLES) or {}).get((link.device, link.port)) if link else None
    return table.roce_v2_gid(str(node.links[twin].ip)) if table else None


def gid_indexes(node_facts: NodeFacts, node: Node) -> dict[str, int | None]:
    """Twin -> index of its IPv4 RoCE v2 GID (None when it has none)."""
    indexes = {}
    for twin in node.links:
        gid = twin_gid(node_facts, node, twin)
        indexes[twin] = gid.index if gid else None
    return indexes


def node_gid_index(node_facts: NodeFacts, node: Node) -> int | None:
    """The one GID index that serves every twin of the node, or None (missing, or the twins differ)."""
    found = set(gid_indexes(node_facts, node).values())
    return found.pop() if len(found) == 1 and None not in found else None


def node_fabric(inventory: Inventory, name: str, node_facts: NodeFacts) -> NodeFabric | None:
    """NCCL_IB_HCA (the twins' RDMA devices, in the inventory's order) and the GID index for node name,
    from its own probes; None when ibdev2netdev did not answer. When the twins' indexes differ, one
    NCCL_IB_GID_INDEX cannot serve both: it is left unset and NCCL picks each HCA's RoCE v2 IPv4 GID."""
    node = inventory.node(name)
    links = _value(node_facts, rdma.DEVICES)
    if not links:
        return None
    hcas = tuple(links[twin].device for twin in node.links if twin in links)
    return NodeFabric(hcas, node_gid_index(node_facts, node))


def pair_fabric(facts: Facts) -> dict[str, NodeFabric | None]:
    """node_fabric of every reachable node."""
    return {name: node_fabric(facts.inventory, name, node_facts) for name, node_facts in reachable_nodes(facts)}


def check_roce(facts: Facts) -> Iterable[Finding]:
    """Proves each twin's RoCE port ACTIVE at RoCE MTU 4096 with a RoCE v2 GID for its IPv4 address; reports
    the GID index per node, and refuses one inventory NCCL_IB_GID_INDEX for nodes whose indexes differ."""
    yield from unreachable_skips(facts, CHECK)
    for name, node_facts in reachable_nodes(facts):
        yield from _node(facts, name, node_facts)
    yield from _pair(facts)


def _node(facts: Facts, name: str, node_facts: NodeFacts) -> Iterable[Finding]:
    node = facts.inventory.node(name)
    links, tables = node_facts.get(rdma.DEVICES), node_facts.get(rdma.GID_TABLES)
    if not isinstance(links, dict):
        yield skip(CHECK, name, f"ibdev2netdev did not answer (see links.rdma): {links}")
        return
    if not isinstance(tables, dict) or not tables:
        why = tables if isinstance(tables, ProbeFailure) else f"no RoCE port in {rdma.SYSFS}"
        yield fail(CHECK, name, f"cannot read the RoCE GID tables: {why}",
                   f"load the ConnectX RDMA driver on {name} (sudo modprobe mlx5_ib), or reboot it; "
                   f"then ls {rdma.SYSFS}")
        return
    interfaces = _value(node_facts, net.INTERFACES) or {}
    ports = node_facts.get(rdma.PORTS)
    for twin in node.links:
        link = links.get(twin)
        if link is None:
            yield skip(CHECK, name, f"{twin}: no RoCE device (see links.rdma)")
            continue
        table = tables.get((link.device, link.port))
        if table is None:
            yield fail(CHECK, name, f"{link.device} port {link.port} ({twin}) is not in {rdma.SYSFS}",
                       f"reload the RDMA driver on {name} (reboot it)")
            continue
        attributes = ports.get((link.device, link.port), "the port is not in its output") \
            if isinstance(ports, dict) else ports
        problems = list(_twin(facts, name, twin, link, table, attributes, interfaces.get(twin)))
        if not problems:
            gid = table.roce_v2_gid(str(node.links[twin].ip))
            mtu = attributes.active_mtu if isinstance(attributes, rdma.PortAttributes) else None
            yield ok(CHECK, name, f"{link.device} ({twin}) ACTIVE, active_mtu {mtu}, RoCE v2 GID {gid} at index "
                                  f"{gid.index if gid else '?'}")
        yield from problems
    yield from _twins_disagree(name, node, node_facts)


def _twin(facts: Facts, name: str, twin: str, link: rdma.RoceLink, table: rdma.PortTable, attributes: object,
          interface: net.Interface | None) -> Iterable[Finding]:
    """The FAILs and WARNs of one twin's RoCE port (nothing when it is healthy)."""
    device, address = link.device, str(facts.inventory.node(name).links[twin].ip)
    if not table.active:   # its GIDs and MTU are judged once it is up
        carrier = interface is not None and interface.carrier
        yield fail(CHECK, name, f"{device} ({twin}) port {table.state or 'unknown'}"
                                f"{f' ({table.phys_state})' if table.phys_state else ''}",
                   f"the RoCE port of {twin} is down although {twin} has carrier: reboot {name} (or reload "
                   "mlx5_ib)" if carrier else f"no carrier on {twin} of {name}: fix links.carrier first")
        return
    if table.roce_v2_gid(address) is None:
        yield fail(CHECK, name, f"{device} ({twin}): no RoCE v2 GID carries {address} "
                                f"({_gid_summary(table, address)})", _gid_fix(name, twin, address, interface, table))
    yield from _mtu(facts, name, twin, device, attributes, interface)


def _gid_summary(table: rdma.PortTable, address: str) -> str:
    same = table.gids_of(address)
    if same:
        return "only " + ", ".join(f"{gid.kind} at index {gid.index}" for gid in same)
    shown = ", ".join(f"{gid.index}: {gid} {gid.kind}" for gid in table.gids[:6]) or "none"
    return f"GIDs {shown}" + (f" (table full: {len(table.gids)} of {table.slots})"
                              if table.slots and len(table.gids) >= table.slots else "")


def _gid_fix(name: str, twin: str, address: str, interface: net.Interface | None, table: rdma.PortTable) -> str:
    prefix = interface.ipv4 if interface else []
    if not any(item.split("/")[0] == address for item in prefix):
        return f"{twin} of {name} lacks {address}: fix links.address first ({SETUP})"
    if table.slots and len(table.gids) >= table.slots:
        return (f"the GID table of {twin} on {name} is full: remove the twin's extra addresses "
                f"(ip addr show dev {twin}), then re-add {address}: sudo ip addr del {address}/"
                f"{_prefix(interface, address)} dev {twin} && sudo netplan apply")
    return (f"the kernel holds no RoCE v2 GID for {address}: re-add the address so it makes one (on {name}: "
            f"sudo ip addr del {address}/{_prefix(interface, address)} dev {twin} && sudo netplan apply), "
            "or reboot it")


def _prefix(interface: net.Interface | None, address: str) -> str:
    for item in interface.ipv4 if interface else []:
        if item.split("/")[0] == address:
            return item.split("/")[1]
    return "24"


def _mtu(facts: Facts, name: str, twin: str, device: str, attributes: object,
         interface: net.Interface | None) -> Iterable[Finding]:
    if not isinstance(attributes, rdma.PortAttributes):
        yield warn(CHECK, name, f"{device} ({twin}): cannot read active_mtu (ibv_devinfo: {attributes})",
                   f"sudo apt install ibverbs-utils (on {name})")
        return
    if attributes.active_mtu is None or attributes.active_mtu >= ROCE_MTU:
        return
    netdev_mtu = interface.mtu if interface else 0
    detail = (f"{device} ({twin}) runs RoCE at active_mtu {attributes.active_mtu}, not {ROCE_MTU}, with the "
              f"netdev at mtu {netdev_mtu}: RDMA moves {attributes.active_mtu}-byte packets instead of "
              f"{ROCE_MTU}-byte ones, and the peer's queue pairs negotiate down to it")
    inventory_mtu = facts.inventory.cluster.mtu
    if netdev_mtu < ROCE_MTU + ROCE_HEADERS <= inventory_mtu:
        fix = f"{SETUP} (sets {twin} of {name} to mtu {inventory_mtu}; the RoCE MTU follows to {ROCE_MTU})"
    elif netdev_mtu < ROCE_MTU + ROCE_HEADERS:
        fix = f"set cluster.mtu: 9000 in the inventory (it is {inventory_mtu}), then {SETUP}"
    else:
        fix = (f"the RoCE port did not follow the netdev mtu {netdev_mtu}: bounce {twin} on {name} "
               f"(sudo ip link set {twin} down && sudo ip link set {twin} up) or reboot it")
    yield warn(CHECK, name, detail, fix)


def _twins_disagree(name: str, node: Node, node_facts: NodeFacts) -> Iterable[Finding]:
    indexes = {twin: index for twin, index in gid_indexes(node_facts, node).items() if index is not None}
    if len(set(indexes.values())) > 1:
        shown = ", ".join(f"{index} on {twin}" for twin, index in indexes.items())
        yield warn(CHECK, name, f"the IPv4 RoCE v2 GID is at index {shown}: one {GID_ENV} cannot serve both twins",
                   f"nothing to set: sparkpair launch leaves {GID_ENV} unset on {name} and NCCL picks each "
                   f"device's RoCE v2 IPv4 GID; to make them equal, re-add the twins' addresses in one order "
                   f"(sudo netplan apply after removing them) or reboot {name}")


def _pair(facts: Facts) -> Iterable[Finding]:
    """The GID index of each node, and an inventory NCCL_IB_GID_INDEX that does not fit them."""
    indexes = {name: node_gid_index(node_facts, facts.inventory.node(name))
               for name, node_facts in reachable_nodes(facts)}
    known = {name: index for name, index in indexes.items() if index is not None}
    if len(known) < 2:
        return
    shown = " and ".join(f"{index} on {name}" for name, index in known.items())
    override = facts.inventory.container.env.get(GID_ENV)
    whole, nodes = facts.whole, facts.every  # a pair says it as it always did; more nodes are a cluster
    if override is not None and any(str(index) != override.strip() for index in known.values()):
        yield fail(CHECK, whole, f"container.env sets {GID_ENV}={override} for {nodes}, but the twins' IPv4 "
                                  f"RoCE v2 GID is at index {shown}: a rank would advertise a wrong GID "
                                  "(NCCL: ibv_modify_qp failed, unhandled system error)",
                   f"remove {GID_ENV} from container.env in the inventory: sparkpair sets it per node "
                   f"({', '.join(f'{GID_ENV}={index} on {name}' for name, index in known.items())})")
    elif len(set(known.values())) > 1:
        yield warn(CHECK, whole, f"the twins' IPv4 RoCE v2 GID is at index {shown}: one {GID_ENV} for {nodes} "
                                 "(a hand-made launch, most recipes) makes one rank advertise a wrong GID",
                   "nothing to do for sparkpair launch: it sets " + ", ".join(
                       f"{GID_ENV}={index} on {name}" for name, index in known.items()) +
                   f" in each node's container; by hand, set {GID_ENV} per node or leave it unset")
    else:
        yield ok(CHECK, whole, f"the twins' IPv4 RoCE v2 GID is at index {shown}")
