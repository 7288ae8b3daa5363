"""docs/runbooks.md covers every id the code can emit, and names no id the code does not have.

The ids come from the code, never from a list kept here: doctor's check ids are the ids the check
functions emit over healthy and broken fact sets (test_checks' cases) plus every literal id passed
to ok/warn/fail/skip in the check modules; the cause ids are `engine.signatures.CAUSE_IDS`. A new
check or cause therefore needs its runbook section, and a removed one takes its section along.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import test_checks

from sparkpair.checks import deep, run_checks
from sparkpair.checks.catalog import CHECKS
from sparkpair.engine.signatures import CAUSE_IDS

ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = (ROOT / "docs" / "runbooks.md").read_text()
ID = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9.-]+")
VERDICTS = {"ok", "warn", "fail", "skip"}


def literal_check_ids() -> set[str]:
    """Ids written literally as the first argument of ok/warn/fail/skip in sparkpair/checks."""
    found = set()
    for path in (ROOT / "sparkpair" / "checks").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in VERDICTS
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                    and ID.fullmatch(node.args[0].value)):
                found.add(node.args[0].value)
    return found


def emitted_check_ids() -> set[str]:
    """Ids doctor's checks emit over a healthy pair (either MPI transport), an unreachable worker and
    every broken case."""
    sim = test_checks.SIM
    sshd = dataclasses.replace(sim, container=dataclasses.replace(sim.container, mpi_transport="sshd"))
    fact_sets = [test_checks.healthy(), test_checks.healthy(sshd)]
    unreachable = test_checks.healthy()
    test_checks.unreachable(unreachable)
    fact_sets.append(unreachable)
    for breaks, *_ in test_checks.BROKEN:
        facts = test_checks.healthy()
        breaks(facts)
        fact_sets.append(facts)
    found = {finding.check for facts in fact_sets for finding in run_checks(facts, CHECKS)}
    return {check for check in found if ID.fullmatch(check)}


def check_ids() -> set[str]:
    return emitted_check_ids() | literal_check_ids() | {check for check, _ in deep.DEEP_CHECKS}


def runbook_sections() -> set[str]:
    """Ids that have a `### id` heading in the runbook."""
    return {match for match in re.findall(r"^### (\S+)\s*$", RUNBOOK, re.MULTILINE) if ID.fullmatch(match)}


def test_doctor_s_list_of_ids_for_only_is_the_ids_the_checks_emit() -> None:
    from sparkpair.cli.options import CATALOG_ENTRY_PREFIX, CHECK_IDS

    entries = {check for check in check_ids() if check.startswith(CATALOG_ENTRY_PREFIX)} - {"known.catalog"}
    assert entries, "the built-in catalog's entries are check ids too (--only accepts any known.<entry>)"
    assert len(CHECK_IDS) == len(set(CHECK_IDS)) and set(CHECK_IDS) == check_ids() - entries


def test_ids_come_from_the_code() -> None:
    ids = check_ids()
    assert {"inventory.twin-subnets", "links.crossed", "deep.nccl", "ports.serving"} <= ids
    assert len(ids) > 30 and len(CAUSE_IDS) == 32


def test_every_check_and_cause_id_has_its_runbook_section_and_anchor() -> None:
    sections = runbook_sections()
    for item in sorted(check_ids() | set(CAUSE_IDS)):
        assert item in sections, f"docs/runbooks.md has no '### {item}' section"
        assert f'<a id="{item.replace(".", "-")}"></a>' in RUNBOOK, f"docs/runbooks.md has no anchor for {item}"


def test_every_runbook_section_names_an_id_that_exists() -> None:
    known = check_ids() | set(CAUSE_IDS)
    assert sorted(runbook_sections() - known) == []


def test_no_id_is_both_a_check_and_a_cause() -> None:
    assert check_ids() & set(CAUSE_IDS) == set()
