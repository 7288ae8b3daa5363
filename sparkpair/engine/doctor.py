"""Run the doctor: collect facts from both nodes at once, then every check over them."""

from __future__ import annotations

from sparkpair.checks import Facts, Finding, run_checks, selected
from sparkpair.checks.catalog import CHECKS, DRIFT_CHECKS
from sparkpair.checks.known import known_checks
from sparkpair.checks.knowncatalog import Catalog
from sparkpair.engine.collect import collect
from sparkpair.inventory import Inventory, hftoken
from sparkpair.inventory.profiles import Profile
from sparkpair.transport import Pair


def doctor(pair: Pair, inventory: Inventory, profile: Profile, only: set[str] | None = None,
           timeout: float = 60.0, deep: bool = False, serving_node: str = "",
           nccl_tests: str | None = None, catalog: Catalog | None = None) -> list[Finding]:
    """All findings for the pair and profile (the inventory as the profile's runtime sees it:
    Inventory.for_runtime); with deep, also the MPI jobs (docs/runbooks.md#deep).

    serving_node: where the endpoint will listen when it is not the head (a TP=1 launch's --node);
    nccl_tests: an all_gather_perf (or its build directory) on the nodes, when the image has none; catalog: the
    known-bad catalog the known.* rows judge by (None: sparkpair's own)."""
    return examine(pair, inventory, profile, only, timeout, deep, serving_node, nccl_tests, catalog)[1]


def examine(pair: Pair, inventory: Inventory, profile: Profile, only: set[str] | None = None, timeout: float = 60.0,
            deep: bool = False, serving_node: str = "", nccl_tests: str | None = None,
            catalog: Catalog | None = None) -> tuple[Facts, list[Finding]]:
    """doctor, also returning the facts it judged (launch derives each node's NCCL settings from them)."""
    facts = collect(pair, inventory, profile, timeout)
    facts.operator_token = hftoken.find_token() is not None
    facts.serving_node = serving_node
    checks = [known_checks(catalog)[0] if check_id == "known" else (check_id, function) for check_id, function in CHECKS]
    checks += DRIFT_CHECKS
    if deep:
        from sparkpair.checks.deep import DEEP_CHECKS, deep_checks  # jinja2 only for --deep
        from sparkpair.engine import mpijobs

        if any(selected(check_id, only) for check_id, _ in DEEP_CHECKS):
            checks += deep_checks(mpijobs.run_deep(pair, facts, timeout, nccl_tests))
    return facts, run_checks(facts, checks, only)
