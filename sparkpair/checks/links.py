"""Checks of the QSFP link: twins, carrier, speed, addressing, MTU, RoCE, cabling, path and trust.

The probes these checks judge are built here (`link_probes`, `trust_probes`): doctor gathers them,
and so does setup-network's verification, which runs these same checks over what it gathered.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from sparkpair.checks import SETUP_NETWORK, Facts, Finding, fail, ok, reachable_nodes, skip, unreachable_skips, warn
from sparkpair.checks.crossing import interfaces_of, judge_crossing
from sparkpair.checks.roce import roce_probes
from sparkpair.errors import last_line
from sparkpair.inventory import Inventory, Node
from sparkpair.inventory.topology import link_ends, same_half
from sparkpair.probes import NodeFacts, Probe, ProbeFailure, net, rdma
from sparkpair.probes.net import PingResult
from sparkpair.transport import Shell

SPEED = 200000
SETUP = "sparkpair setup-network"
# What setup-network verifies after an apply (and what makes its planner re-apply when they fail).
VERIFIED = ("links.present", "links.carrier", "links.address", "links.mtu", "links.mtu-match", "links.crossed",
            "path.ping", "path.mtu")
LIVE_STATE = ("links.carrier", "links.address", "links.mtu")


def setup(what: str) -> str:
    """The setup-network fix, saying what it will do on which node and interface."""
    return f"{SETUP} ({what})"


def peer_address(inventory: Inventory, node: Node, twin: str) -> str:
    """The address node's twin should reach first: a pair's peer's twin of the same name."""
    return next(end.address for end in link_ends(inventory, node) if end.port == twin)


def ping_probe(inventory: Inventory, node: Node, twin: str, full_mtu: bool = False,
               address: str | None = None) -> Probe[PingResult]:
    """A ping from node's twin to address (default: `peer_address`); with full_mtu, one of MTU size with
    don't-fragment."""
    target = address or peer_address(inventory, node, twin)
    return net.ping(twin, target, inventory.cluster.mtu - 28 if full_mtu else None)


def crossing_probe(inventory: Inventory, node: Node) -> Probe[dict[tuple[str, str], str]]:
    """Which MAC answers behind each of node's twins for the first address it should reach; in a ring, when that
    stays silent, for the other neighbour's on the same half of node's other port (there a swapped cable answers)."""
    ends = link_ends(inventory, node)
    first: dict[str, str] = {}
    other: dict[str, str] = {}
    for end in ends:
        first.setdefault(end.port, end.address)
        others = [far for far in ends if far.peer.name != end.peer.name]
        if others:
            other.setdefault(end.port, next((far for far in others if same_half(far.port, end.port)), others[0]).address)
    return net.crossing(first, other if inventory.topology == "ring" else None)


def peer_addresses(inventory: Inventory, node: Node, peer: Node | None = None) -> list[str]:
    """peer's QSFP addresses that node has a link to (default peer: a pair's other node), in peer's inventory
    order: the first is the one node logs in over."""
    peer = peer or inventory.peer_of(node)
    linked = {end.peer_port for end in link_ends(inventory, node) if end.peer.name == peer.name}
    return [str(address.ip) for port, address in peer.links.items() if port in linked]


def trust_probes(inventory: Inventory, node: Node) -> list[Probe[Any]]:
    """For each neighbour (a pair: the peer), one `ssh -o BatchMode=yes` from node to its first QSFP address,
    and the host keys node pins for every address of it.

    One login per peer, not per address: each login costs both nodes an SSH handshake, a PAM session and a
    shell (about 0.15 s of CPU, the dearest probe of doctor's round). The login proves the node's key is
    authorized on the peer and the first address's pinned host key is the peer's; an other address is
    trusted when the keys node pins for it agree with those of the first, since the same sshd answers on
    both (path.ping and links.crossed prove the address reaches that peer). What this cannot see: an sshd
    or a firewall that refuses port 22 on the second address only; the launch's MPI start would.
    """
    probes: list[Probe[Any]] = []
    ends = link_ends(inventory, node)
    for peer in inventory.neighbours(node):
        addresses = peer_addresses(inventory, node, peer)
        twin = next(end.port for end in ends if end.peer.name == peer.name)
        own = node.links[twin]
        login = net.ssh_batch(addresses[0])
        # Tried only when node's own twin holds its address: else no route can reach the peer and ssh would wait
        # out its ConnectTimeout (5 s) on every doctor of a pair not set up yet. Same probe, so the judge finds it.
        guarded = replace(login, command=Shell.compose([
            net.holds_address(twin, str(own)),
            Shell(" || { echo {} >&2; exit 255; }; ", f"not tried: {twin} does not hold {own} yet (links.address)"),
            login.command], ""))
        probes += [guarded, *(net.known_host(address) for address in addresses)]
    return probes


