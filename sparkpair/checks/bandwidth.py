"""deep.bandwidth's judgement of NCCL's bus bandwidth: what the cabling should give, and why a run fell short.

Pure: an all_gather_perf run (`nccltests.NcclRun`) and the facts doctor gathered in, a verdict out. What one QSFP
cable between two Sparks gives, from public runs (docs/runbooks.md#deep-bandwidth has each with its source and
date): with both PCIe x4 halves of the port in NCCL_IB_HCA, MTU 9000 and a released NCCL, all_gather's bus
bandwidth is about 20-24 GB/s (21.4 averaged over 1-4 GiB, 19.7/20.8 at 1 GiB; 23.74 with v2.28.9-1); with one half
about half of it (98 against 161 Gb/s); with one half, MTU 1500 or a development build of NCCL about 3 GB/s. A run
below the band names the likely cause from what doctor already knows: the RDMA devices NCCL used or was told
(its INFO lines) against each node's twins, each twin's MTU and RoCE MTU (links.mtu, links.roce), and the NCCL
version (its INFO line, or nccl-tests' `nccl-library=` header); with none of those, a cable moved without a reboot.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkpair.checks import Facts, Status, roce
from sparkpair.checks.knowncatalog import version_key
from sparkpair.checks.nccltests import SOCKET, NcclRun
from sparkpair.probes import net, rdma

HEALTHY_BUSBW_GBS = 20.3           # one cable, both halves, at 1 GiB (19.73/20.80 measured; 21.4 over 1-4 GiB)
WARN_BELOW_GBS = 18.0              # under the healthy band
FAIL_BELOW_GBS = 15.0              # far under it: about half or less (one half, sockets, a degraded link)
FULL_MTU, FULL_ROCE_MTU = 9000, 4096
CURRENT_NCCL = "2.28.9"            # the NCCL NVIDIA's Spark playbooks validate (v2.28.9-1)


@dataclass(frozen=True)
class Cause:
    """One likely reason a run fell short, as the facts show it, and its fix."""

    found: str
    fix: str


@dataclass(frozen=True)
class Verdict:
    status: Status
    detail: str
    fix: str = ""


def cabling(facts: Facts) -> str:
    """What the cabling is, in words, and what it should give."""
    halves = min(len(node.links) for node in facts.inventory.nodes)
    what = "one QSFP cable's two PCIe halves" if halves >= 2 else "one PCIe half of the cable (the inventory names " \
                                                                   "one twin)"
    return f"about {HEALTHY_BUSBW_GBS:g} GB/s expected for {what} at MTU {FULL_MTU}"


def one_half(facts: Facts, run: NcclRun, hostnames: dict[str, str]) -> Cause | None:
    """NCCL moved the data over fewer halves of the port than the node has twins (its devices, or NCCL_IB_HCA)."""
    fabrics = {name: fabric for name, fabric in roce.pair_fabric(facts).items() if fabric}
    node_of = {hostname: name for name, hostname in hostnames.items()}
    seen = {node_of[host]: net_lines for host, net_lines in run.hosts.items() if host in node_of}
    short = []
    for node in facts.inventory.nodes:
        net_lines, name = seen.get(node.name), node.name
        if net_lines is None:
            continue
        twins = len(node.links)
        told = [device for device in net_lines.ib_hca.lstrip("=^").split(",") if device] if net_lines.ib_hca else []
        used = net_lines.ib_devices
        fewest = min([count for count in (len(used), len(told)) if count] or [twins])
        if fewest < twins:
            expected = "+".join(fabrics[name].hcas) if name in fabrics else f"{twins} halves"
            shown = f"NCCL_IB_HCA {net_lines.ib_hca}" if told and len(told) < twins else f"NCCL used {'+'.join(used)}"
            short.append(f"{shown} on {name}, of {expected}")
    if any(len(node.links) < 2 for node in facts.inventory.nodes):
        short.append("the inventory names one twin per node")
    if not short:
        return None
    return Cause(f"one PCIe half of the port carries NCCL's data ({'; '.join(short)}): about half the bandwidth",
                 "both halves of the cabled port in NCCL_IB_HCA (sparkpair sets each node's own when container.env "
                 "and vllm.env do not: remove NCCL_IB_HCA there; nodes[].links names both twins)")


def small_mtu(facts: Facts) -> Cause | None:
    """A twin under MTU 9000, or its RoCE port under active_mtu 4096 (RoCE then carries 1 KiB packets)."""
    found = []
    for name, node_facts in facts.nodes.items():
        if name in facts.unreachable:
            continue
        interfaces = node_facts.value(net.INTERFACES) or {}
        ports = node_facts.value(rdma.PORTS) or {}
        for twin in facts.inventory.node(name).links:
            interface = interfaces.get(twin)
            if interface is not None and interface.mtu < FULL_MTU:
                found.append(f"{twin} of {name} at MTU {interface.mtu}")
        found += [f"{device} of {name} at RoCE active_mtu {port.active_mtu}" for (device, _), port in ports.items()
                  if port.active_mtu and port.active_mtu < FULL_ROCE_MTU]
    if not found:
        return None
    return Cause(f"a small MTU ({', '.join(found)})",
                 f"cluster.mtu: {FULL_MTU} in the inventory, then sparkpair setup-network (links.mtu, links.roce)")


def nccl_version(run: NcclRun) -> str:
    """The NCCL the run used: its own INFO line (`NCCL version 2.28.9+cuda13.0`), else nccl-tests' header."""
    return next((host.version for host in run.hosts.values() if host.version), "") or run.library


def old_nccl(run: NcclRun) -> Cause | None:
    version = nccl_version(run)
    if not version or version_key(version) >= version_key(CURRENT_NCCL):
        return None
    return Cause(f"NCCL {version}, older than the {CURRENT_NCCL} NVIDIA's Spark playbooks validate",
                 f"an engine image with NCCL {CURRENT_NCCL} or later (known.nccl-before-2-28-9)")


def judge_bus(facts: Facts, run: NcclRun, hostnames: dict[str, str]) -> Verdict | None:
    """The verdict on the run's average bus bandwidth against the cabling; None when there is none to judge (no
    figure, or NCCL ran over sockets: deep.nccl says so)."""
    if run.bus_bandwidth is None or SOCKET in run.transports:
        return None
    figure = f"all_gather bus bandwidth {run.bus_bandwidth:g} GB/s, {cabling(facts)}"
    if run.bus_bandwidth >= WARN_BELOW_GBS:
        return Verdict(Status.OK, figure)
    causes = [cause for cause in (one_half(facts, run, hostnames), small_mtu(facts), old_nccl(run)) if cause]
    if causes:
        likely = "; likely cause: " + "; and ".join(cause.found for cause in causes)
        fix = "; ".join(cause.fix for cause in causes)
    else:
        likely = "; no half, MTU or NCCL version explains it"
        fix = ("if a QSFP cable was moved since the last boot, reboot "
               f"{'both Sparks' if len(facts.inventory.nodes) == 2 else 'every Spark'} (ConnectX-7 stays degraded "
               "after re-cabling: 2.82 GB/s until a reboot); sparkpair doctor --only links (links.speed: a link "
               "below 200 Gb/s)")
    status = Status.FAIL if run.bus_bandwidth < FAIL_BELOW_GBS else Status.WARN
    return Verdict(status, f"{'far ' if status is Status.FAIL else ''}below the cabling: {figure}{likely}", fix)
