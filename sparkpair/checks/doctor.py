"""Run the doctor: collect facts from both nodes at once, then every check over them."""

from __future__ import annotations

from sparkpair import hftoken
from sparkpair.checks import Finding, run_checks, selected
from sparkpair.checks.catalog import CHECKS
from sparkpair.checks.collect import collect
from sparkpair.inventory import Inventory
from sparkpair.transport import Pair


def doctor(pair: Pair, inventory: Inventory, profile: str, only: set[str] | None = None,
           timeout: float = 60.0, deep: bool = False, serving_node: str = "") -> list[Finding]:
    """All findings for the pair and profile; with deep, also the MPI jobs (docs/runbooks.md#deep).

    serving_node: where the endpoint will listen when it is not the head (a TP=1 launch's --node)."""
    facts = collect(pair, inventory, profile, timeout)
    facts.operator_token = hftoken.find_token() is not None
    facts.serving_node = serving_node
    checks = list(CHECKS)
    if deep:
        from sparkpair.checks import deep as deep_checks, mpijobs  # jinja2 and the Docker SDK only for --deep

        if any(selected(check_id, only) for check_id, _ in deep_checks.DEEP_CHECKS):
            checks += deep_checks.deep_checks(mpijobs.run_deep(pair, facts, timeout))
    return run_checks(facts, checks, only)
