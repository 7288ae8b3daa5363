"""RDMA facts of a node's ConnectX-7: which RoCE device serves each netdev, its port state and MTU, its GIDs.

Three probes, each the command a real Spark answers, parsed from the real formats
(tests/fixtures/rdma, sources in its SOURCES.md):

- `DEVICES`: `ibdev2netdev`, netdev -> `RoceLink` (device, port, Up/Down), in either line order,
  with or without `-v`.
- `PORTS`: `ibv_devinfo`, (device, port) -> `PortAttributes` (state, max_mtu, active_mtu,
  link_layer). The RoCE MTU (`active_mtu`) is not in sysfs: verbs report it.
- `GID_TABLES`: one `grep` over /sys/class/infiniband/*/ports/* (state, phys_state, link_layer,
  gids/N, gid_attrs/types/N, gid_attrs/ndevs/N), (device, port) -> `PortTable`: the port state and
  every populated GID with its index, type (`IB/RoCE v1`, `RoCE v2`) and netdev.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from sparkpair.probes import Probe, parse_sections, section
from sparkpair.transport import Shell

ROCE_V2 = "RoCE v2"
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
SYSFS = "/sys/class/infiniband"
NO_SYSFS = f"no {SYSFS}"


@dataclass(frozen=True)
class RoceLink:
    """One `ibdev2netdev` line: the RDMA device and port behind a netdev, and the netdev's state."""

    device: str
    port: int
    netdev: str
    up: bool


IBDEV2NETDEV_LINE = re.compile(
    r"^(?:[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d+\s+)?(?P<device>\S+)\b.*?\sport\s+(?P<port>\d+)"
    r"(?:\s+\(\w+\))?\s+==>\s+(?P<netdev>\S+)\s+\((?P<state>\w+)\)\s*$")


def parse_ibdev2netdev(text: str) -> dict[str, RoceLink]:
    """Parse `ibdev2netdev` (or `ibdev2netdev -v`): netdev -> RoceLink; line order does not matter.

    Samples: `rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)`;
    `0000:01:00.1 rocep1s0f1 (MT4129 - MCX750500B-0D00) CX750 fw 28.45.1020 port 1 (ACTIVE) ==> enp1s0f1np1 (Up)`.
    """
    links = {}
    for line in text.splitlines():
        match = IBDEV2NETDEV_LINE.match(line.strip())
        if match:
            links[match["netdev"]] = RoceLink(match["device"], int(match["port"]), match["netdev"],
                                              match["state"] == "Up")
    return links


@dataclass(frozen=True)
class PortAttributes:
    """One port as `ibv_devinfo` reports it."""

    device: str
    port: int
    state: str                 # PORT_ACTIVE, PORT_DOWN, ...
    max_mtu: int | None
    active_mtu: int | None     # the RoCE MTU in use: 4096 needs a netdev MTU of at least 4200
    link_layer: str

    @property
    def active(self) -> bool:
        return self.state == "PORT_ACTIVE"


def _mtu(value: str) -> int | None:
    """`4096 (5)` -> 4096."""
    match = re.match(r"\s*(\d+)", value)
    return int(match.group(1)) if match else None


def parse_ibv_devinfo(text: str) -> dict[tuple[str, int], PortAttributes]:
    """Parse `ibv_devinfo`: (device, port) -> PortAttributes.

    Sample (TAB-indented): `hca_id:\trocep1s0f1` ... `\t\tport:\t1` `\t\t\tstate:\t\t\tPORT_ACTIVE (4)`
    `\t\t\tactive_mtu:\t\t4096 (5)` `\t\t\tlink_layer:\t\tEthernet`.
    """
    ports: dict[tuple[str, int], PortAttributes] = {}
    device, port = "", None
    fields: dict[str, str] = {}

    def close() -> None:
        if device and port is not None:
            ports[(device, port)] = PortAttributes(device, port, fields.get("state", "").split(" ")[0],
                                                   _mtu(fields.get("max_mtu", "")), _mtu(fields.get("active_mtu", "")),
                                                   fields.get("link_layer", ""))

    for line in text.splitlines():
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if key == "hca_id":
            close()
            device, port, fields = value, None, {}
        elif key == "port" and value.isdigit():
            close()
            port, fields = int(value), {}
        elif port is not None and key in ("state", "max_mtu", "active_mtu", "link_layer"):
            fields[key] = value
    close()
    return ports


@dataclass(frozen=True)
class Gid:
    """One populated GID table entry of a RoCE port."""

    index: int
    value: str           # as sysfs prints it: 0000:0000:0000:0000:0000:ffff:c613:010b
    kind: str            # `IB/RoCE v1` or `RoCE v2`
    netdev: str

    @property
    def ipv4(self) -> str | None:
        """The IPv4 address an IPv4-mapped GID carries (`::ffff:a.b.c.d`), else None."""
        try:
            mapped = ipaddress.IPv6Address(self.value).ipv4_mapped
        except ValueError:
            return None
        return None if mapped is None else str(mapped)

    def __str__(self) -> str:
        address = self.ipv4
        return f"::ffff:{address}" if address else str(ipaddress.IPv6Address(self.value))


