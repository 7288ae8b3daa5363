"""Faults in what a node has left: its unified memory and its disk (see gb10.py).

memory-low: a process has taken the node's memory: its /proc/meminfo (a bind mount of NODE_DIR/meminfo,
rewritten in place) shows MemAvailable of --gib GiB (default 40), MemFree and the anonymous-memory
counters moved by as much. disk-low: the node's Spark NVMe is nearly full: the df stand-in shows at
most --gib GiB (default 40) free on it. Both are what the node's own tools show (`free`, `df`), never
a flag sparkpair reads.
"""
from __future__ import annotations

import json

from . import gb10
from .hostexec import CommandError, node_run
from .layout import Node

DEFAULT_GIB = 40


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
