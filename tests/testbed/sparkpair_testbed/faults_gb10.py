"""Faults in what a node has left: its unified memory and its disk (see gb10.py).

memory-low: a process has taken the node's memory: its /proc/meminfo (a bind mount of NODE_DIR/meminfo,
rewritten in place) shows MemAvailable of --gib GiB (default 40), MemFree and the anonymous-memory
counters moved by as much. memory-exhausted: the same while the engine serves, down to --gib GiB (default
2.8), and the node's /proc/pressure/memory (a bind mount of NODE_DIR/pressure-memory) shows every task
stalled on memory --pressure % of the time (default 41): the figures a Spark shows before its unified
memory runs out. disk-low: the node's Spark NVMe is nearly full: the df stand-in shows at
most --gib GiB (default 40) free on it. Both are what the node's own tools show (`free`, `df`), never
a flag sparkpair reads.
"""
from __future__ import annotations

import json

from . import gb10
from .hostexec import CommandError, node_run
from .layout import Node

DEFAULT_GIB = 40
EXHAUSTED_GIB = 2.8      # memory-exhausted: MemAvailable left
EXHAUSTED_PRESSURE = 41  # memory-exhausted: PSI full avg10, %


def gib_option(options) -> float:
    """The --gib option (a positive number), or the default."""
    value = float(options.get("gib") or DEFAULT_GIB)
    if value <= 0:
        raise CommandError(f"--gib must be positive, not {value:g}")
    return value


def memory_low_apply(node: Node, options) -> dict:
    """Rewrite the node's meminfo in place so that MemAvailable reads --gib GiB."""
    source = node.dir / "meminfo"
    before = source.read_text()
    try:
        after = gb10.with_memory_taken(before, gib_option(options))
    except ValueError as exc:
        raise CommandError(f"{node.name}: {exc}") from exc
    with open(source, "r+") as handle:  # the same inode: the bind mount over /proc/meminfo shows it
        handle.write(after)
        handle.truncate()
    return {"meminfo": before}


def memory_low_heal(node: Node, data, others) -> None:
    """Give the node its memory back (the meminfo as it was)."""
    with open(node.dir / "meminfo", "r+") as handle:
        handle.write(data["meminfo"])
        handle.truncate()


def _rewrite(path, text: str) -> None:
    with open(path, "r+") as handle:  # the same inode: the bind mount shows it at once
        handle.write(text)
        handle.truncate()


def memory_exhausted_apply(node: Node, options) -> dict:
    """MemAvailable --gib GiB (default 2.8) and PSI full avg10 --pressure % (default 41) on the node, at once."""
    meminfo, pressure = node.dir / "meminfo", node.dir / "pressure-memory"
    before = {"meminfo": meminfo.read_text(), "pressure": pressure.read_text()}
    try:
        after = gb10.with_memory_taken(before["meminfo"], float(options.get("gib") or EXHAUSTED_GIB))
    except ValueError as exc:
        raise CommandError(f"{node.name}: {exc}") from exc
    full = float(options.get("pressure") or EXHAUSTED_PRESSURE)
    if not 0 <= full <= 100:
        raise CommandError(f"--pressure must be a percentage, not {full:g}")
    _rewrite(pressure, gb10.with_pressure(before["pressure"], full))
    _rewrite(meminfo, after)
    return before


def memory_exhausted_heal(node: Node, data, others) -> None:
    """The node's memory and pressure as they were."""
    _rewrite(node.dir / "meminfo", data["meminfo"])
    _rewrite(node.dir / "pressure-memory", data["pressure"])


def disk_low_apply(node: Node, options) -> dict:
    """Cap the free space the node's disk shows at --gib GiB."""
    before = node_run(node, ["cat", gb10.DISK_STATE]).stdout
    cap = int(gib_option(options) * gb10.GIB)
    state = json.loads(before)
    state["free_cap"] = cap
    node_run(node, ["sh", "-c", f"cat > {gb10.DISK_STATE}"], input=json.dumps(state, indent=2) + "\n")
    return {"disk": before}


def disk_low_heal(node: Node, data, others) -> None:
    """The node's disk as it was."""
    node_run(node, ["sh", "-c", f"cat > {gb10.DISK_STATE}"], input=data["disk"])
