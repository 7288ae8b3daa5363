"""doctor: read-only preflight of everything a launch needs; each finding carries its fix.

Each node gets one SSH connection and one batched probe round (plus a short clock round trip);
every node is probed at once. Check functions are pure: facts in, findings out, and they are the
only judges: setup-network verifies the link by running the same link checks over the facts it
gathered. An unreachable node turns into FAIL rows for that node while the others are still checked.
A finding about every node at once is labelled `Facts.whole` (`pair` for two nodes, `cluster` for more)
and names them as `Facts.every` (`both nodes`, `all N nodes`).

Holds the findings model here; `catalog` (order, launch-critical ids), `node`, `links`, `crossing`
(links.crossed: whose interface answered each twin's address), `roce`,
`engine` (the checks and the probes each judges), `deep` (the verdicts on doctor --deep's MPI jobs),
`nccltests` (the pure parser of an all_gather_perf run that deep.nccl judges), `bandwidth` (deep.bandwidth's
judgement of NCCL's bus bandwidth against the cabling, and the likely cause of a shortfall), `knowncatalog` (the
known-bad catalog as data, read as hostile input), `known` (known.*: every node against it), `training` (train-draft's
training image on the head) and `playbook` (drift from NVIDIA's playbooks, judged from the inventory alone). Judges only: what
gathers the facts and runs the jobs (`engine.collect`, `engine.doctor`, `engine.mpijobs`) sits beside
the flows that run it. May import: only the layers below its own in pyproject.toml's `[tool.importlinter]`
(probes, runtimes, render, inventory, transport for types, the leaf modules).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sparkpair.inventory import Inventory
from sparkpair.inventory.profiles import Profile
from sparkpair.probes import NodeFacts, Probe, docker

RUNBOOK = "docs/runbooks.md"
PAIR, CLUSTER = "pair", "cluster"   # the row label of a finding about every node at once
SETUP_NETWORK = "setup-network"
T = TypeVar("T")


def whole(count: int) -> str:
    """The label of a finding about every node at once: `pair` for two nodes, `cluster` for more."""
    return PAIR if count == 2 else CLUSTER


def every_node(count: int) -> str:
    """How a line names every node: `both nodes` for two (as always), `all N nodes` for more."""
    return "both nodes" if count == 2 else f"all {count} nodes"


def any_node(count: int) -> str:
    """How a line says no node at all: `either node` for two (as always), `any node` for more."""
    return "either node" if count == 2 else "any node"


class Status(str, enum.Enum):
    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"
    INFO = "INFO"   # a recorded, explained departure (playbook drift): nothing to fix


@dataclass(frozen=True)
class Finding:
    """One check's verdict on one node (or on the pair): what was measured, and the fix."""

    check: str
    node: str
    status: Status
    detail: str
    fix: str = ""
    fixed_by: str = ""  # the sparkpair command that fixes it, when one does (SETUP_NETWORK)

    def as_dict(self) -> dict[str, str]:
        return {"check": self.check, "node": self.node, "status": self.status.value, "detail": self.detail,
                "fix": self.fix}


def runbook(check: str) -> str:
    """The runbook anchor of a check id (docs/runbooks.md has one section per id)."""
    return f"{RUNBOOK}#{check.replace('.', '-')}"


def ok(check: str, node: str, detail: str) -> Finding:
    return Finding(check, node, Status.OK, detail)


def warn(check: str, node: str, detail: str, fix: str = "", fixed_by: str = "") -> Finding:
    return Finding(check, node, Status.WARN, detail, fix or runbook(check), fixed_by)


def fail(check: str, node: str, detail: str, fix: str = "", fixed_by: str = "") -> Finding:
    return Finding(check, node, Status.FAIL, detail, fix or runbook(check), fixed_by)


def skip(check: str, node: str, detail: str) -> Finding:
    return Finding(check, node, Status.SKIP, detail)


def info(check: str, node: str, detail: str) -> Finding:
    return Finding(check, node, Status.INFO, detail)


