"""The simulated ConnectX-7 RDMA driver of a node: /sys/class/infiniband, kept as the kernel keeps it.

A real Spark's kernel shows each RoCE device under /sys/class/infiniband/<dev>/ports/1: `state`
(`4: ACTIVE` while the netdev has carrier), `phys_state`, `link_layer` (`Ethernet`), and a GID
table of 255 entries, `gids/N` with `gid_attrs/types/N` (`IB/RoCE v1`, `RoCE v2`) and
`gid_attrs/ndevs/N`. Entries 0 and 1 hold the default GID made from the netdev's MAC
(fe80::EUI-64); every address the netdev gains takes the first two free entries (v1 then v2), and
an address it loses frees them. So the index of an address's RoCE v2 GID depends on the order in
which the netdev gained its addresses, exactly as on a real node.

This daemon runs inside a node (as root, started by daemons.start_rdma; it dies with the node).
It overmounts /sys/class with a tmpfs holding a bind mount of every real class (so /sys/class/net
and the rest are the kernel's own) plus `infiniband`, a bind of RDMA_TREE in the node's /run. It
watches `ip -o monitor link address` and rewrites the tree from the kernel's state after every
change (and once a second). Faults act on it through RDMA_FAULTS, as a driver's state would: a
twin whose IPv4 GIDs the driver lost (roce-gid-missing). Nothing here is read by the stand-ins but
the tree (ibv_devinfo, ibdev2netdev read /sys/class/infiniband like the real tools).

Only the standard library: it runs under the system /usr/bin/python3 (a copy in the node's dir).
"""
from __future__ import annotations

import ipaddress
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

RUN = Path("/run/sparkpair-testbed")
RDMA_TREE = RUN / "infiniband"          # what /sys/class/infiniband shows in the node
RDMA_FAULTS = RUN / "rdma-faults.json"  # {"lost_ipv4": ["enp1s0f1np1", ...]}
PIDFILE = RUN / "rdmad.pid"
SYS_CLASS = Path("/sys/class")
# netdev -> (RDMA device, PCI function), as ibdev2netdev pairs them on a Spark (in ibv_devinfo's order).
DEVICES = {
    "enp1s0f0np0": ("rocep1s0f0", "0000:01:00.0"),
    "enp1s0f1np1": ("rocep1s0f1", "0000:01:00.1"),
    "enP2p1s0f0np0": ("roceP2p1s0f0", "0002:01:00.0"),
    "enP2p1s0f1np1": ("roceP2p1s0f1", "0002:01:00.1"),
}
GID_SLOTS = 255
V1, V2 = "IB/RoCE v1", "RoCE v2"
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"
FW = "28.45.1020"
BOARD = "NVD0000000087"


def gid_text(address: str) -> str:
    """An address as sysfs prints a GID: IPv4 mapped (::ffff:a.b.c.d), eight groups of four hex digits."""
    ip = ipaddress.ip_address(address)
    packed = (ipaddress.IPv6Address(f"::ffff:{ip}") if ip.version == 4 else ip).packed
    return ":".join(packed[i:i + 2].hex() for i in range(0, 16, 2))


def default_gid(mac: str) -> str:
    """fe80::EUI-64 of a MAC (universal/local bit flipped), the port's default GID."""
    octets = [int(part, 16) for part in mac.split(":")]
    octets[0] ^= 0x02
    eui = octets[:3] + [0xFF, 0xFE] + octets[3:]
    return "fe80:0000:0000:0000:" + ":".join(f"{eui[i]:02x}{eui[i + 1]:02x}" for i in range(0, 8, 2))


def node_guid(mac: str) -> str:
    """The node GUID a ConnectX derives from its MAC: 4c:bb:47:2d:1a:17 -> 4cbb:4703:002d:1a17."""
    octets = mac.split(":")
    raw = "".join(octets[:3]) + "0300" + "".join(octets[3:])
    return ":".join(raw[i:i + 4] for i in range(0, 16, 4))


def read(path: Path, default: str = "") -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return default


def netdevs() -> dict:
    """The twins as the kernel has them now: MAC, carrier, admin state and addresses (in the kernel's order)."""
    proc = subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, text=True)
    found = {}
    for item in json.loads(proc.stdout or "[]"):
        name = item.get("ifname")
        if name not in DEVICES:
            continue
        flags = set(item.get("flags", []))
        addresses = [entry["local"] for entry in item.get("addr_info", []) if "local" in entry]
        found[name] = {"mac": item.get("address", "00:00:00:00:00:00"), "admin_up": "UP" in flags,
                       "carrier": "LOWER_UP" in flags and "NO-CARRIER" not in flags, "addresses": addresses}
    return found


def lost_ipv4() -> set:
    """The twins whose IPv4 GIDs the driver lost (the roce-gid-missing fault)."""
    try:
        return set(json.loads(RDMA_FAULTS.read_text()).get("lost_ipv4", []))
    except (OSError, ValueError):
        return set()