@dataclass(frozen=True)
class PortTable:
    """One RoCE port as sysfs shows it: state, link layer and its populated GIDs (index order)."""

    device: str
    port: int
    state: str           # ACTIVE, DOWN, INIT, ... (from `4: ACTIVE`)
    phys_state: str      # LinkUp, Disabled, Polling, ...
    link_layer: str
    gids: tuple[Gid, ...]
    slots: int           # how many GID entries the table has (populated or not)

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"

    def roce_v2_gid(self, ipv4: str) -> Gid | None:
        """The RoCE v2 GID carrying this IPv4 address (`::ffff:a.b.c.d`), or None."""
        return next((gid for gid in self.gids if gid.kind == ROCE_V2 and gid.ipv4 == ipv4), None)

    def gids_of(self, ipv4: str) -> list[Gid]:
        """Every GID carrying this IPv4 address, whatever its type."""
        return [gid for gid in self.gids if gid.ipv4 == ipv4]


SYSFS_LINE = re.compile(r"^(?P<device>[^/:\s]+)/ports/(?P<port>\d+)/(?P<attr>state|phys_state|link_layer|gids/\d+|"
                        r"gid_attrs/types/\d+|gid_attrs/ndevs/\d+):(?P<value>.*)$")


def _state_word(value: str) -> str:
    """`4: ACTIVE` -> ACTIVE; `5: LinkUp` -> LinkUp."""
    return value.split(":", 1)[-1].strip()


def parse_gid_tables(text: str) -> dict[tuple[str, int], PortTable]:
    """Parse `grep -s -H .` over the sysfs port attributes, run in /sys/class/infiniband:
    (device, port) -> PortTable. Empty (all-zero) GID entries and those without a type are left out.

    Sample lines: `rocep1s0f1/ports/1/state:4: ACTIVE`,
    `rocep1s0f1/ports/1/gids/3:0000:0000:0000:0000:0000:ffff:c0a8:640a`,
    `rocep1s0f1/ports/1/gid_attrs/types/3:RoCE v2`, `rocep1s0f1/ports/1/gid_attrs/ndevs/3:enp1s0f1np1`.
    """
    if text.strip() == NO_SYSFS:
        return {}
    attrs: dict[tuple[str, int], dict[str, str]] = {}
    entries: dict[tuple[str, int], dict[int, dict[str, str]]] = {}
    for line in text.splitlines():
        match = SYSFS_LINE.match(line.strip())
        if not match:
            continue
        key, attr, value = (match["device"], int(match["port"])), match["attr"], match["value"].strip()
        attrs.setdefault(key, {})
        entries.setdefault(key, {})
        if "/" in attr:
            kind, index = attr.rsplit("/", 1)
            entries[key].setdefault(int(index), {})[kind] = value
        else:
            attrs[key][attr] = value
    tables = {}
    for key, values in attrs.items():
        table = entries[key]
        gids = tuple(Gid(index, entry["gids"], entry["gid_attrs/types"], entry.get("gid_attrs/ndevs", ""))
                     for index, entry in sorted(table.items())
                     if entry.get("gids", ZERO_GID) != ZERO_GID and entry.get("gid_attrs/types"))
        tables[key] = PortTable(key[0], key[1], _state_word(values.get("state", "")),
                                _state_word(values.get("phys_state", "")), values.get("link_layer", ""), gids,
                                sum(1 for entry in table.values() if "gids" in entry))
    return tables


def ipv4_gid_value(ipv4: str) -> str:
    """The sysfs form of the RoCE GID carrying an IPv4 address: 198.19.1.11 -> 0000:...:ffff:c613:010b."""
    packed = ipaddress.IPv6Address(f"::ffff:{ipv4}").packed
    return ":".join(packed[i:i + 2].hex() for i in range(0, 16, 2))


DEVICES = Probe("ibdev2netdev", (), Shell("ibdev2netdev"), parse_ibdev2netdev)
PORTS = Probe("ibv_devinfo", (), Shell("ibv_devinfo"), parse_ibv_devinfo)
# One grep over every port attribute (a port has 255 GID entries: a cat per file would fork ~3000
# times). Empty entries' types are unreadable (EINVAL): grep -s stays quiet and exits 2.
GID_TABLES = Probe("rdma gid tables", (), Shell(
    f"cd {SYSFS} 2>/dev/null || {{ echo '{NO_SYSFS}'; exit 0; }}; "
    "grep -s -H . */ports/*/state */ports/*/phys_state */ports/*/link_layer */ports/*/gids/* "
    "*/ports/*/gid_attrs/types/* */ports/*/gid_attrs/ndevs/*"), parse_gid_tables, ok_codes=(0, 1, 2))


FIRMWARE_VALUE = re.compile(r"[0-9A-Za-z][0-9A-Za-z._ ()-]{0,63}")


def parse_firmware(text: str) -> dict[str, str]:
    """Parse the firmware sections (`probes.section`, one per RDMA device, named by the device): device ->
    the version its fw_ver holds (`28.45.4028` on a Spark's ConnectX-7). A device name or value that is not
    a plain word or version raises ValueError: nothing a node wrote there is shown raw."""
    versions = {}
    for device, content in parse_sections(text).items():
        value = content.strip()
        if not DEVICE_NAME.fullmatch(device) or not FIRMWARE_VALUE.fullmatch(value):
            raise ValueError(f"an RDMA device or firmware that is not a plain name ({len(device)} characters)")
        versions[device] = value
    return versions


DEVICE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# Each device's fw_ver in sysfs (what `ethtool -i` and `ibv_devinfo` report too), where readable.
FIRMWARE = Probe("rdma firmware", (), Shell(
    f"for f in {SYSFS}/*/fw_ver; do [ -r \"$f\" ] || continue; d=${{f%/fw_ver}}; d=${{d##*/}}; "
    + section('"$d"', 'head -c 256 "$f"') + "; done; true"), parse_firmware)