def link_probes(inventory: Inventory, node: Node, verify_only: bool = False) -> list[Probe[Any]]:
    """Everything the link checks judge on node; with verify_only, what the VERIFIED checks need."""
    probes: list[Probe[Any]] = [net.INTERFACES]
    probes += [crossing_probe(inventory, node)] if inventory.topology != "switch" else []
    probes += [ping_probe(inventory, node, end.port, full, end.address) for end in link_ends(inventory, node)
               for full in (False, True)]
    if not verify_only:
        probes += [net.NETPLAN_FILES, *roce_probes(), *(net.ethtool(twin) for twin in node.links)]
    return probes


def check_links(facts: Facts) -> Iterable[Finding]:
    """Proves each twin exists, has carrier at 200 Gb/s, the inventory address and MTU, set persistently."""
    for check in ("links.present", "links.carrier", "links.speed", "links.address", "links.mtu", "links.persistent"):
        yield from unreachable_skips(facts, check)
    for name, node_facts in reachable_nodes(facts):
        node = facts.inventory.node(name)
        interfaces = interfaces_of(facts, name)
        for twin, address in node.links.items():
            interface = interfaces.get(twin)
            if interface is None:
                yield fail("links.present", name, f"{twin} does not exist", "fix nodes[].links or check `ip link`")
                continue
            yield ok("links.present", name, twin)
            yield from _twin(facts, name, node_facts, twin, str(address), interface)


def _twin(facts: Facts, name: str, node_facts: NodeFacts, twin: str, address: str,
          interface: net.Interface) -> Iterable[Finding]:
    """carrier, speed, address, MTU and persistence of one twin that exists."""
    mtu = facts.inventory.cluster.mtu
    if interface.carrier:
        yield ok("links.carrier", name, f"{twin} has carrier")
    elif not interface.admin_up:
        yield fail("links.carrier", name, f"{twin}: admin down", setup(f"brings {twin} up on {name}"), SETUP_NETWORK)
    else:
        yield fail("links.carrier", name, f"{twin}: no carrier", _no_carrier_fix(facts.inventory, name, twin))
    yield _speed(name, twin, node_facts.get(net.ethtool(twin)), interface.carrier)
    if address in interface.ipv4:
        others = [a for a in interface.ipv4 if a != address]
        yield (warn("links.address", name, f"{twin} has {address} and also {', '.join(others)}",
                    setup(f"leaves only {address} on {twin} of {name}"), SETUP_NETWORK)
               if others else ok("links.address", name, f"{twin} {address}"))
    else:
        yield fail("links.address", name, f"{twin} has {', '.join(interface.ipv4) or 'no address'}, "
                                          f"inventory says {address}", setup(f"gives {twin} of {name} {address}"),
                   SETUP_NETWORK)
    yield (ok("links.mtu", name, f"{twin} mtu {interface.mtu}") if interface.mtu == mtu else
           fail("links.mtu", name, f"{twin} mtu {interface.mtu}, inventory says {mtu}",
                setup(f"sets {twin} of {name} to mtu {mtu}"), SETUP_NETWORK))
    yield _persistence(name, twin, address, interface, node_facts.get(net.NETPLAN_FILES))


def _no_carrier_fix(inventory: Inventory, name: str, twin: str) -> str:
    """What to do about a twin without carrier: a pair's cable on both Sparks; a ring's cable to the neighbour
    its address expects; through a switch, the node's cable to the switch and that switch port."""
    if inventory.topology == "switch":
        return (f"check the QSFP cable from {name}'s {twin} to the switch and that its switch port is up "
                "(enabled, in the bridge of the other nodes' ports)")
    ends = [end for end in link_ends(inventory, inventory.node(name)) if end.port == twin]
    if inventory.topology == "ring" and ends:
        return f"reseat the QSFP cable of {twin} on {name} and its other end, {ends[0].peer.name}'s {ends[0].peer_port}"
    return f"reseat the QSFP cable of {twin} on {name} (same port on both Sparks)"


def _speed(name: str, twin: str, ethtool: object, carrier: bool) -> Finding:
    if not isinstance(ethtool, net.Ethtool):
        return warn("links.speed", name, f"{twin}: ethtool unavailable ({ethtool})", "sudo apt install ethtool")
    if not carrier:
        return skip("links.speed", name, f"{twin}: no carrier")
    if ethtool.speed_mbps == SPEED:
        return ok("links.speed", name, f"{twin} 200000Mb/s")
    return warn("links.speed", name, f"{twin} at {ethtool.speed_mbps}Mb/s, not 200000Mb/s",
                "use a 200G QSFP56 cable, cabled to the same port on both Sparks")


