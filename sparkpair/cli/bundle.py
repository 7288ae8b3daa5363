"""`sparkpair bundle`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from sparkpair.cli.app import App, cli, pass_app
from sparkpair.cli.options import writable_target

if TYPE_CHECKING:
    from sparkpair.inventory import Inventory
    from sparkpair.inventory.profiles import Profile


@cli.command("bundle")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="The archive to write (default: ./sparkpair-bundle-CLUSTER-YYYYMMDD-HHMMSS.tar.gz).")
@click.option("--lock", "lock_path", type=click.Path(dir_okay=False, path_type=Path), metavar="PATH",
              help="The lock to include and compare the pair with (default: sparkpair.lock beside the inventory).")
@pass_app
def bundle_cmd(app: App, out: Path | None, lock_path: Path | None) -> int:
    """Collect what a maintainer asks for from every node into one tar.gz: the ranks' logs, launch state,
    docker inspect, the rendered config, doctor's findings, the lock and `sparkpair diff`, versions, dmesg, memory,
    links, RDMA and netplan. Read-only; secrets are never included, and MANIFEST.txt lists every file and what was redacted."""
    import json
    import time

    from sparkpair import report
    from sparkpair.engine import lockflow
    from sparkpair.engine.bundle import Collected, bundle
    from sparkpair.engine.doctor import doctor
    from sparkpair.engine.state import read_state
    from sparkpair.errors import SparkpairError
    from sparkpair.lockfile import store

    inv = app.inventory
    target = out or Path(f"sparkpair-bundle-{inv.cluster.name}-{time.strftime('%Y%m%d-%H%M%S')}.tar.gz")
    if target.exists() and not target.is_file():
        raise click.BadParameter(f"{target} exists and is not a file", param_hint="--out")
    writable_target(target, "--out")   # before any node is asked
    with app.pair() as pair:  # no connect(): a node that does not answer is evidence too
        def launched() -> tuple[Inventory, Profile]:
            """The inventory as the launched runtime sees it, and the profile as it was launched (else the default)."""
            try:
                state = read_state(pair.head)
            except SparkpairError:
                state = None
            view = inv.for_runtime(state.runtime) if state else inv
            profile = view.profile(state.profile if state and state.profile in inv.profiles else None)
            return view.for_runtime(profile.runtime), profile

        def doctor_json() -> str:
            view, profile = launched()
            findings = doctor(pair, view, profile)
            return json.dumps({"profile": profile.name, "runtime": profile.runtime,
                               "findings": [f.as_dict() for f in findings]}, indent=2)

        def lock_files() -> tuple[list[Collected], list[str]]:
            view, profile = launched()
            return lockflow.bundle_files(pair, view, profile, Path(app.inventory_path),
                                         lock_path or store.default_path(app.inventory_path))

        # the launched runtime's container (its logs, docker inspect), not the default runtime's
        result = bundle(pair, launched()[0], target, Path(app.inventory_path), doctor_json, report.event, lock_files)
    report.bundle_result(result)
    if len(result.unreached) == len(inv.nodes):   # an archive of no node's evidence is a failure
        report.error_lines([f"collected nothing from any node ({', '.join(result.unreached)}): the archive holds only "
                            "sparkpair's own files; sparkpair doctor --only reach names why"])
        return 1
    return 0
