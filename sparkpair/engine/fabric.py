"""The fabric at launch: each node's own NCCL settings, and the proof of `launch --check-fabric`.

NCCL_IB_HCA and NCCL_IB_GID_INDEX are asked of each node (checks.roce.node_fabric over the facts
the preflight gathered) and written into that node's container.env; the engine container of each
node starts with its own values. `prove` runs doctor --deep's NCCL job (all_gather_perf with
NCCL_DEBUG=INFO, launch's own env, hostfile and transport) before any model is loaded, and judges
it with the same checks as doctor (deep.mpi, deep.nccl, deep.bandwidth). `record` is what the launch state
keeps of both, for `sparkpair bench`. `node_files` are the runtime's files launch writes on each rank node
(its own container.env among them), `config_path` and `config_dirs` where they go.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sparkpair import paths, probes, render
from sparkpair.checks import Facts, Finding, Status, roce
from sparkpair.errors import RenderError
from sparkpair.inventory import Inventory
from sparkpair.inventory.profiles import Profile
from sparkpair.render.recipe import NodeFabric
from sparkpair.runtimes import runtime_of
from sparkpair.transport import Node, Pair

PROOF_TIMEOUT_S = 120.0
PROOF_CHECKS = ("deep.mpi", "deep.nccl", "deep.bandwidth", "deep.cleanup")


def node_fabrics(facts: Facts, nodes: Iterable[str]) -> dict[str, NodeFabric | None]:
    """Each rank node's NCCL_IB_HCA and GID index, from the facts gathered on it."""
    found = roce.pair_fabric(facts)
    return {name: found.get(name) for name in nodes}


def gather_fabrics(pair: Pair, inventory: Inventory, nodes: list[str]) -> dict[str, NodeFabric | None]:
    """Each node's NCCL settings, asked of it now (one probe round per node), for whoever has no facts."""
    def ask(connection: Node) -> NodeFabric | None:
        return roce.node_fabric(inventory, connection.name, probes.gather(connection, roce.roce_probes()))

    return dict(pair.each(ask, names=nodes).raise_failures().values)


def node_files(inventory: Inventory, profile: Profile,
               fabrics: dict[str, NodeFabric | None]) -> dict[str, list[render.RenderedFile]]:
    """What launch writes to ~/.sparkpair/config on each rank node (the profile's runtime says what): the same
    files, but each node's own container.env."""
    runtime = runtime_of(profile)
    return {name: runtime.config_files(inventory, profile, inventory.node(name), fabric)
            for name, fabric in fabrics.items()}


def config_path(item: render.RenderedFile) -> str:
    """Where a runtime's config file goes on a node: under ~/.sparkpair/config, in the directories its path names
    (a model repository); a RenderError for a path that would leave it (absolute, `..`, control characters)."""
    if any(part in ("", ".", "..") for part in item.path.split("/")) or any(ord(c) < 32 or ord(c) == 127 for c in item.path):
        raise RenderError(f"a runtime's config file {item.path!r} is not a relative path inside ~/.sparkpair/config")
    return f"{paths.CONFIG_DIR}/{item.path}"


def config_dirs(files: list[render.RenderedFile]) -> list[str]:
    """The directories under ~/.sparkpair/config that files need (the deepest of each branch; none for flat files)."""
    needed = {config_path(item).rsplit("/", 1)[0] for item in files} - {paths.CONFIG_DIR}
    return sorted(directory for directory in needed if not any(other.startswith(directory + "/") for other in needed))



@dataclass(frozen=True)
class FabricProof:
    """What `launch --check-fabric` found: the deep findings, and the facts bench records."""

    findings: list[Finding]
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """deep.mpi and deep.nccl ran and passed (a WARN passes, a SKIP does not: nothing was proven)."""
        wanted = [f for f in self.findings if f.check in ("deep.mpi", "deep.nccl")]
        return len(wanted) == 2 and all(f.status in (Status.OK, Status.WARN) for f in wanted) and \
            not any(f.status is Status.FAIL for f in self.findings)

    @property
    def failures(self) -> list[Finding]:
        """The findings that stop the launch (the FAILs, or why the proof could not run)."""
        return [f for f in self.findings if f.status in (Status.FAIL, Status.SKIP)] if not self.ok else []


def prove(pair: Pair, facts: Facts, nccl_tests: str | None = None, timeout: float = PROOF_TIMEOUT_S) -> FabricProof:
    """doctor --deep's MPI and NCCL jobs over the launch's own env, hostfile and transport, judged as doctor does."""
    from sparkpair.checks import deep, run_checks  # jinja2 only when the fabric is proven
    from sparkpair.engine import mpijobs

    run = mpijobs.run_deep(pair, facts, timeout, nccl_tests)
    checks = [(check, function) for check, function in deep.deep_checks(run) if check in PROOF_CHECKS]
    findings = run_checks(facts, checks)
    return FabricProof(findings, measured(facts, run.nccl) if run.nccl else {})


def measured(facts: Facts, text: str) -> dict[str, Any]:
    """What an all_gather_perf run showed, per node: the transport, the RDMA devices, the bus bandwidth."""
    from sparkpair.checks import deep
    from sparkpair.checks.nccltests import parse_nccl_run

    parsed = parse_nccl_run(text)
    node_of = {hostname: name for name, hostname in deep.hostnames(facts).items()}
    nets = {node_of.get(host, host): net for host, net in parsed.hosts.items() if host}
    return {"transport": {name: net.transport for name, net in sorted(nets.items())},
            "devices": {name: net.ib_devices or net.socket_interfaces for name, net in sorted(nets.items())},
            "bus_bandwidth_gbs": parsed.bus_bandwidth, "measured": time.time()}


def record(fabrics: dict[str, NodeFabric | None], proof: FabricProof | None) -> dict[str, Any]:
    """The launch state's fabric: each node's NCCL settings, and what the proof measured (when it ran)."""
    return {"nodes": {name: fabric.env() if fabric else {} for name, fabric in fabrics.items()},
            "proof": proof.facts if proof is not None and proof.facts else None}
