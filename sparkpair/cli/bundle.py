"""`sparkpair bundle`."""

from __future__ import annotations

from pathlib import Path

import click

from sparkpair.cli.app import App, cli, pass_app


@cli.command("bundle")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="The archive to write (default: ./sparkpair-bundle-CLUSTER-YYYYMMDD-HHMMSS.tar.gz).")
@pass_app
def bundle_cmd(app: App, out: Path | None) -> int:
    """Collect what a maintainer asks for from both nodes into one tar.gz: the ranks' logs, launch state,
    docker inspect, the rendered config, doctor's findings, versions, dmesg, memory, links, RDMA and netplan.
    Read-only; secrets are never included, and MANIFEST.txt lists every file and what was redacted."""
    import json
    import time

    from sparkpair import report
    from sparkpair.checks.doctor import doctor
    from sparkpair.engine.bundle import bundle
    from sparkpair.engine.state import read_state
    from sparkpair.errors import SparkpairError

    inv = app.inventory
    target = out or Path(f"sparkpair-bundle-{inv.cluster.name}-{time.strftime('%Y%m%d-%H%M%S')}.tar.gz")
    if target.exists() and not target.is_file():
        raise click.BadParameter(f"{target} exists and is not a file", param_hint="--out")
    with app.pair() as pair:  # no connect(): a node that does not answer is evidence too
        def doctor_json() -> str:
            try:
                state = read_state(pair.head)
            except SparkpairError:
                state = None
            view = inv.for_runtime(state.runtime) if state else inv  # the profile as it was launched
            profile = view.profile(state.profile if state and state.profile in inv.profiles else None)
            findings = doctor(pair, view.for_runtime(profile.runtime), profile)
            return json.dumps({"profile": profile.name, "runtime": profile.runtime,
                               "findings": [f.as_dict() for f in findings]}, indent=2)

        result = bundle(pair, inv, target, Path(app.inventory_path), doctor_json, report.event)
    report.bundle_result(result)
    return 0
