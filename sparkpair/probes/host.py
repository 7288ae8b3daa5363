"""Host facts: identity and sudo, platform and GPU, memory, disk, clock, listening ports."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparkpair.probes import Probe, expanded_path, printable
from sparkpair.transport import HELPER_PATH, Root, Shell
from sparkpair.transport.root import helper_digest


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


@dataclass(frozen=True)
class RootAccess:
    """How sparkpair gets root on a node: through its root helper, through full sudo, or not at all.

    helper: `ours` (the helper this sparkpair ships is installed and sudo runs it), `denied` (it is installed,
    but sudo -n does not run it), `other` (a file at its path that is not this sparkpair's helper), `absent`.
    full: `sudo -n` runs any command (a NOPASSWD: ALL rule)."""

    helper: str
    full: bool

    @property
    def works(self) -> bool:
        """Whether sparkpair can act as root (the helper, or else the same text through full sudo)."""
        return self.helper == "ours" or self.full


HELPER_STATES = ("ours", "denied", "other", "absent")


def parse_sudo(text: str) -> RootAccess:
    """Parse the ROOT probe's two lines: `helper ours|denied|other|absent` and `full yes|no`."""
    fields = dict(line.split(" ", 1) for line in text.strip().splitlines() if " " in line)
    helper, full = fields.get("helper"), fields.get("full")
    if helper not in HELPER_STATES or full not in ("yes", "no"):
        raise ValueError(f"not the root probe's answer: {text.strip()[:80]!r}")
    return RootAccess(helper, full == "yes")


def parse_key_values(text: str) -> dict[str, str]:
    """Parse KEY="value" lines (/etc/dgx-release, /etc/os-release); a later KEY wins.

    Values may be unquoted and hold spaces (`DGX_PLATFORM=HP ZGX Nano G1n AI Station`): the rest of the line."""
    pairs = re.findall(r'^([A-Z0-9_]+)=(?:"([^"\n]*)"|(.*?))[ \t]*$', text, re.MULTILINE)
    return {key: quoted or bare for key, quoted, bare in pairs}


@dataclass(frozen=True)
class DgxRelease:
    """What /etc/dgx-release says: the product, the DGX OS release it runs and the one it shipped with.

    DGX OS appends a `DGX_OTA_VERSION`/`DGX_OTA_DATE` block (after a blank line) for every OTA update;
    the last one is what runs. A factory image has none."""

    name: str
    pretty_name: str
    version: str
    factory_version: str
    platform: str
    ota_versions: tuple[str, ...]

    @property
    def is_spark(self) -> bool:
        return "Spark" in self.name


def parse_dgx_release(text: str) -> DgxRelease:
    """Parse `cat /etc/dgx-release` (factory layout, or with one or more OTA blocks; quoted or bare values)."""
    values = parse_key_values(text)
    ota = tuple(re.findall(r'^DGX_OTA_VERSION="?([^"\n]*?)"?[ \t]*$', text, re.MULTILINE))
    factory = values.get("DGX_SWBUILD_VERSION", "")
    return DgxRelease(values.get("DGX_NAME", ""), values.get("DGX_PRETTY_NAME", ""), ota[-1] if ota else factory,
                      factory, values.get("DGX_PLATFORM", ""), ota)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    driver: str
    memory_mib: int | None  # None on GB10: unified memory, nvidia-smi prints [N/A]


GPU_FIELDS = ("index", "name", "driver_version", "memory.total")
NOT_A_VALUE = re.compile(r"\[?(N/A|Not Supported|Unknown Error|Insufficient Permissions)\]?")


def parse_gpu_query(text: str, fields: tuple[str, ...]) -> list[dict[str, str | None]]:
    """Parse `nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]`: one dict per GPU row,
    field -> value, None where nvidia-smi prints no value (`[N/A]`, `[Not Supported]`, ...).

    Header lines (`name, memory.total [MiB]`), printed without noheader and once per node when the
    query runs on several nodes (srun), are skipped; units (`[MiB]` in headers, ` MiB` in values) are
    dropped. Samples: tests/fixtures/probes/real/nvidia-smi-query-gpu__*.txt."""
    rows = []
    for line in text.strip().splitlines():
        values = [value.strip() for value in line.split(",")]
        if len(values) < len(fields) or values[0].split(" [")[0] == fields[0]:
            continue
        rows.append({field: None if NOT_A_VALUE.fullmatch(value) else value
                     for field, value in zip(fields, values, strict=False)})
    return rows


def parse_gpus(text: str) -> list[Gpu]:
    """Parse `nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader,nounits`.

    Sample (GB10, unified memory): 0, NVIDIA GB10, 580.95.05, [N/A]
    """
    gpus = []
    for row in parse_gpu_query(text, GPU_FIELDS):
        memory = (row["memory.total"] or "").split(" ")[0]
        gpus.append(Gpu(int(row["index"] or 0), row["name"] or "", row["driver_version"] or "",
                        int(memory) if memory.isdigit() else None))
    return gpus


def parse_meminfo(text: str) -> dict[str, int]:
    """Parse /proc/meminfo into kibibytes per field."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+(?:\(\w+\))?):\s+(\d+)", text, re.MULTILINE)}


def parse_float(text: str) -> float:
    return float(text.strip())


def parse_int(text: str) -> int:
    """The integer on the last line (`df -B1 --output=avail` prints its header `Avail` first)."""
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


IDENTITY = Probe("identity", (), Shell("id -u; id -un; id -Gn; hostname"), parse_identity)
SUDO = Probe("sudo", (), Shell(
    'h={}; if [ ! -e "$h" ]; then echo helper absent; elif [ "$(sha256sum <"$h")" != {} ]; then echo helper other; '
    'elif sudo -n "$h" version >/dev/null 2>&1; then echo helper ours; else echo helper denied; fi; '
    "if sudo -n true >/dev/null 2>&1; then echo full yes; else echo full no; fi",
    HELPER_PATH, f"{helper_digest()}  -"), parse_sudo)
DGX_RELEASE = Probe("dgx-release", (), Shell("cat /etc/dgx-release"), parse_dgx_release)
GPUS = Probe("gpus", (), Shell(f"nvidia-smi --query-gpu={','.join(GPU_FIELDS)} --format=csv,noheader,nounits"),
             parse_gpus)
MEMINFO = Probe("meminfo", (), Shell("cat /proc/meminfo"), parse_meminfo)
CLOCK = Probe("clock", (), Shell("date +%s.%N"), parse_float)
# As root (the helper's `listeners`) ss names every listener's process; without root, only the user's own.
LISTENERS = Probe("listeners", (), Shell.compose([Root("listeners"), Shell("2>/dev/null || ss -Htlnp")], " "),
                  parse_listeners)


def free_bytes(path: str) -> Probe[int]:
    """Free bytes on the filesystem that holds path (or its nearest existing parent; ~ expands)."""
    command = Shell.compose([expanded_path(path), Shell(
        'while [ ! -e "$p" ]; do p=$(dirname "$p"); done; df -B1 --output=avail "$p" | tail -n 1')], "")
    return Probe("free bytes", (path,), command, parse_int)


def parse_yes(text: str) -> bool:
    """True when the command printed `yes`."""
    return text.strip() == "yes"


def path_exists(path: str) -> Probe[bool]:
    """Whether path exists on the node (a file, directory or device; ~ expands)."""
    command = Shell.compose([expanded_path(path), Shell('[ -e "$p" ] && echo yes || echo no')], "")
    return Probe("exists", (path,), command, parse_yes)


def file_nonempty(path: str) -> Probe[bool]:
    """Whether path is a file with content (its content is never read; ~ expands)."""
    command = Shell.compose([expanded_path(path), Shell('[ -s "$p" ] && echo yes || echo no')], "")
    return Probe("nonempty", (path,), command, parse_yes)


INFINIBAND_DEVICES = path_exists("/dev/infiniband")  # the RDMA devices the engine container is given when present


VERSION_CAP = 200  # characters of a version string a node reports that are kept (a longer one is not a version)


def parse_kernel(text: str) -> str:
    """Parse `uname -r` (one line: `6.11.0-1016-nvidia`); raises ValueError for output that is not one
    printable line of at most VERSION_CAP characters (what a node prints never reaches a terminal raw)."""
    lines = text.strip().splitlines()
    if len(lines) != 1 or not lines[0].strip() or len(lines[0]) > VERSION_CAP or not printable(lines[0]):
        raise ValueError("not one printable line")
    return lines[0].strip()


@dataclass(frozen=True)
class GpuVersions:
    """The NVIDIA driver and the CUDA version it supports, as nvidia-smi's table header prints them."""

    driver: str
    cuda: str


GPU_VERSIONS_LINE = re.compile(r"Driver Version: *([0-9][0-9.]{0,30}) +CUDA Version: *([0-9][0-9.]{0,30})")


def parse_gpu_versions(text: str) -> GpuVersions:
    """Parse the header of plain `nvidia-smi`: `| NVIDIA-SMI 580.95.05  Driver Version: 580.95.05  CUDA Version:
    13.0 |` (tests/fixtures/probes/real/nvidia-smi__1.txt). Raises ValueError when no such line is there."""
    found = GPU_VERSIONS_LINE.search(text)
    if found is None:
        raise ValueError("no `Driver Version: ... CUDA Version: ...` line")
    return GpuVersions(found.group(1), found.group(2))


KERNEL = Probe("kernel", (), Shell("uname -r"), parse_kernel)
GPU_VERSIONS = Probe("gpu versions", (), Shell("nvidia-smi | head -c 4096"), parse_gpu_versions)
