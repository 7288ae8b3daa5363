"""Host facts: identity and sudo, platform and GPU, memory, disk, clock, listening ports."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparkpair.probes import Probe, expanded_path
from sparkpair.transport import Shell


@dataclass(frozen=True)
class Identity:
    """Who sparkpair is on the node, and the node's hostname."""

    uid: int
    user: str
    groups: frozenset[str]
    hostname: str


def parse_identity(text: str) -> Identity:
    """Parse `id -u; id -un; id -Gn; hostname` (four lines)."""
    uid, user, groups, hostname = text.strip().splitlines()[:4]
    return Identity(int(uid), user, frozenset(groups.split()), hostname.strip())


def parse_sudo(text: str) -> bool:
    """True when `sudo -n true` worked (the probe prints `ok`)."""
    return text.strip() == "ok"


def parse_key_values(text: str) -> dict[str, str]:
    """Parse KEY="value" lines (/etc/dgx-release, /etc/os-release)."""
    pairs = re.findall(r'^([A-Z0-9_]+)=(?:"([^"]*)"|(\S*))', text, re.MULTILINE)
    return {key: quoted or bare for key, quoted, bare in pairs}


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    driver: str
    memory_mib: int | None


def parse_gpus(text: str) -> list[Gpu]:
    """Parse `nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader,nounits`.

    Sample: 0, NVIDIA GB10, 580.95.05, [N/A]   (GB10 has unified memory; memory may read N/A)
    """
    gpus = []
    for line in text.strip().splitlines():
        index, name, driver, memory = (field.strip() for field in line.split(",")[:4])
        gpus.append(Gpu(int(index), name, driver, int(memory) if memory.isdigit() else None))
    return gpus


def parse_meminfo(text: str) -> dict[str, int]:
    """Parse /proc/meminfo into kibibytes per field."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+(?:\(\w+\))?):\s+(\d+)", text, re.MULTILINE)}


def parse_float(text: str) -> float:
    return float(text.strip())


def parse_int(text: str) -> int:
    return int(text.strip().splitlines()[-1])


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket and, when visible, the process that holds it."""

    address: str
    port: int
    process: str


def parse_listeners(text: str) -> list[Listener]:
    """Parse `ss -Htlnp`.

    Sample: LISTEN 0 128 0.0.0.0:8355 0.0.0.0:* users:(("python3",pid=4242,fd=5))
    """
    listeners = []
    for line in text.strip().splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        address, _, port = fields[3].rpartition(":")
        process = re.search(r'users:\(\("([^"]+)",pid=(\d+)', line)
        listeners.append(Listener(address.strip("[]"), int(port), f"{process.group(1)} (pid {process.group(2)})"
                                  if process else "unknown process"))
    return listeners


IDENTITY = Probe("identity", Shell("id -u; id -un; id -Gn; hostname"), parse_identity)
SUDO = Probe("sudo", Shell("sudo -n true >/dev/null 2>&1 && echo ok || echo password-required"), parse_sudo)
DGX_RELEASE = Probe("dgx_release", Shell("cat /etc/dgx-release"), parse_key_values)
GPUS = Probe("gpus", Shell("nvidia-smi --query-gpu=index,name,driver_version,memory.total "
                           "--format=csv,noheader,nounits"), parse_gpus)
MEMINFO = Probe("meminfo", Shell("cat /proc/meminfo"), parse_meminfo)
CLOCK = Probe("clock", Shell("date +%s.%N"), parse_float)
LISTENERS = Probe("listeners", Shell("sudo -n ss -Htlnp 2>/dev/null || ss -Htlnp"), parse_listeners)


def free_bytes(path: str) -> Probe[int]:
    """Free bytes on the filesystem that holds path (or its nearest existing parent; ~ expands)."""
    command = Shell.compose([expanded_path(path), Shell(
        'while [ ! -e "$p" ]; do p=$(dirname "$p"); done; df -B1 --output=avail "$p" | tail -n 1')], "")
    return Probe(f"free {path}", command, parse_int)
