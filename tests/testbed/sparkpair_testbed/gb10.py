"""The hardware figures a simulated node shows as a DGX Spark: its GB10 unified memory and its NVMe disk.

Memory. A node's /proc/meminfo is a bind mount of NODE_DIR/meminfo (see nodefs.mount_node_facts),
so `free`, `cat /proc/meminfo` and dockerd read a GB10's ~119.6 GiB instead of this machine's RAM.
MEMINFO is derived from a real GB10's `free -b` (Lenovo ThinkStation PGX, DGX OS;
jethac/dgx-spark-hijinks, results/litert_lm_cpu_e2b_bench_256p64d_telemetry.json @ 29166059,
post_memory.free.stdout):

                   total         used         free      shared   buff/cache    available
    Mem:    128452014080   4386963456  90922250240     8867840  34739163136 124065050624
    Swap:    17179865088    340000768  16839864320

by procps-ng 4's own arithmetic, in kB (bytes / 1024): MemTotal = total, MemFree = free,
MemAvailable = available (used = MemTotal - MemAvailable), Shmem = shared, Buffers + Cached +
SReclaimable = buff/cache, SwapTotal and SwapFree. How buff/cache splits, and every field `free`
does not print, are hand-made values consistent with that state (arm64: CmaTotal/CmaFree, no
DirectMap lines); the field names and order are those of a 6.x arm64 kernel.

Memory pressure. The node's /proc/pressure/memory (the kernel's PSI) is a bind mount of
NODE_DIR/pressure-memory in the same way, where the host's kernel has PSI. PRESSURE is a real idle
machine's `cat /proc/pressure/memory` (simplified.guide, "Check memory pressure in Linux", fetched
for this project): nothing stalled. `with_pressure` writes what a node under pressure shows; its
figures are hand-made, in the kernel's format (`%lu.%02lu` percentages, `total=` microseconds).

Disk. A real Spark keeps everything on one ext4 partition, `/dev/nvme0n1p2 3.7T ... /` in `df -h`.
The node's files live on this machine's disk, which is far smaller, so the `df` stand-in
(standins/df) shows the node's root filesystem as that partition: DISK_BYTES big, with this
machine's real usage of it as used, less whatever a disk-low fault took (the node's
/run/sparkpair-testbed/disk.json). Any other filesystem (a tmpfs, the disk-full fault's) shows as it is.
"""
from __future__ import annotations

import json
import re

GIB = 1024 ** 3
KIB_PER_GIB = 1024 * 1024

MEMINFO_KB = (  # kB; marked lines from the real free -b above, the rest hand-made
    ("MemTotal", 125441420),          # free -b: total 128452014080
    ("MemFree", 88791260),            # free -b: free 90922250240
    ("MemAvailable", 121157276),      # free -b: available 124065050624
    ("Buffers", 1103840),             # Buffers + Cached + SReclaimable = free -b buff/cache 34739163136
    ("Cached", 32008784),
    ("SwapCached", 21504),
    ("Active", 10705228),
    ("Inactive", 24868568),
    ("Active(anon)", 1602348),
    ("Inactive(anon)", 867484),
    ("Active(file)", 9102880),
    ("Inactive(file)", 24001084),
    ("Unevictable", 24640),
    ("Mlocked", 24640),
    ("SwapTotal", 16777212),          # free -b: swap total 17179865088
    ("SwapFree", 16445180),           # free -b: swap free 16839864320
    ("Zswap", 0),
    ("Zswapped", 0),
    ("Dirty", 1204),
    ("Writeback", 0),
    ("AnonPages", 2461172),
    ("Mapped", 710336),
    ("Shmem", 8660),                  # free -b: shared 8867840
    ("KReclaimable", 812340),
    ("Slab", 1332700),
    ("SReclaimable", 812340),
    ("SUnreclaim", 520360),
    ("KernelStack", 27456),
    ("PageTables", 41512),
    ("SecPageTables", 0),
    ("NFS_Unstable", 0),
    ("Bounce", 0),
    ("WritebackTmp", 0),
    ("CommitLimit", 79497922),
    ("Committed_AS", 6152688),
    ("VmallocTotal", 133141626880),
    ("VmallocUsed", 101620),
    ("VmallocChunk", 0),
    ("Percpu", 27520),
    ("HardwareCorrupted", 0),
    ("AnonHugePages", 741376),
    ("ShmemHugePages", 0),
    ("ShmemPmdMapped", 0),
    ("FileHugePages", 0),
    ("FilePmdMapped", 0),
    ("CmaTotal", 131072),             # a real Spark's CMA pool (128 MiB)
    ("CmaFree", 69320),
    ("Balloon", 0),
    ("HugePages_Total", 0),
    ("HugePages_Free", 0),
    ("HugePages_Rsvd", 0),
    ("HugePages_Surp", 0),
    ("Hugepagesize", 2048),
    ("Hugetlb", 0),
)


