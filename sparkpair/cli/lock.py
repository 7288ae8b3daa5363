"""`sparkpair diff`: every node side by side (one column per node, head first: a pair's two, or each node of a
ring or a switch), or every node against a lock (`--lock PATH`)."""

from __future__ import annotations

from pathlib import Path

import click

from sparkpair.cli.app import App, cli, pass_app
from sparkpair.cli.options import resolved_profile, runtime_option


@cli.command("diff")
@click.argument("profile", required=False)
@runtime_option
@click.option("--lock", "lock_path", type=click.Path(dir_okay=False, path_type=Path), metavar="PATH",
              help="Compare every node with this lock (e.g. sparkpair.lock beside the inventory) instead of the nodes "
                   "with each other; its profile and runtime unless given.")
@click.option("--json", "as_json", is_flag=True, help="The comparison as JSON.")
@pass_app
def diff_cmd(app: App, profile: str | None, runtime: str | None, lock_path: Path | None, as_json: bool) -> int:
    """Every node side by side, one column each, head first (image, engine version, driver, CUDA, kernel,
    ConnectX-7 firmware, netplan, MTU, NCCL environment, model revisions and file hashes), the fields that differ
    on any node first; exit 1 when anything differs. Read-only: one probe round per node."""
    from sparkpair import report
    from sparkpair.engine import lockflow
    from sparkpair.engine.launch import LaunchOptions, resolve
    from sparkpair.lockfile import compare, store
    from sparkpair.report import lock as lock_report

    inv = app.inventory
    locked = None
    if lock_path is not None:
        locked = store.read_lock(lock_path)
        if locked is None:
            raise click.BadParameter(f"no lock at {lock_path}", param_hint="--lock")
        profile, runtime = profile or locked.profile, runtime or locked.runtime
    chosen = resolved_profile(inv, profile, runtime)  # an unknown profile or a missing variant is a usage error
    view, resolved = resolve(inv, LaunchOptions(profile=chosen.name, runtime=runtime))
    nodes = list(locked.nodes) if locked is not None else [node.name for node in inv.nodes]
    unknown = [name for name in nodes if name not in [node.name for node in inv.nodes]]
    if unknown:
        raise click.BadParameter(f"the lock names node {unknown[0]!r}, which the inventory does not have",
                                 param_hint="--lock")
    with app.pair() as pair:
        pair.connect()
        found = lockflow.gather_lock(pair, view, resolved, nodes, Path(app.inventory_path))
    if locked is not None and lock_path is not None:
        differences = compare.compare(locked, found)
        if as_json:
            report.emit_json(compare.differences_json(differences, str(lock_path)))
        else:
            lock_report.lock_differences(differences, lock_path)
        return 1 if differences else 0
    rows = compare.side_by_side(found, *nodes)
    if as_json:
        report.emit_json(compare.rows_json(rows, nodes))
    else:
        lock_report.node_rows(rows, nodes)
    return 1 if any(not row.same for row in rows) else 0
