"""Network facts: interfaces and addresses, routes, neighbours, netplan files, pings (RDMA: `rdma`)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from sparkpair import boundedjson
from sparkpair.probes import Probe, parse_sections, printable
from sparkpair.transport import Root, Shell

NETPLAN_KINDS = ("ethernets", "bonds", "bridges", "vlans", "wifis")
NETPLAN_DIR = "/etc/netplan/"


@dataclass(frozen=True)
class Address:
    """One address on an interface, as `ip -j addr` reports it."""

    ip: str
    prefixlen: int
    family: str
    dynamic: bool

    def __str__(self) -> str:
        return f"{self.ip}/{self.prefixlen}"


@dataclass(frozen=True)
class Interface:
    """A network interface: link state, MTU, MAC and addresses."""

    name: str
    mac: str
    mtu: int
    admin_up: bool
    carrier: bool
    addresses: tuple[Address, ...]

    @property
    def ipv4(self) -> list[str]:
        return [str(a) for a in self.addresses if a.family == "inet"]


def parse_interfaces(text: str) -> dict[str, Interface]:
    """Parse `ip -j addr show`.

    Sample: [{"ifname":"enp1s0f1np1","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":9000,
    "operstate":"UP","address":"3c:6d:66:cc:b3:b7","addr_info":[{"family":"inet","local":"192.168.200.12",
    "prefixlen":24,"scope":"global","valid_life_time":4294967295}]}]
    """
    interfaces = {}
    for item in boundedjson.loads(text or "[]"):
        flags = set(item.get("flags", []))
        addresses = tuple(
            Address(a["local"], int(a["prefixlen"]), a["family"], bool(a.get("dynamic")))
            for a in item.get("addr_info", []) if "local" in a)
        interfaces[item["ifname"]] = Interface(
            name=item["ifname"], mac=item.get("address", ""), mtu=int(item.get("mtu", 0)),
            admin_up="UP" in flags, carrier="LOWER_UP" in flags and "NO-CARRIER" not in flags,
            addresses=addresses)
    return interfaces


def parse_default_routes(text: str) -> list[str]:
    """Parse `ip -j route show default`: the interfaces default routes leave through."""
    return [route["dev"] for route in boundedjson.loads(text or "[]") if "dev" in route]


def parse_ssh_session(text: str) -> str:
    """Parse $SSH_CONNECTION (`client_ip client_port server_ip server_port`): the server address."""
    fields = text.split()
    return fields[2] if len(fields) == 4 else ""


@dataclass(frozen=True)
class Route:
    """One route as `ip -j route show` or `ip -j route get` reports it: where to (`default`, a
    subnet, or an address), out of which interface, through which gateway (None: on-link)."""

    dst: str
    dev: str
    gateway: str | None
    prefsrc: str | None


def parse_routes(text: str) -> list[Route]:
    """Parse `ip -j route show` or `ip -j route get ADDRESS` (no output: no routes).

    Sample (route get, tests/fixtures/probes/ip-route-get-via.json): [{"dst":"198.18.0.1",
    "gateway":"198.18.0.12","dev":"enP7s7","prefsrc":"198.18.0.11","flags":[],"uid":0,"cache":[]}]
    """
    return [Route(str(item.get("dst", "")), str(item.get("dev", "")), item.get("gateway"), item.get("prefsrc"))
            for item in boundedjson.loads(text or "[]") if isinstance(item, dict)]


def parse_neighbors(text: str) -> dict[tuple[str, str], str]:
    """Parse `ip -j neigh show`: (interface, ip) -> MAC of the neighbour that answered."""
    return {(n["dev"], n["dst"]): n["lladdr"] for n in boundedjson.loads(text or "[]") if "lladdr" in n and "dev" in n}


@dataclass(frozen=True)
class NetplanFile:
    """A netplan YAML file, the interfaces it configures and the addresses of its ethernets stanzas."""

    path: str
    content: str
    interfaces: frozenset[str]
    addresses: dict[str, tuple[str, ...]]  # ethernets stanza key -> its `addresses:`, as written

    @classmethod
    def read(cls, path: str, content: str) -> NetplanFile:
        """The file at path holding content, its YAML read once."""
        addresses = {key: _addresses_of(spec) for kind, key, spec in _netplan_stanzas(content) if kind == "ethernets"}
        return cls(path, content, frozenset(netplan_interfaces(content)), addresses)


def parse_netplan_files(text: str) -> dict[str, NetplanFile]:
    """Parse the netplan files, one section each (`probes.section`, named by path); raises ValueError for a
    path that is not a plain file under /etc/netplan/ (setup-network would write or remove it)."""
    files = {}
    for path, content in parse_sections(text).items():
        if not is_netplan_path(path):
            raise ValueError(f"refused the netplan path {path!r}: not a plain file under {NETPLAN_DIR}")
        files[path] = NetplanFile.read(path, content)
    return files


def is_netplan_path(path: str) -> bool:
    """True when path names a plain file directly in /etc/netplan/: no other directory, no `..`, no control
    character (what setup-network may back up, rewrite or remove)."""
    name = path.removeprefix(NETPLAN_DIR)
    return path.startswith(NETPLAN_DIR) and name not in ("", ".", "..") and "/" not in name and printable(name)


def _addresses_of(spec: dict[str, Any]) -> tuple[str, ...]:
    listed = spec.get("addresses")
    return tuple(str(address) for address in listed) if isinstance(listed, list) else ()


# libyaml's parser when PyYAML has it (its wheels do): a netplan file reads in a tenth of the time.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.lru_cache(maxsize=32)
def _netplan_document(content: str) -> Any:
    """The parsed document (shared: read-only for every caller), or None for unreadable YAML."""
    try:
        return yaml.load(content, Loader=_YAML_LOADER) or {}  # noqa: S506 (a safe loader)
    except yaml.YAMLError:
        return None


def _netplan_stanzas(content: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(kind, key, settings) of every interface stanza of a netplan document (unreadable YAML has none)."""
    document = _netplan_document(content)
    if document is None:
        return
    network = document.get("network", {}) if isinstance(document, dict) else {}
    for kind in NETPLAN_KINDS:
        section = network.get(kind) if isinstance(network, dict) else None
        for key, spec in (section or {}).items() if isinstance(section, dict) else ():
            yield kind, str(key), spec if isinstance(spec, dict) else {}