@dataclass
class Facts:
    """Everything doctor learned: per node probe facts, connection errors, and operator-side facts."""

    inventory: Inventory            # as the profile's runtime sees it (Inventory.for_runtime)
    profile: Profile                # resolved: on its runtime
    nodes: dict[str, NodeFacts] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)
    connect_hints: dict[str, str] = field(default_factory=dict)   # the fix for each unreachable node
    clock_offsets: dict[str, float] = field(default_factory=dict)
    operator_token: bool = False
    serving_node: str = ""          # where the endpoint will listen (the head, or --node for TP=1)

    @property
    def whole(self) -> str:
        """The label of the findings about every node at once: `pair` for two nodes, `cluster` for more."""
        return whole(len(self.inventory.nodes))

    @property
    def every(self) -> str:
        """Every node in words: `both nodes` for two, `all N nodes` for more."""
        return every_node(len(self.inventory.nodes))

    def reachable(self) -> list[str]:
        return [name for name in self.nodes if name not in self.unreachable]

    def container_running(self, name: str) -> bool:
        """Whether a container with the engine's name runs on node name (by its container probe)."""
        state = self.fact(name, docker.container(self.inventory.container.name))
        return bool(getattr(state, "running", False))

    def fact(self, name: str, probe: Probe[T]) -> Any:
        """One node's fact for probe: its value, a ProbeFailure, or None when not asked or unreachable."""
        return self.nodes.get(name, NodeFacts()).get(probe)

    def rank_nodes(self) -> list[str]:
        """Nodes that run a rank of the profile, the serving one first: both for TP=2, one for TP=1."""
        serving = self.serving_node or self.inventory.head.name
        if self.profile.is_pair:
            return [serving] + [n.name for n in self.inventory.nodes if n.name != serving]
        return [serving]


CheckFunction = Callable[[Facts], Iterable[Finding]]


def selected(check: str, only: set[str] | None) -> bool:
    """Whether a check id is chosen by --only (an id or an id prefix such as `links`)."""
    return not only or any(check == o or check.startswith(f"{o}.") for o in only)


def run_checks(facts: Facts, checks: Iterable[tuple[str, CheckFunction]], only: set[str] | None = None) -> list[Finding]:
    """Every check over the facts, filtered by --only; a crashing check becomes a FAIL, not a crash."""
    findings: list[Finding] = []
    for check_id, function in checks:
        try:
            findings += list(function(facts))
        except Exception as error:  # noqa: BLE001 (a buggy check must not hide the others)
            findings.append(fail(check_id, facts.whole, f"check crashed: {type(error).__name__}: {error}",
                                 "report this as a sparkpair bug"))
    return [finding for finding in findings if selected(finding.check, only)]


def judge(inventory: Inventory, nodes: Mapping[str, NodeFacts], checks: Iterable[tuple[str, CheckFunction]],
          only: Iterable[str], unreachable: Mapping[str, str] | None = None) -> list[Finding]:
    """The findings of checks over facts gathered elsewhere (setup-network), limited to the ids in only."""
    facts = Facts(inventory, inventory.profile(), dict(nodes), dict(unreachable or {}))
    return run_checks(facts, checks, set(only))


def per_node(facts: Facts, probe: Probe[Any]) -> Iterable[tuple[str, Any]]:
    """(node, fact of probe) for each reachable node.

    Unreachable nodes are left out: reach.ssh FAILs for them, and a check adds its own SKIP rows
    with unreachable_skips where a missing row would mislead."""
    for name, node_facts in reachable_nodes(facts):
        yield name, node_facts.get(probe)


def reachable_nodes(facts: Facts) -> Iterable[tuple[str, NodeFacts]]:
    """(node, its facts) for each reachable node."""
    for name in facts.nodes:
        if name not in facts.unreachable:
            yield name, facts.nodes[name]


def unreachable_skips(facts: Facts, check: str) -> list[Finding]:
    return [skip(check, name, "node unreachable") for name in facts.unreachable]
