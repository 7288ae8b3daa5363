"""What one setup-network run holds: its options, its plan, how it ended, and where it is.

`SetupRun` is what the flow's stages (`guarded`, `flow`) share while they apply: the pair, the
plan, the progress callback, the watchdogs left armed, and what this run has changed so far, so
that a Ctrl-C at any stage can be answered by undoing exactly that.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sparkpair import apply
from sparkpair.checks.knowncatalog import Catalog
from sparkpair.inventory import Inventory
from sparkpair.network import netplan
from sparkpair.network.watchdog import Armed
from sparkpair.probes import NodeFacts
from sparkpair.progress import Event, Progress
from sparkpair.transport import Pair

DEFAULT_CONFIRM_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class SetupOptions:
    skip_ssh: bool = False
    replace: bool = False
    confirm_timeout: float = DEFAULT_CONFIRM_TIMEOUT_S
    catalog: Catalog | None = None     # the known-bad catalog judged before any change (None: sparkpair's own)


@dataclass
class SetupPlan:
    """What setup-network would do on both nodes (the dry run), or why it refuses."""

    facts: dict[str, NodeFacts]
    network: netplan.NetworkPlan
    key_changes: list[apply.Change] = field(default_factory=list)
    trust_changes: list[apply.Change] = field(default_factory=list)
    trust_refusals: list[str] = field(default_factory=list)
    known_refusals: list[str] = field(default_factory=list)   # a node on a known-bad version (known.* FAIL)
    host_keys: dict[str, tuple[str, str]] = field(default_factory=dict)
    skip_ssh: bool = False
    stamp: str = field(default_factory=apply.run_stamp)
    # What the link and trust checks need, probed in the planning round: a run that changes nothing is
    # verified from it, with no second round trip (verify.state_probes).
    current: dict[str, NodeFacts] = field(default_factory=dict)

    @property
    def changes(self) -> list[apply.Change]:
        return self.network.changes + self.key_changes + self.trust_changes

    @property
    def refusals(self) -> list[str]:
        """Every reason not to apply: the lockout guard's first (bad input), then the others."""
        return self.network.lockouts + self.network.refusals + self.trust_refusals + self.known_refusals

    @property
    def warnings(self) -> list[str]:
        return self.network.warnings


@dataclass
class SetupResult:
    """How setup-network ended: what verified, and whether both nodes were rolled back."""

    ok: bool = False
    link_verified: bool = False
    trust_verified: bool = False
    rolled_back: bool = False
    outcomes: dict[str, apply.NodeOutcome] = field(default_factory=dict)


@dataclass
class SetupRun:
    """One apply under way (see the module docstring)."""

    pair: Pair
    inventory: Inventory
    plan: SetupPlan
    progress: Progress
    options: SetupOptions = field(default_factory=SetupOptions)
    result: SetupResult = field(default_factory=SetupResult)
    stage: str = "starting"
    armed: dict[str, Armed] = field(default_factory=dict)     # watchdogs not yet confirmed, per node
    twins_before: dict[str, str] = field(default_factory=dict)  # the nodes whose network changes: their twins before
    network_applied: bool = False     # this run's network changes started on a node (armed first)
    network_confirmed: list[str] = field(default_factory=list)  # nodes whose new network this run kept
    trust_started: bool = False       # this run's SSH changes started

    def say(self, node: str, text: str, level: str = "info") -> None:
        self.progress(Event(node, text, level))  # type: ignore[arg-type]

    def errors(self, lines: list[str]) -> None:
        for text in lines:
            self.progress(Event("", text, "error"))

    def seconds_left(self) -> float:
        """Until the first armed watchdog may fire (inf when none is armed)."""
        return min((armed.earliest for armed in self.armed.values()), default=float("inf")) - time.monotonic()
