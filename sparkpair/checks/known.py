"""known.*: every node against the known-bad catalog (`checks.knowncatalog`), one row per entry that applies.

The version an entry names is read from the node's facts (`uname -r`, nvidia-smi's driver, the NCCL the engine
image states in its NCCL_VERSION, the image the inventory runs); the entry's proof, where it has one, from a fact
that shows the failure itself or its workaround (`CmaFree` above `CmaTotal` in /proc/meminfo; NCCL_NVLS_ENABLE in
the engine's environment). An entry whose symptom the node shows is its severity whatever the version; a version
in range is the entry's severity unless its proof clears it (OK, saying why), or WARN when the proof cannot be
read. `known.catalog` says which catalog judged each node and how many entries apply there. A FAIL stops launch and
setup-network like any launch-critical check.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from sparkpair.checks import CheckFunction, Facts, Finding, fail, ok, reachable_nodes, unreachable_skips, warn
from sparkpair.checks.knowncatalog import PROOFS, Catalog, Entry, matches, packaged
from sparkpair.inventory import Inventory
from sparkpair.probes import NodeFacts, Probe, ProbeFailure, docker, host
from sparkpair.runtimes import runtime_of

NOT_READ = object()  # a fact the round did not answer


def known_probes(inventory: Inventory) -> list[Probe[Any]]:
    """What the catalog's entries read on one node, beside doctor's own (MEMINFO and GPUS are doctor's already)."""
    return [host.KERNEL, host.MEMINFO, host.GPUS, docker.image_config(inventory.container.image)]


def _value(facts: NodeFacts, probe: Probe[Any]) -> Any:
    found = facts.get(probe)
    return NOT_READ if found is None or isinstance(found, ProbeFailure) else found


def version(facts: Facts, name: str, node_facts: NodeFacts, component: str) -> str | None:
    """The component's version on the node as its facts say; None when they do not say."""
    if component == "image":
        return facts.inventory.container.image
    if component == "kernel":
        kernel = _value(node_facts, host.KERNEL)
        return None if kernel is NOT_READ else str(kernel)
    if component == "driver":
        gpus = _value(node_facts, host.GPUS)
        return gpus[0].driver if gpus is not NOT_READ and gpus else None
    image = _value(node_facts, docker.image_config(facts.inventory.container.image))
    return image.env.get("NCCL_VERSION") if isinstance(image, docker.ImageConfig) else None


def proof(facts: Facts, name: str, node_facts: NodeFacts, entry: Entry) -> tuple[bool | None, str]:
    """(whether the entry's proof holds on the node, None when it cannot be read; the fact in words)."""
    if entry.proof == "cma-free-exceeds-total":
        meminfo = _value(node_facts, host.MEMINFO)
        if meminfo is NOT_READ or "CmaTotal" not in meminfo or "CmaFree" not in meminfo:
            return None, "no CmaTotal/CmaFree in /proc/meminfo"
        total, free = meminfo["CmaTotal"], meminfo["CmaFree"]
        return free > total, f"CmaFree {free} kB {'>' if free > total else '<='} CmaTotal {total} kB"
    image = _value(node_facts, docker.image_config(facts.inventory.container.image))
    env = dict(image.env) if isinstance(image, docker.ImageConfig) else {}
    env |= runtime_of(facts.profile).container_env(facts.inventory, facts.inventory.node(name), None)
    value = env.get("NCCL_NVLS_ENABLE")
    return value != "0", f"NCCL_NVLS_ENABLE={value}" if value is not None else "NCCL_NVLS_ENABLE not set (on)"


def judge_entry(facts: Facts, name: str, node_facts: NodeFacts, entry: Entry) -> Finding | None:
    """The entry's row for one node, or None when it does not apply there."""
    found = version(facts, name, node_facts, entry.component)
    in_range = found is not None and matches(entry.versions, entry.component, found)
    holds, shown = proof(facts, name, node_facts, entry) if entry.proof else (None, "")
    check = f"known.{entry.id}"
    what = f"{entry.component} {found}" if found else entry.component
    verdict = fail if entry.severity == "FAIL" else warn
    fix = f"{entry.fix} (sources: {entry.cited()})"
    if entry.proof and PROOFS[entry.proof] == "symptom" and holds:
        return verdict(check, name, f"{shown}: {entry.symptom} ({what})", fix)
    if not in_range:
        return None
    if not entry.proof:
        return verdict(check, name, f"{what}: {entry.symptom}", fix)
    if holds is None:
        return warn(check, name, f"{what} is a known-bad version, and whether this node is affected cannot be "
                                 f"read ({shown}): {entry.symptom}", fix)
    if holds:
        return verdict(check, name, f"{what} and {shown}: {entry.symptom}", fix)
    return ok(check, name, f"{what} is a known-bad version, but {shown}: not affected")


def check_known(facts: Facts, catalog: Catalog | None = None) -> Iterable[Finding]:
    """Proves no node runs a known-bad kernel, driver, NCCL or image (the catalog: sparkpair's, or --catalog's)."""
    catalog = catalog or packaged()
    yield from unreachable_skips(facts, "known.catalog")
    for name, node_facts in reachable_nodes(facts):
        rows = [row for row in (judge_entry(facts, name, node_facts, entry) for entry in catalog.entries) if row]
        applying = [row.check for row in rows]
        yield ok("known.catalog", name, f"{catalog.origin} catalog of {catalog.updated}, {len(catalog.entries)} "
                                        f"entries: {', '.join(applying) if applying else 'none applies'}")
        yield from rows


def known_checks(catalog: Catalog | None) -> list[tuple[str, CheckFunction]]:
    """The catalog check bound to catalog (sparkpair's when None), for run_checks."""
    return [("known", functools.partial(check_known, catalog=catalog))]
