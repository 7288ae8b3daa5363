"""The lockout guard: the QSFP twins must never take the path this SSH session needs.

Pure (facts in, lines out), so every case is tested from captured probe output. A plan is refused
(exit 2, nothing changed) when a twin carries this SSH session or the default route, or when a
twin's subnet holds an address the session depends on:

- the operator's address as the node sees it (the client side of `$SSH_CONNECTION`): the node
  would answer the operator through the QSFP cable;
- the node's management address (the server side): the session's own address would move;
- the next hop of the route the session's replies take (`ip route get <client>`): the gateway
  would be looked for behind the cable.

Any other overlap of a twin's subnet with the node's routes (a route to another network, the
default route's gateway) is a warning: it does not cut this session, but something else may stop.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field

from sparkpair.inventory import Node
from sparkpair.probes.net import Interface, Route


@dataclass
class Guard:
    """What the guard found on one node: refusals (the plan must not run) and warnings."""

    refusals: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _address(text: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text) if text else None
    except ValueError:
        return None


def _network(dst: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(dst, strict=False)
    except ValueError:
        return None


def session_addresses(session_server: str, session_route: Sequence[Route]) -> dict[str, str]:
    """What this SSH session depends on, address -> what it is (client, management, next hop)."""
    protected: dict[str, str] = {}
    route = session_route[0] if session_route else None
    if route is not None and _address(route.dst):
        protected[route.dst] = "the operator's address as this node sees the SSH session"
    if _address(session_server):
        protected.setdefault(session_server, "the management address (this SSH session's address on the node)")
    if route is not None and _address(route.gateway):
        via = f"{route.dst} via {route.gateway} dev {route.dev}"
        protected.setdefault(str(route.gateway), f"the next hop of this SSH session's route ({via})")
    return protected


def guard(node: Node, interfaces: dict[str, Interface], default_routes: Sequence[str], session_server: str,
          session_route: Sequence[Route], routes: Sequence[Route]) -> Guard:
    """Refusals and warnings for node's planned twins (see the module docstring)."""
    found = Guard()
    session_devs = {i.name for i in interfaces.values() if any(a.ip == session_server for a in i.addresses)}
    session_devs |= {route.dev for route in session_route[:1] if route.dev}
    for name in node.links:
        if name in session_devs:
            found.refusals.append(f"{node.name}: {name} carries this SSH session ({session_server}); refusing to "
                                  "reconfigure it (lockout guard: fix nodes[].links or nodes[].host)")
        if name in default_routes:
            found.refusals.append(f"{node.name}: {name} carries the default route; refusing to reconfigure it "
                                  "(lockout guard: fix nodes[].links)")
    protected = session_addresses(session_server, session_route)
    listed = ", ".join(protected)
    for name, address in node.links.items():
        subnet = address.network
        fix = (f"fix: nodes[{node.name}].links.{name}: an address in a subnet that holds none of {listed}"
               if listed else f"fix: nodes[{node.name}].links.{name}: another subnet")
        refused = False
        for value, what in protected.items():
            if ipaddress.ip_address(value) in subnet:
                refused = True
                label = "the management address " + value if what.startswith("the management") else f"{value}, {what}"
                found.refusals.append(f"{node.name}: {name}'s subnet {subnet} contains {label}; applying it would "
                                      f"send this SSH session through {name} and cut it (lockout guard; {fix})")
        if not refused:
            found.warnings += _overlaps(node, name, subnet, routes, set(protected))
    return found


def _overlaps(node: Node, name: str, subnet: ipaddress.IPv4Network, routes: Sequence[Route],
              protected: set[str]) -> list[str]:
    """Warnings: routes of the node (not through its own twins) that subnet overlaps or whose gateway it holds."""
    warnings = []
    for route in routes:
        if route.dev in node.links:
            continue
        where = f"via {route.gateway} dev {route.dev}" if route.gateway else f"dev {route.dev}"
        gateway = _address(route.gateway)
        if gateway is not None and gateway in subnet and str(gateway) not in protected:
            target = "the default route" if route.dst == "default" else f"the route to {route.dst}"
            warnings.append(f"{node.name}: {name}'s subnet {subnet} contains the gateway {gateway} of {target} "
                            f"({where}); once applied that gateway is looked for behind {name} (check that "
                            f"nothing needs that route, or give {name} another subnet)")
            continue
        network = None if route.dst == "default" else _network(route.dst)
        if network is not None and network.version == subnet.version and network.overlaps(subnet):
            warnings.append(f"{node.name}: {name}'s subnet {subnet} overlaps the route to {route.dst} ({where}); "
                            f"once applied, some of those addresses may be reached through {name} instead (check "
                            f"that nothing needed lies in both, or give {name} another subnet)")
    return warnings
