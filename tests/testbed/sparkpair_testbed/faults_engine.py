"""Engine faults: a start that stalls in NCCL's set-up, a slow load, a wedged engine.

Each one is a real change the stand-in engine meets as a real engine would, never a flag a tool
under test could read: a packet filter in the node that drops NCCL's socket handshakes (the
ranks stay alive, waiting in NCCL's bootstrap), the node's GPU in HW slowdown (every byte the
engine moves to it goes slower, so loading the weights takes about 90 s), the engine's rank on
the node stopped with SIGSTOP (the head keeps answering /health, generation waits for the rank).
apply(node, options) returns what heal(node, data, others) needs.
"""
from __future__ import annotations

import json
import os

from .hostexec import CommandError, node_run
from .layout import GPU_STATE, Node

# A TCP segment whose payload starts with NCCL's socket magic 0x564ab9f2fc4b9d6c, as NCCL sends it
# (little-endian: 6c 9d 4b fc ...) when it opens any socket to a peer (bootstrap, rings).
NCCL_MAGIC_U32 = "0>>22&0x3C@12>>26&0x3C@0=0x6c9d4bfc"
NCCL_DROP = ["-p", "tcp", "-m", "u32", "--u32", NCCL_MAGIC_U32, "-j", "DROP"]
CHAINS = ("INPUT", "OUTPUT")
SLOWDOWN_MHZ = 150           # of 3003 MHz: the stand-in loads about 20x slower (2 s -> 40 s)
RANK_PROGRAM = "trtllm-serve"


def stall_at_nccl_apply(node: Node, options) -> dict:
    """Drop every TCP segment that carries NCCL's socket magic, to and from the node."""
    for chain in CHAINS:
        node_run(node, ["iptables", "-I", chain, *NCCL_DROP])
    return {}


def stall_at_nccl_heal(node: Node, data, others) -> None:
    """Remove the filter rules (each was inserted once)."""
    for chain in CHAINS:
        node_run(node, ["iptables", "-D", chain, *NCCL_DROP], check=False)


def _gpu(node: Node) -> dict:
    found = node_run(node, ["cat", GPU_STATE], check=False)
    if found.returncode != 0:
        raise CommandError(f"{node.name} has no GPU (heal gpu-missing first)")
    return json.loads(found.stdout)


def _write_gpu(node: Node, facts: dict) -> None:
    node_run(node, ["sh", "-c", f"cat > {GPU_STATE}.new && mv -f {GPU_STATE}.new {GPU_STATE}"],
             input=json.dumps(facts, indent=2) + "\n")


def slow_load_apply(node: Node, options) -> dict:
    """The node's GPU in HW slowdown: containers started from now on see it at 150 MHz."""
    facts = _gpu(node)
    _write_gpu(node, {**facts, "hw_slowdown_mhz": SLOWDOWN_MHZ})
    return {"facts": facts}


def slow_load_heal(node: Node, data, others) -> None:
    """The GPU back at full clock (containers started while it was slow keep their copy)."""
    _write_gpu(node, data["facts"])


def rank_pids(node: Node) -> list[int]:
    """Pids (in the node) of the engine's rank processes: python running trtllm-serve."""
    listing = node_run(node, ["ps", "-eo", "pid=,args="]).stdout
    pids = []
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) >= 3 and os.path.basename(fields[1]).startswith("python") \
                and os.path.basename(fields[2]) == RANK_PROGRAM:
            pids.append(int(fields[0]))
    return pids


def engine_wedged_apply(node: Node, options) -> dict:
    """SIGSTOP the engine's rank on the node (it stays alive; nothing it is part of moves)."""
    pids = rank_pids(node)
    if not pids:
        raise CommandError(f"no engine rank ({RANK_PROGRAM}) runs on {node.name}: start the engine first")
    node_run(node, ["kill", "-STOP", *map(str, pids)])
    return {"pids": pids}


def engine_wedged_heal(node: Node, data, others) -> None:
    """SIGCONT what was stopped (processes gone since are fine)."""
    for pid in data["pids"]:
        node_run(node, ["kill", "-CONT", str(pid)], check=False)