def _named_in(spec: dict[str, Any]) -> set[str]:
    """Interfaces a stanza names besides its key: `match: name:` and a bond's or bridge's `interfaces:`."""
    match = spec.get("match", {})
    names = {match["name"]} if isinstance(match, dict) and isinstance(match.get("name"), str) else set()
    return names | ({str(i) for i in spec["interfaces"]} if isinstance(spec.get("interfaces"), list) else set())


def netplan_interfaces(content: str) -> set[str]:
    """Names of the interfaces a netplan document configures (unreadable YAML configures none)."""
    names: set[str] = set()
    for _, key, spec in _netplan_stanzas(content):
        names |= {key} | _named_in(spec)
    return names


def netplan_indirect(content: str) -> set[str]:
    """Interfaces a document configures other than by a stanza keyed by their name: through `match: name:`,
    a bond's or bridge's `interfaces:`, a vlan's `link:`, or under wifis (what --replace cannot cut out)."""
    names: set[str] = set()
    for kind, key, spec in _netplan_stanzas(content):
        names |= _named_in(spec) - {key}
        names |= {str(spec["link"])} if "link" in spec else set()
        names |= {key} if kind == "wifis" else set()
    return names


@dataclass(frozen=True)
class Ethtool:
    speed_mbps: int | None
    link_detected: bool


def parse_ethtool(text: str) -> Ethtool:
    """Parse `ethtool IFACE`: `Speed: 200000Mb/s` (100000Mb/s on a port a switch negotiated down,
    `Unknown!` without carrier) and `Link detected: yes`."""
    speed = re.search(r"Speed:\s*(\d+)Mb/s", text)
    link = re.search(r"Link detected:\s*(yes|no)", text)
    return Ethtool(int(speed.group(1)) if speed else None, bool(link and link.group(1) == "yes"))


@dataclass(frozen=True)
class PingResult:
    sent: int
    received: int
    avg_ms: float | None

    @property
    def ok(self) -> bool:
        """At least one echo came back: the path (and, for a don't-fragment ping, its MTU) works.

        A wrong MTU, address or cable loses every echo; losing only some is load, not a broken path,
        and is reported beside the OK (`lost`), never as a failure."""
        return self.received > 0

    @property
    def lost(self) -> int:
        return self.sent - self.received


def parse_ping(text: str) -> PingResult:
    """Parse ping's summary: `2 packets transmitted, 2 received` (iputils adds `, +1 errors` after a local
    `message too long`) and `rtt min/avg/max/mdev = a/b/c/d ms`.

    Output cut before the summary (a ping interrupted, or an excerpt) counts its reply lines
    (`8980 bytes from 192.168.100.11: icmp_seq=1 ttl=64 time=0.644 ms`)."""
    counts = re.search(r"(\d+) packets transmitted, (\d+) (?:packets )?received", text)
    rtt = re.search(r"= [\d.]+/([\d.]+)/", text)
    if counts:
        return PingResult(int(counts.group(1)), int(counts.group(2)), float(rtt.group(1)) if rtt else None)
    times = [float(t) for t in re.findall(r"^\d+ bytes from .*? time=([\d.]+) ms", text, re.MULTILINE)]
    return PingResult(len(times), len(times), sum(times) / len(times) if times else None)


INTERFACES = Probe("interfaces", (), Shell("ip -j addr show"), parse_interfaces)
DEFAULT_ROUTES = Probe("default routes", (), Shell("ip -j route show default"), parse_default_routes)
SSH_SESSION = Probe("ssh session", (), Shell('printf "%s" "$SSH_CONNECTION"'), parse_ssh_session)
NEIGHBORS = Probe("neighbors", (), Shell("ip -j neigh show"), parse_neighbors)
ROUTES = Probe("routes", (), Shell("ip -j route show"), parse_routes)
# The route this SSH session's replies take: `ip -j route get` of the client side of $SSH_CONNECTION
# (the operator's address as the node sees it, the `dst` of the answer); nothing outside SSH.
SESSION_ROUTE = Probe("session route", (), Shell('set -- $SSH_CONNECTION; [ -z "$1" ] || ip -j route get "$1"'),
                      parse_routes)