def _persistence(name: str, twin: str, address: str, interface: net.Interface, netplan_files: object) -> Finding:
    if address not in interface.ipv4:
        return skip("links.persistent", name, f"{twin}: address not set")
    if any(a.dynamic for a in interface.addresses if str(a) == address):
        return warn("links.persistent", name, f"{twin} {address} is a DHCP lease",
                    setup(f"writes {twin} of {name} into /etc/netplan"), SETUP_NETWORK)
    if not isinstance(netplan_files, dict):
        return skip("links.persistent", name, f"cannot read /etc/netplan ({netplan_files})")
    owners = [path for path, f in netplan_files.items() if address in f.addresses.get(twin, ())]
    if owners:
        return ok("links.persistent", name, f"{twin} {address} from {owners[0]}")
    return warn("links.persistent", name, f"{twin} {address} is not in any netplan file: lost at reboot",
                setup(f"writes {twin} of {name} into /etc/netplan"), SETUP_NETWORK)


def check_pair_links(facts: Facts) -> Iterable[Finding]:
    """Proves equal MTU on both ends, RoCE devices Up, and cables not crossed between twins."""
    for name, node_facts in reachable_nodes(facts):
        if rdma.DEVICES not in node_facts:
            continue
        devices = node_facts.get(rdma.DEVICES)
        for twin in facts.inventory.node(name).links:
            if not isinstance(devices, dict):
                yield warn("links.rdma", name, f"ibdev2netdev failed ({devices})", "install rdma-core / DOCA-OFED")
            elif twin not in devices:
                yield fail("links.rdma", name, f"{twin} has no RoCE device")
            else:
                link = devices[twin]
                yield (ok("links.rdma", name, f"{link.device} port {link.port} ==> {twin} (Up)") if link.up else
                       fail("links.rdma", name, f"{link.device} port {link.port} ==> {twin} (Down)",
                            f"check the cable of {twin} on {name}"))
    whole = facts.whole
    if len(facts.reachable()) < 2:
        yield skip("links.mtu-match", whole, "needs both nodes" if whole == "pair" else "needs two nodes")
        yield skip("links.crossed", whole, "needs both nodes" if whole == "pair" else "needs two nodes")
        return
    yield from _mtu_match(facts, whole)
    yield from judge_crossing(facts)


def _mtu_match(facts: Facts, whole: str) -> Iterable[Finding]:
    """Both ends of every expected link at one MTU."""
    mtu = facts.inventory.cluster.mtu
    for link in facts.inventory.links():
        a, b = interfaces_of(facts, link.node_a).get(link.port_a), interfaces_of(facts, link.node_b).get(link.port_b)
        pair = whole == "pair"
        what = link.port_a if pair else f"{link.node_a} {link.port_a} - {link.node_b} {link.port_b}"
        if a is None or b is None:
            yield skip("links.mtu-match", whole, f"{what} missing on a node")
        elif a.mtu == b.mtu:
            yield ok("links.mtu-match", whole, f"{what} mtu {a.mtu} on both")
        else:
            ends = ((link.node_a, link.port_a, a), (link.node_b, link.port_b, b))
            if pair:
                off = " and ".join(n for n, _, i in ends if i.mtu != mtu) or "both nodes"
                change = f"sets {link.port_a} of {off} to mtu {mtu}"
            else:
                off = " and ".join(f"{p} of {n}" for n, p, i in ends if i.mtu != mtu)
                change = f"sets {off or ' and '.join(f'{p} of {n}' for n, p, _ in ends)} to mtu {mtu}"
            yield fail("links.mtu-match", whole, f"{what} mtu {a.mtu} on {link.node_a}, {b.mtu} on {link.node_b}",
                       setup(change), SETUP_NETWORK)


