"""`sparkpair doctor`."""

from __future__ import annotations

from pathlib import Path

import click

from sparkpair.cli.app import App, cli, pass_app
from sparkpair.cli.options import (
    Seconds,
    catalog_option,
    nccl_tests_path,
    read_catalog,
    resolved_profile,
    runtime_option,
    split_ids,
    unknown_selection,
)


@cli.command("doctor")
@click.argument("profile", required=False)
@runtime_option
@click.option("--json", "as_json", is_flag=True, help="Findings as JSON.")
@click.option("--deep", is_flag=True, help="Also run MPI across both nodes inside the engine container.")
@click.option("--only", metavar="ID,..", help="Only these check ids or groups (e.g. links,path).")
@click.option("--timeout", type=Seconds(1, 3600), default=60.0, show_default=True,
              help="Seconds for connecting and for each node's probes.")
@click.option("--nccl-tests", metavar="PATH", help="With --deep: all_gather_perf (or its build directory) at this "
                                                 "path on both nodes, when the engine image has no nccl-tests.")
@catalog_option
@pass_app
def doctor_cmd(app: App, profile: str | None, runtime: str | None, as_json: bool, deep: bool, only: str | None, timeout: float,
               nccl_tests: str | None, catalog_file: Path | None) -> int:
    """Read-only preflight: every known failure of a Spark pair, each with its fix. Exit 1 on any FAIL.
    --deep starts short-lived containers, so it takes the pair's lock."""
    import time

    nccl_tests = nccl_tests_path(nccl_tests, "--deep", deep)
    selection = split_ids(only)
    if selection is not None and (unknown := unknown_selection(selection)):   # before any node is asked
        raise click.UsageError("; ".join(unknown))
    catalog = read_catalog(catalog_file)  # a bad one is refused before any node is asked
    inv = app.inventory
    chosen = resolved_profile(inv, profile, runtime)
    name = chosen.name
    start = time.monotonic()
    connecting = app.pair(connect_timeout=min(timeout, 30.0))  # the handshakes overlap the imports below

    from sparkpair import report
    from sparkpair.checks import Status
    from sparkpair.engine.doctor import doctor

    with connecting as pair:
        # --deep starts containers on the nodes: it takes the pair's lock (when the head answers at all;
        # an unreachable head is one of the findings, and no MPI job runs without it)
        with app.locked(pair, "doctor --deep", dry_run=not (deep and app.reachable(pair.head))):
            findings = doctor(pair, inv.for_runtime(chosen.runtime), chosen, selection, timeout=timeout,
                              deep=deep, nccl_tests=nccl_tests, catalog=catalog)
    elapsed = time.monotonic() - start
    if as_json:
        report.emit_json({"profile": name, "runtime": chosen.runtime, "elapsed_s": round(elapsed, 2),
                          "findings": [f.as_dict() for f in findings]})
    else:
        report.findings(findings, elapsed)
    return 1 if any(f.status is Status.FAIL for f in findings) else 0
