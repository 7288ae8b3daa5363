"""What an nccl-tests run printed: NCCL's own `INFO` lines per host and the benchmark's table.

Pure: text in, `NcclRun` out (tests/fixtures/rdma holds the real samples it is proven on:
a healthy GB10 pair at 21.4 GB/s over both RoCE twins, the same pair at 2.82 GB/s after
re-cabling without a reboot, NCCL's `NET/IB : Using [0]rocep1s0f1:1/RoCE [1]roceP2p1s0f1:1/RoCE`,
and socket fallbacks). The judgement of a run is `deep.check_nccl`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

IB, SOCKET = "IB", "Socket"
# `spark-fb97:23491:23491 [0] NCCL INFO NET/IB : Using ...`: host, pid, thread, device, level, message.
NCCL_LINE = re.compile(r"^(?P<host>[^\s:]+):\d+:\d+ \[\d+\] (?:\S+ )?NCCL (?P<level>INFO|WARN) (?P<message>.*)$")
BARE_MESSAGES = ("NET/IB", "NET/Socket", "Using network", "NCCL_IB_", "Failed to initialize NET plugin")
ROW = re.compile(r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+\w+\s+\w+\s+-?\d+\s+"
                 r"\S+\s+(?P<algbw>[\d.]+)\s+(?P<busbw>[\d.]+)\s+\S+\s+"
                 r"\S+\s+(?P<algbw_in>[\d.]+)\s+(?P<busbw_in>[\d.]+)\s+\S+\s*$")
AVERAGE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.]+(?:[eE][-+]?\d+)?)", re.MULTILINE)
OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)", re.MULTILINE)
LIBRARY = re.compile(r"^# nccl-tests version \S{1,40}.{0,60}? nccl-library=([0-9]{4,6})\b", re.MULTILINE)
RANK = re.compile(r"^#\s+Rank\s+(?P<rank>\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(?P<host>\S+)\s+device", re.MULTILINE)


@dataclass
class HostNet:
    """What NCCL said about its network on one host."""

    host: str
    network: str = ""                              # "IB" or "Socket" (`Using network IB`)
    ib_devices: list[str] = field(default_factory=list)      # `NET/IB : Using [0]rocep1s0f1:1/RoCE ...`
    socket_interfaces: list[str] = field(default_factory=list)  # `NET/Socket : Using [0]enp1s0f1np1:...`
    ib_not_found: bool = False                     # `NET/IB : No device found.`
    ib_disabled: bool = False                      # `NCCL_IB_DISABLE set by environment to 1.`
    ib_hca: str = ""                               # `NCCL_IB_HCA set to rocep1s0f1`
    gid_index: int | None = None                   # `NCCL_IB_GID_INDEX set by environment to 3.`
    version: str = ""                              # `NCCL version 2.28.9+cuda13.0`
    warnings: list[str] = field(default_factory=list)   # `NCCL WARN ...`

    @property
    def transport(self) -> str:
        """IB or Socket: what `Using network` said, else what the device lines imply ("" when unknown)."""
        if self.network:
            return self.network
        if self.ib_devices:
            return IB
        return SOCKET if self.socket_interfaces or self.ib_not_found else ""   # no IB device: NCCL takes sockets


@dataclass
class NcclRun:
    """An all_gather_perf run: each host's network, the ranks' hosts, the table and its average."""

    hosts: dict[str, HostNet] = field(default_factory=dict)
    ranks: dict[int, str] = field(default_factory=dict)
    rows: list[tuple[int, float, float]] = field(default_factory=list)   # (bytes, busbw out-of-place, in-place)
    bus_bandwidth: float | None = None            # `# Avg bus bandwidth : 21.4033`, GB/s
    out_of_bounds: int | None = None
    library: str = ""                             # `# nccl-tests version 2.18.3 ... nccl-library=22809`: 2.28.9

    @property
    def transports(self) -> set[str]:
        return {host.transport for host in self.hosts.values() if host.transport}


def _message(line: str) -> tuple[str, str, str] | None:
    """(host, level, message) of an NCCL log line; a bare message (quoted without its prefix) has no host."""
    match = NCCL_LINE.match(line.strip())
    if match:
        return match["host"], match["level"], match["message"].strip()
    if line.strip().startswith(BARE_MESSAGES):
        return "", "INFO", line.strip()
    return None


def _note(host: HostNet, level: str, message: str) -> None:
    """Record what one NCCL message says about the host's network."""
    if level == "WARN":
        host.warnings.append(message)
    elif message.startswith("NET/IB") and " Using " in message:
        host.ib_devices = re.findall(r"\[\d+\]([^:\s\[\]]+):\d+/(?:RoCE|IB)", message)
    elif message.startswith("NET/IB") and "No device found" in message:
        host.ib_not_found = True
    elif message.startswith("NET/Socket") and " Using " in message:
        host.socket_interfaces = re.findall(r"\[\d+\]([^:\s\[\]]+):", message)
    elif (used := re.match(r"Using network (\S+)", message)) is not None:
        host.network = used.group(1)
    elif re.match(r"NCCL_IB_DISABLE set by environment to [1-9]", message):
        host.ib_disabled = True
    elif (hca := re.match(r"NCCL_IB_HCA set (?:by environment )?to (\S+)", message)) is not None:
        host.ib_hca = hca.group(1).rstrip(".")
    elif (gid := re.match(r"NCCL_IB_GID_INDEX set by environment to (-?\d+)", message)) is not None:
        host.gid_index = int(gid.group(1))
    elif (version := re.match(r"NCCL version ([0-9][0-9.]{0,20}[0-9])(?:[+-]\S{0,40})?$", message)) is not None:
        host.version = version.group(1)
    elif not host.network and (via := re.search(r"\bvia NET/(IB|Socket)\b", message)) is not None:
        host.network = via.group(1)                    # `Channel 63/0 : 0[0] -> 1[0] [send] via NET/IB/1`


def _mean(rows: list[tuple[int, float, float]]) -> float | None:
    """nccl-tests' own average of a table whose `# Avg bus bandwidth` line was cut off: the mean of every row's
    out-of-place and in-place bus bandwidth (21.4017 from tests/fixtures/rdma/all_gather_perf__1's rounded rows,
    whose own line says 21.4033 from the unrounded figures)."""
    return round(sum(out + in_place for _, out, in_place in rows) / (2 * len(rows)), 4) if rows else None


def _version_of_code(code: int) -> str:
    """NCCL_VERSION_CODE as a version: 22809 -> 2.28.9 (major * 10000 + minor * 100 + patch, NCCL 2.9 on)."""
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


def parse_nccl_run(text: str) -> NcclRun:
    """Parse an nccl-tests run printed with NCCL_DEBUG=INFO (the INFO lines are optional)."""
    run = NcclRun()
    for line in text.splitlines():
        found = _message(line)
        if found is not None:
            host, level, message = found
            _note(run.hosts.setdefault(host, HostNet(host)), level, message)
            continue
        row = ROW.match(line)
        if row:
            run.rows.append((int(row["size"]), float(row["busbw"]), float(row["busbw_in"])))
    run.ranks = {int(m["rank"]): m["host"] for m in RANK.finditer(text)}
    average = AVERAGE.search(text)
    run.bus_bandwidth = float(average.group(1)) if average else _mean(run.rows)
    library = LIBRARY.search(text)
    run.library = _version_of_code(int(library.group(1))) if library else ""
    bounds = OUT_OF_BOUNDS.search(text)
    run.out_of_bounds = int(bounds.group(1)) if bounds else None
    return run