def render_meminfo(values) -> str:
    """(field, kB) pairs as the kernel prints /proc/meminfo: the label padded to 16 columns, the
    number right-aligned in 8, then ` kB` (HugePages_ counts without unit; HardwareCorrupted narrower)."""
    lines = []
    for name, value in values:
        if name.startswith("HugePages_"):
            lines.append(f"{name + ':':<16}{value:>8}")
        elif name == "HardwareCorrupted":
            lines.append(f"{name}: {value:>5} kB")
        else:
            lines.append(f"{name + ':':<16}{value:>8} kB")
    return "\n".join(lines) + "\n"


MEMINFO = render_meminfo(MEMINFO_KB)


PRESSURE = ("some avg10=0.00 avg60=0.00 avg300=0.00 total=1451483\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=1445159\n")


def with_pressure(text: str, full_pct: float) -> str:
    """TEXT (a /proc/pressure/memory) after every task stalled on memory FULL_PCT % of the last 10 s (and some
    task a little more): the avg10 columns move, the longer averages lag behind, the totals grow."""
    totals = [int(m.group(1)) for m in re.finditer(r"total=(\d+)", text)] or [0, 0]
    some_pct = min(100.0, full_pct * 1.5)
    lines = []
    for kind, pct, total in (("some", some_pct, totals[0]), ("full", full_pct, totals[-1])):
        lines.append(f"{kind} avg10={pct:.2f} avg60={pct / 3:.2f} avg300={pct / 12:.2f} "
                     f"total={total + int(pct * 100_000)}")
    return "\n".join(lines) + "\n"


# The fields that hold memory taken by a process (anonymous memory) besides MemFree/MemAvailable.
ANON_FIELDS = ("Active", "Active(anon)", "AnonPages", "Committed_AS")

DISK_DEVICE = "/dev/nvme0n1p2"
DISK_FSTYPE = "ext4"
DISK_BYTES = 4_024_212_553_728     # 3.66 TiB: `df -h` prints 3.7T, as on the real 4 TB NVMe
DISK_RESERVED = DISK_BYTES // 20   # ext4's default 5 % reserved for root (Avail leaves it out)
DISK_STATE = "/run/sparkpair-testbed/disk.json"


def with_memory_taken(text: str, available_gib: float) -> str:
    """TEXT (a /proc/meminfo) after a process took anonymous memory until MemAvailable is AVAILABLE_GIB:
    MemFree and MemAvailable drop by what it took, its anonymous-memory counters grow by as much."""
    values = [(m.group(1), int(m.group(2))) for m in re.finditer(r"^(\S+):\s+(\d+)", text, re.MULTILINE)]
    fields = dict(values)
    taken = fields["MemAvailable"] - int(available_gib * KIB_PER_GIB)
    if taken <= 0:
        raise ValueError(f"MemAvailable is already {fields['MemAvailable'] / KIB_PER_GIB:.1f} GiB")
    changed = {"MemAvailable": fields["MemAvailable"] - taken, "MemFree": max(fields["MemFree"] - taken, 262144)}
    changed.update({name: fields[name] + taken for name in ANON_FIELDS if name in fields})
    return render_meminfo([(name, changed.get(name, value)) for name, value in values])


def disk_state(free_cap: int | None = None) -> str:
    """The node's disk description the df stand-in reads (free_cap: at most that many bytes free)."""
    return json.dumps({"device": DISK_DEVICE, "fstype": DISK_FSTYPE, "size": DISK_BYTES,
                       "reserved": DISK_RESERVED, "free_cap": free_cap}, indent=2) + "\n"
