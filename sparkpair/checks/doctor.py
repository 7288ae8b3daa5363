"""Run the doctor: collect facts from both nodes at once, then every check over them."""

from __future__ import annotations

from sparkpair import hftoken
from sparkpair.checks import Finding, run_checks
from sparkpair.checks.catalog import CHECKS
from sparkpair.checks.collect import collect
from sparkpair.inventory import Inventory
from sparkpair.transport import Pair


def doctor(pair: Pair, inventory: Inventory, profile: str, only: set[str] | None = None,
           timeout: float = 60.0, deep: bool = False) -> list[Finding]:
    """All findings for the pair and profile (read-only)."""
    facts = collect(pair, inventory, profile, timeout)
    facts.operator_token = hftoken.find_token() is not None
    return run_checks(facts, CHECKS, only)