# Root reads them (netplan files are root's, 0600): the helper prints each as a `section`.
NETPLAN_FILES = Probe("netplan files", (), Root("netplan-files"), parse_netplan_files)


def ethtool(interface: str) -> Probe[Ethtool]:
    return Probe("ethtool", (interface,), Shell("ethtool {}", interface), parse_ethtool)


def ping(interface: str, address: str, size: int | None = None) -> Probe[PingResult]:
    """Ping address out of interface; with size, a don't-fragment ping of that payload.

    Three echoes 50 ms apart (iputils lets an unprivileged user go down to 2 ms): about 0.1 s,
    where ping's default 1 s interval, or even 0.2 s, made the pings the slowest of doctor's probes.
    """
    if size is None:
        command = Shell("ping -n -c 3 -i 0.05 -W 1 -I {} {}", interface, address)
    else:
        command = Shell("ping -n -M do -s {} -c 3 -i 0.05 -W 1 -I {} {}", size, interface, address)
    return Probe("ping", (interface, address, size), command, parse_ping, ok_codes=(0, 1), waits=True)


def parse_hostname(text: str) -> str:
    """The hostname a command printed."""
    return text.strip()


SSH_PROBE_S = 15


def ssh_batch(address: str) -> Probe[str]:
    """Non-interactive SSH from this node to address, host key checked strictly.

    curve25519 goes first because OpenSSH 9's default key exchange (sntrup761) costs about 0.1 s
    of CPU on each end, which doubled doctor's probe round; the defaults still follow it.
    ConnectTimeout bounds only the TCP connect: a peer whose sshd accepts and then hangs (in PAM, say)
    would hold the whole round, so the login gets SSH_PROBE_S seconds in all.
    """
    command = Shell(f"timeout {SSH_PROBE_S} ssh -n -o BatchMode=yes -o ConnectTimeout=5 -o StrictHostKeyChecking=yes "
                    "-o KexAlgorithms=^curve25519-sha256 {} hostname || { r=$?; "
                    f"[ $r -eq 124 ] && echo 'the login did not finish within {SSH_PROBE_S} s' >&2; exit $r; }}",
                    address)
    return Probe("ssh", (address,), command, parse_hostname, waits=True)



def holds_address(twin: str, address: str) -> Shell:
    """A shell test, true when twin holds address (`198.19.1.11/24`) now: what a probe that needs the QSFP
    link configured runs first, instead of waiting out a timeout on a node not set up yet."""
    return Shell("ip -o -4 addr show dev {} 2>/dev/null | grep -qF {}", twin, f" {address} ")


def parse_known_host(text: str) -> tuple[tuple[str, str], ...]:
    """The (key type, base64) pairs `ssh-keygen -F ADDRESS` finds in known_hosts (its `#` lines skipped)."""
    keys = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and not line.startswith(("#", "@")):
            keys.append((fields[1], fields[2]))
    return tuple(sorted(set(keys)))


def known_host(address: str) -> Probe[tuple[tuple[str, str], ...]]:
    """The host keys this node's ~/.ssh/known_hosts pins for address (hashed entries included; none: empty)."""
    return Probe("known host", (address,), Shell("ssh-keygen -F {} -f ~/.ssh/known_hosts", address), parse_known_host,
                 ok_codes=(0, 1))


_ONE_PING = "ping -n -c 1 -W 1 -I {} {} >/dev/null 2>&1"


def crossing(links: dict[str, str], otherwise: dict[str, str] | None = None) -> Probe[dict[tuple[str, str], str]]:
    """Ping each peer twin address out of the same-named local twin, then read which MAC answered.

    links: local twin -> the address it should reach (a pair: the peer's twin of that name).
    otherwise (a ring): local twin -> the other neighbour's address, pinged out of the twin only when the
    address it should reach does not answer, every twin at once: a cable that reaches the other neighbour is
    heard by its MAC, and a healthy ring pays nothing for it (a wrong node answers only for its own address).
    """
    if not otherwise:
        pings = Shell.compose([Shell(_ONE_PING, twin, address) for twin, address in links.items()])
        return Probe("crossing", tuple(sorted(links.items())), Shell.compose([pings, NEIGHBORS.command]),
                     parse_neighbors, waits=True)
    tries = [Shell.compose([Shell("{ " + _ONE_PING, twin, address), Shell(_ONE_PING, twin, otherwise[twin]),
                            Shell("true; } &")], " || ") if twin in otherwise else Shell(_ONE_PING + " &", twin, address)
             for twin, address in links.items()]
    tried = tuple(sorted(links.items())) + tuple(("otherwise", twin, address) for twin, address in sorted(otherwise.items()))
    return Probe("crossing", tried, Shell.compose([*tries, Shell("wait;"), NEIGHBORS.command], " "), parse_neighbors,
                 waits=True)