class Port:
    """One device's port 1: its GID table (index -> (gid, type, netdev) or None)."""

    def __init__(self, netdev: str, device: str) -> None:
        self.netdev, self.device = netdev, device
        self.table: list = [None] * GID_SLOTS
        self.loaded = self.load()

    @property
    def dir(self) -> Path:
        return RDMA_TREE / self.device / "ports" / "1"

    def load(self) -> bool:
        """The table the tree already holds (a restarted daemon keeps the history); True when there was one."""
        if not (self.dir / "gids").is_dir():
            return False
        for index in range(GID_SLOTS):
            gid, kind = read(self.dir / "gids" / str(index), ZERO), read(self.dir / "gid_attrs" / "types" / str(index))
            if gid != ZERO and kind:
                self.table[index] = (gid, kind, read(self.dir / "gid_attrs" / "ndevs" / str(index), self.netdev))
        return True

    def free_slot(self) -> int | None:
        return next((index for index, entry in enumerate(self.table) if entry is None), None)

    def update(self, mac: str, addresses: list, lost: bool) -> None:
        """Entries 0 and 1 for the MAC; then free what left, and give each new address the first free slots."""
        default = default_gid(mac)
        self.table[0], self.table[1] = (default, V1, self.netdev), (default, V2, self.netdev)
        wanted = []
        for address in addresses:
            gid = gid_text(address)
            if gid == default or (lost and ipaddress.ip_address(address).version == 4):
                continue
            wanted.append(gid)
        for index in range(2, GID_SLOTS):
            if self.table[index] is not None and self.table[index][0] not in wanted:
                self.table[index] = None
        present = {entry[0] for entry in self.table[2:] if entry is not None}
        for gid in wanted:
            if gid in present:
                continue
            for kind in (V1, V2):
                slot = self.free_slot()
                if slot is None:   # a full table: the kernel logs ENOSPC and the address gets no GID
                    break
                self.table[slot] = (gid, kind, self.netdev)

    def files(self, state: dict, image_guid: str) -> dict:
        """Every file of the device's sysfs directory, relative to RDMA_TREE."""
        base = f"{self.device}/ports/1"
        carrier, up = state.get("carrier", False), state.get("admin_up", False)
        files = {f"{self.device}/node_guid": node_guid(state.get("mac", "00:00:00:00:00:00")),
                 f"{self.device}/sys_image_guid": image_guid,
                 f"{self.device}/fw_ver": FW, f"{self.device}/board_id": BOARD, f"{self.device}/hca_type": "MT4129",
                 f"{self.device}/node_type": "1: CA",
                 f"{base}/state": "4: ACTIVE" if carrier else "1: DOWN",
                 f"{base}/phys_state": "5: LinkUp" if carrier else ("2: Polling" if up else "3: Disabled"),
                 f"{base}/link_layer": "Ethernet", f"{base}/lid": "0x0", f"{base}/sm_lid": "0x0"}
        for index, entry in enumerate(self.table):
            files[f"{base}/gids/{index}"] = entry[0] if entry else ZERO
            if entry:
                files[f"{base}/gid_attrs/types/{index}"] = entry[1]
                files[f"{base}/gid_attrs/ndevs/{index}"] = entry[2]
        return files


class Tree:
    """The files under RDMA_TREE, rewritten only where they change."""

    def __init__(self) -> None:
        self.current: dict = {}
        for path in RDMA_TREE.rglob("*"):
            if path.is_file():
                self.current[str(path.relative_to(RDMA_TREE))] = read(path)

    def write(self, files: dict) -> None:
        for name in sorted(set(self.current) - set(files)):
            (RDMA_TREE / name).unlink(missing_ok=True)
            del self.current[name]
        for name, text in files.items():
            if self.current.get(name) != text:
                path = RDMA_TREE / name
                path.parent.mkdir(parents=True, exist_ok=True)
                temp = path.with_name(f".{path.name}.tmp")
                temp.write_text(text + "\n")
                temp.replace(path)
                self.current[name] = text


def mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"mount {' '.join(args)}: {proc.stderr.strip()}")


def show_in_sysfs() -> None:
    """Make /sys/class/infiniband show RDMA_TREE: a tmpfs over /sys/class with every real class bound back."""
    if (SYS_CLASS / "infiniband").is_dir():
        return
    parking = RUN / "sys-class"
    parking.mkdir(parents=True, exist_ok=True)
    mount("--bind", str(SYS_CLASS), str(parking))
    mount("-t", "tmpfs", "-o", "mode=755,size=64k", "tmpfs", str(SYS_CLASS))
    for entry in sorted(parking.iterdir()):
        (SYS_CLASS / entry.name).mkdir()
        mount("--bind", str(entry), str(SYS_CLASS / entry.name))
    (SYS_CLASS / "infiniband").mkdir()
    mount("--bind", str(RDMA_TREE), str(SYS_CLASS / "infiniband"))
    mount("-o", "remount,ro,bind", str(SYS_CLASS))
    subprocess.run(["umount", "-l", str(parking)], capture_output=True)


def refresh(ports: dict, tree: Tree) -> None:
    """The tree from the kernel's state now."""
    states, lost = netdevs(), lost_ipv4()
    first = next(iter(DEVICES))
    image_guid = node_guid(states.get(first, {}).get("mac", "00:00:00:00:00:00"))  # the adapter's: its first port's
    files = {}
    for netdev, port in ports.items():
        state = states.get(netdev)
        if state is None:
            continue
        port.update(state["mac"], state["addresses"], netdev in lost)
        files.update(port.files(state, image_guid))
    tree.write(files)


def main() -> int:
    RDMA_TREE.mkdir(parents=True, exist_ok=True)
    ports = {netdev: Port(netdev, device) for netdev, (device, _) in DEVICES.items()}
    tree = Tree()
    refresh(ports, tree)
    show_in_sysfs()
    PIDFILE.write_text(f"{os.getpid()}\n")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGHUP, lambda *_: None)   # a fault changed RDMA_FAULTS: the loop below refreshes
    monitor = subprocess.Popen(["ip", "-o", "monitor", "link", "address"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
    assert monitor.stdout is not None
    while True:
        try:
            ready, _, _ = select.select([monitor.stdout], [], [], 1.0)
        except InterruptedError:
            ready = []
        if ready:
            if not os.read(monitor.stdout.fileno(), 65536):   # ip monitor died: poll from now on
                time.sleep(0.5)
        refresh(ports, tree)


if __name__ == "__main__":
    sys.exit(main())