def check_path(facts: Facts) -> Iterable[Finding]:
    """Proves each address every twin should reach answers pings, and full-MTU pings pass with don't-fragment
    set (a pair: the peer's twin; a ring or a switch: every other node's interface in the twin's subnet)."""
    size = facts.inventory.cluster.mtu - 28
    for check in ("path.ping", "path.mtu"):
        yield from unreachable_skips(facts, check)
    for name, node_facts in reachable_nodes(facts):
        node = facts.inventory.node(name)
        for end in link_ends(facts.inventory, node):
            twin, target, peer = end.port, end.address, end.peer
            plain = node_facts.get(ping_probe(facts.inventory, node, twin, address=target))
            full = node_facts.get(ping_probe(facts.inventory, node, twin, full_mtu=True, address=target))
            if not isinstance(plain, PingResult) or not plain.ok:
                yield fail("path.ping", name, f"{twin} -> {target}: no reply ({_ping_text(plain)})",
                           f"check the links.* rows of {twin} on {name} and {peer.name}; then {SETUP}")
                yield skip("path.mtu", name, f"{twin} -> {target}: no plain reply")
                continue
            yield ok("path.ping", name, f"{twin} -> {target}: {plain.avg_ms} ms{_losses(plain)}")
            yield (ok("path.mtu", name, f"{twin} -> {target}: {size + 28}-byte packets pass unfragmented"
                                        f"{_losses(full)}")
                   if isinstance(full, PingResult) and full.ok else
                   fail("path.mtu", name, f"{twin} -> {target}: {size + 28}-byte don't-fragment pings fail "
                                          "(MTU differs somewhere on the path)",
                        setup(f"sets {twin} to mtu {size + 28} on {name} and {peer.name}"), SETUP_NETWORK))


def check_trust(facts: Facts) -> Iterable[Finding]:
    """Proves ssh -o BatchMode=yes works from each node to every QSFP address of each neighbour (a full mesh in
    a ring or through a switch): a login over its first address, and for each other address host keys pinned
    that agree with the first's (`trust_probes`)."""
    yield from unreachable_skips(facts, "trust.ssh")
    for name, node_facts in reachable_nodes(facts):
        node = facts.inventory.node(name)
        for peer in facts.inventory.neighbours(node):
            yield from _trust_in(name, peer.name, peer_addresses(facts.inventory, node, peer), node_facts)


def _trust_in(name: str, peer: str, addresses: list[str], node_facts: NodeFacts) -> Iterable[Finding]:
    """trust.ssh from node name to one neighbour: the login over its first address, the pins of the others."""
    first, *others = addresses
    login = node_facts.get(net.ssh_batch(first))
    if isinstance(login, ProbeFailure) or login is None:
        last = last_line(login.stderr, str(login)) if isinstance(login, ProbeFailure) else "not probed"
        yield fail("trust.ssh", name, f"ssh {first}: {last}", _trust_fix(name, peer, first, last))
        return
    yield ok("trust.ssh", name, f"ssh {first} -> {login}")
    proven = node_facts.value(net.known_host(first)) or ()
    for address in others:
        yield _pinned_like(name, peer, address, first, node_facts.get(net.known_host(address)), proven)


def _pinned_like(name: str, peer: str, address: str, first: str, pinned: object,
                 proven: tuple[tuple[str, str], ...]) -> Finding:
    """trust.ssh for a peer address node does not log in over: its pinned host keys must agree with first's."""
    if not isinstance(pinned, tuple):
        return fail("trust.ssh", name, f"ssh {address}: cannot read known_hosts ({pinned or 'not probed'})",
                    setup(f"records {peer}'s host key for {address} on {name}"))
    if not pinned:
        return fail("trust.ssh", name, f"ssh {address}: Host key for {address} is not in known_hosts",
                    setup(f"records {peer}'s host key for {address} on {name}"))
    proven_by_type = dict(proven)
    clashing = [kind for kind, body in pinned if kind in proven_by_type and proven_by_type[kind] != body]
    if clashing or not set(pinned) & set(proven):
        return fail("trust.ssh", name, f"ssh {address}: the host key pinned for {address} "
                                       f"({', '.join(clashing) or 'every type'}) differs from {first}'s, which {peer} proved",
                    setup(f"records {peer}'s host key for {address} on {name}"))
    return ok("trust.ssh", name, f"ssh {address}: host key pinned as for {first} (login proven over {first})")


def _losses(result: PingResult) -> str:
    return f" ({result.lost} of {result.sent} echoes lost)" if result.lost else ""


def _ping_text(result: object) -> str:
    if isinstance(result, PingResult):
        return f"{result.received} of {result.sent} answered"
    return str(result)


def _trust_fix(name: str, peer: str, address: str, error: str) -> str:
    """What setup-network will do about an ssh failure from name to the peer's address."""
    if "Permission denied" in error:
        return setup(f"authorizes {name}'s key on {peer}")
    if "Connection refused" in error:
        return f"start sshd on {peer} (sudo systemctl start ssh)"
    if "Host key" in error or "host key" in error:
        return setup(f"records {peer}'s host key for {address} on {name}")
    return f"check path.ping from {name} to {address}; then {SETUP}"
