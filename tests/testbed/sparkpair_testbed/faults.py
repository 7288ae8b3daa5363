"""Fault injection: the registry of faults, and recording which are active.

`scripts/testbed fault NAME [--node N] [--port P] [--gib G] [--pressure PCT]` applies one and records it
in /var/lib/sparkpair-testbed/faults.json with what is needed to undo it;
`heal [NAME]` undoes all active faults (or those called NAME), newest first.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from . import faults_cluster as cluster
from . import faults_engine as engine
from . import faults_files as files
from . import faults_gb10 as gb10
from . import faults_net as net
from . import faults_node as nodes
from . import faults_rdma as rdma
from . import faults_strand as strand
from .layout import FAULTS_FILE, HEAD, WORKER
from .layout import node as node_named


@dataclass(frozen=True)
class Fault:
    """One kind of fault: what it does, where by default, how to apply and heal it."""

    name: str
    summary: str
    apply: Callable
    heal: Callable
    default_node: str = WORKER.name


FAULTS = {fault.name: fault for fault in (
    Fault("link-down", "one QSFP twin (enP2p1s0f1np1) loses its link", net.link_down_apply, net.link_heal),
    Fault("cable-unplugged", "the QSFP cable is pulled (both twins, both ends)",
          net.cable_unplugged_apply, net.link_heal),
    Fault("crossed-cables", "twins cabled crosswise (enp1s0f1np1 <-> enP2p1s0f1np1)",
          net.crossed_apply, net.crossed_heal),
    Fault("mtu-mismatch", "the node's enp1s0f1np1 back at MTU 1500", net.mtu_apply, net.mtu_heal),
    Fault("wrong-ip", "the node's enp1s0f1np1 has a wrong address in its subnet",
          net.wrong_ip_apply, net.wrong_ip_heal),
    Fault("port-busy", "a stray listener on the serving port (or --port)",
          nodes.port_busy_apply, nodes.port_busy_heal, HEAD.name),
    Fault("sshd-down", "the node's sshd is stopped", nodes.sshd_down_apply, nodes.sshd_down_heal),
    Fault("docker-down", "the node's Docker engine is stopped",
          nodes.docker_down_apply, nodes.docker_down_heal),
    Fault("peer-key-missing", "the peer's keys are gone from the node's authorized_keys",
          nodes.peer_key_apply, nodes.peer_key_heal),
    Fault("image-missing", "the engine image is removed from the node's engine",
          files.image_missing_apply, files.image_restore),
    Fault("image-mismatch", "a different image under the same tag on the node",
          files.image_mismatch_apply, files.image_mismatch_heal),
    Fault("model-missing-on-worker", "the target model is gone from the node's HF cache",
          files.model_apply, files.model_heal),
    Fault("hf-cache-root-owned", "the node's HF cache belongs to root", files.hf_root_apply,
          files.hf_root_heal),
    Fault("disk-full", "the node's HF cache sits on a full 1 MiB-ish tmpfs",
          files.disk_full_apply, files.disk_full_heal),
    Fault("gpu-missing", "the node's GPU is gone (nvidia-smi: No devices were found)",
          nodes.gpu_missing_apply, nodes.gpu_missing_heal),
    Fault("kernel-string", f"the node reports another kernel (uname -r: {nodes.DRIFTED_KERNEL})",
          nodes.kernel_string_apply, nodes.kernel_string_heal),
    Fault("roce-mtu-1024", "the node's cabled twins at MTU 1500: their RoCE ports run at active_mtu 1024",
          rdma.mtu_1024_apply, rdma.mtu_1024_heal),
    Fault("roce-gid-missing", "the node's RDMA driver holds no GID for enp1s0f1np1's IPv4 address",
          rdma.gid_missing_apply, rdma.gid_missing_heal),
    Fault("roce-gid-differs", "the node's IPv4 RoCE v2 GIDs at index 5 (an IPv6 address came first), not 3",
          rdma.gid_differs_apply, rdma.gid_differs_heal),
    Fault("strand-on-apply", "the node's next netplan apply also cuts its management port (as a bad netplan "
          "file would)", strand.strand_apply, strand.strand_heal),
    Fault("memory-low", "the node's unified memory is taken: MemAvailable --gib GiB (default 40)",
          gb10.memory_low_apply, gb10.memory_low_heal),
    Fault("memory-exhausted", "a process takes the node's memory while the engine serves: MemAvailable --gib GiB "
          "(default 2.8), memory pressure full avg10 --pressure % (default 41)",
          gb10.memory_exhausted_apply, gb10.memory_exhausted_heal),
    Fault("disk-low", "the node's disk is nearly full: at most --gib GiB (default 40) free",
          gb10.disk_low_apply, gb10.disk_low_heal),
    Fault("stall-at-nccl", "NCCL's socket handshakes to and from the node are dropped (ranks wait in NCCL init)",
          engine.stall_at_nccl_apply, engine.stall_at_nccl_heal),
    Fault("slow-load", "the node's GPU in HW slowdown: the engine loads its weights in about 40 s",
          engine.slow_load_apply, engine.slow_load_heal),
    Fault("engine-wedged", "the engine's rank on the node is stopped (SIGSTOP): /health answers, generation hangs",
          engine.engine_wedged_apply, engine.engine_wedged_heal),
    Fault("crossed-ring-cable", "ring: the cables on the node's ports f0 and f1 swapped (each reaches the other "
          "neighbour)", cluster.crossed_ring_apply, cluster.crossed_ring_heal),
    Fault("switch-port-down", "switch: the node's switch port is down (its twins lose their link)",
          cluster.switch_port_down_apply, cluster.switch_port_down_heal),
)}


def active() -> list:
    """Records of the active faults, oldest first."""
    if not FAULTS_FILE.exists():
        return []
    return json.loads(FAULTS_FILE.read_text())


def save(records) -> None:
    """Write the active fault records."""
    FAULTS_FILE.parent.mkdir(parents=True, exist_ok=True)
    FAULTS_FILE.write_text(json.dumps(records, indent=2) + "\n")


def fault_key(name: str, node_name: str, options: dict) -> str:
    """Identity of one injected fault (the same fault twice is a no-op)."""
    suffix = f":{options['port']}" if options.get("port") else ""
    return f"{name}@{node_name}{suffix}"


def inject(name: str, node_name: str | None = None, **options) -> str:
    """Apply fault NAME to a node and record it; returns a one-line description."""
    if name not in FAULTS:
        raise KeyError(f"unknown fault {name!r}; faults: {', '.join(FAULTS)}")
    fault = FAULTS[name]
    target = node_named(node_name or fault.default_node)
    if name == "port-busy":
        options["port"] = int(options.get("port") or nodes.SERVING_PORT)
    key = fault_key(name, target.name, options)
    records = active()
    if any(record["key"] == key for record in records):
        return f"{key}: already active"
    data = fault.apply(target, options)
    save(records + [{"key": key, "name": name, "node": target.name, "data": data}])
    return f"{key}: {fault.summary}"


def heal(name: str | None = None) -> list:
    """Undo the active faults (all, or those called NAME), newest first; returns what was healed."""
    if name is not None and name not in FAULTS:
        raise KeyError(f"unknown fault {name!r}; faults: {', '.join(FAULTS)}")
    records = active()
    healed = []
    for record in reversed(list(records)):
        if name is not None and record["name"] != name:
            continue
        others = [r for r in records if r is not record]
        FAULTS[record["name"]].heal(node_named(record["node"]), record["data"], others)
        records = others
        save(records)
        healed.append(record["key"])
    return healed


def crossed_active() -> bool:
    """True when the crossed-cables fault is active (a repeated `up` keeps it)."""
    return any(record["name"] == "crossed-cables" for record in active())


def crossed_ring_nodes() -> frozenset:
    """Ring nodes the crossed-ring-cable fault holds crossed (a repeated `up` keeps them so)."""
    return frozenset(record["node"] for record in active() if record["name"] == "crossed-ring-cable")
