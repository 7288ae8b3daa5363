"""`sparkpair inventory ...` and `sparkpair render`: offline, no node is touched."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from sparkpair.cli.app import App, cli, pass_app
from sparkpair.cli.options import resolved_profile, runtime_option

if TYPE_CHECKING:
    from sparkpair.inventory import Inventory
    from sparkpair.inventory.profiles import Profile


@cli.group()
def inventory() -> None:
    """Validate, show or describe the inventory (no network)."""


@inventory.command("check")
@pass_app
def inventory_check(app: App) -> None:
    """Validate the inventory and render everything from it, without touching a node; the inventory's
    own doctor warnings (e.g. inventory.twin-subnets) go to stderr."""
    from sparkpair import report
    from sparkpair.checks.node import inventory_warnings
    from sparkpair.errors import InventoryError
    from sparkpair.runtimes import options_problems, render_profile, runtime_named

    inv = app.inventory
    wrong = [line for name in inv.engines for line in options_problems(inv, runtime_named(name))]
    if wrong:  # an engine's options its runtime does not know, whichever profile runs on it
        raise InventoryError([f"{app.inventory_path}: {line}" for line in wrong])
    profiles = _every_variant(inv)
    misfits = {id(profile): profile.parallelism_problems(len(inv.nodes)) for profile in profiles}
    files = [f for profile in profiles if not misfits[id(profile)]
             for f in render_profile(inv, profile, app.inventory_path)]
    report.inventory_ok(app.inventory_path, [f"{inv.head.name} (head)", *(node.name for node in inv.workers)],
                        inv.server.profile, len(files))
    for profile in profiles:  # a profile whose ranks do not fit the nodes is not rendered; launch refuses it
        for problem in misfits[id(profile)]:
            report.warning(f"profile {profile.name} ({profile.runtime}): not launchable here: {problem}")
    for finding in inventory_warnings(inv):
        report.warning(f"{finding.node}: {finding.check}: {finding.detail} (fix: {finding.fix})")


def _every_variant(inv: Inventory) -> list[Profile]:
    """Every profile on its own runtime, and on each runtime it has a variant for."""
    return [inv.profile(name, runtime) for name, profile in inv.profiles.items()
            for runtime in (profile.runtime, *(r for r in profile.variants if r != profile.runtime))]


@inventory.command("show")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of YAML.")
@pass_app
def inventory_show(app: App, as_json: bool) -> None:
    """Print the inventory with every default filled in and every profile resolved."""
    import yaml

    from sparkpair import report
    from sparkpair.engine import credentials
    from sparkpair.inventory import json_data
    from sparkpair.runtimes import engine_sections

    inv = app.inventory
    data = json_data(inv)
    data["engines"] = engine_sections(inv)
    data["models"] = json_data(inv.profiles)
    data = credentials.masked(data, credentials.known(inv))  # an engine's API key is not shown
    if as_json:
        report.emit_json(data)
    else:
        report.emit_text(yaml.safe_dump(data, sort_keys=False))


@inventory.command("schema")
def inventory_schema() -> None:
    """Print the inventory's JSON Schema (for editors), each runtime's options included."""
    from sparkpair import report
    from sparkpair.runtimes import inventory_schema

    report.emit_json(inventory_schema())


@cli.command("render")
@click.argument("profile", required=False)
@runtime_option
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write the files into.")
@pass_app
def render_cmd(app: App, profile: str | None, runtime: str | None, out_dir: Path) -> None:
    """Write every file sparkpair would put on the nodes for PROFILE, for review."""
    from sparkpair import render, report
    from sparkpair.inventory.profiles import split_note
    from sparkpair.runtimes import render_profile

    inv = app.inventory
    chosen = resolved_profile(inv, profile, runtime)
    files = render_profile(inv, chosen, app.inventory_path)
    report.written_files(out_dir, render.write_files(files, out_dir))
    report.line(f"split of {chosen.name}: {split_note(chosen, inv.models, len(inv.nodes))}")
