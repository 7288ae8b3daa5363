"""`sparkpair setup-network`."""

from __future__ import annotations

from pathlib import Path

import click

from sparkpair.cli.app import App, ExitStatus, cli, pass_app
from sparkpair.cli.options import Seconds, catalog_option, read_catalog


@cli.command("setup-network")
@click.option("--dry-run", is_flag=True, help="Show the plan and diffs; change nothing.")
@click.option("-y", "--yes", is_flag=True, help="Apply without asking.")
@click.option("--restore", is_flag=True,
              help="Return both nodes to the state before sparkpair first changed them (netplan files, QSFP "
                   "addresses and MTU, the SSH files it added), and say what was restored.")
@click.option("--last", is_flag=True, help="With --restore: undo only the last apply.")
@click.option("--skip-ssh", is_flag=True, help="Only the network; leave SSH trust between the nodes alone.")
@click.option("--replace", is_flag=True, help="Take over QSFP stanzas from other netplan files (backed up).")
@click.option("--confirm-timeout", type=Seconds(10, 3600), default=60.0, show_default=True, metavar="SECONDS",
              help="How long the watchdog left on each node waits for sparkpair to reach it again over a new SSH "
                   "connection and verify the link before it puts the old network back by itself.")
@click.option("--accept-new-host-keys", is_flag=True, help="Record unknown host keys of the nodes (first contact).")
@catalog_option
@pass_app
def setup_network_cmd(app: App, dry_run: bool, yes: bool, restore: bool, last: bool, skip_ssh: bool, replace: bool,
                      confirm_timeout: float, accept_new_host_keys: bool, catalog_file: Path | None) -> int:
    """Address the QSFP twins with netplan (MTU included), exchange SSH keys, verify both ways."""
    if restore and dry_run:
        raise click.UsageError("--restore changes both nodes; it cannot be combined with --dry-run")
    if last and not restore:
        raise click.UsageError("--last goes with --restore (undo only the last apply)")
    catalog = read_catalog(catalog_file)  # a bad one is refused before any node is asked
    inventory = app.inventory
    connecting = app.pair(accept_new_host_keys=accept_new_host_keys)  # the handshakes overlap what follows

    from sparkpair import report
    from sparkpair.network import flow
    from sparkpair.network.netplan import wanted_netplan

    wanted = None if restore else wanted_netplan(inventory)
    with connecting as pair:
        pair.connect(changing=not dry_run)
        with app.locked(pair, "setup-network", dry_run):
            if restore:
                return 0 if flow.restore(pair, inventory, report.event, last=last) else 1
            options = flow.SetupOptions(skip_ssh=skip_ssh, replace=replace, confirm_timeout=confirm_timeout,
                                        catalog=catalog)
            plan = flow.plan_setup(pair, inventory, options, wanted)
            for text in plan.warnings:
                report.warning(text)
            report.plan(plan.changes, plan.refusals, nodes=len(inventory.nodes))
            if plan.network.lockouts:
                return ExitStatus.USAGE
            if plan.refusals:
                return 1
            if dry_run:
                return 0
            if plan.changes and not yes and not report.confirm("apply these changes to both nodes?"):
                return 1
            return 0 if flow.apply_setup(pair, inventory, plan, report.event, options).ok else 1


@cli.command("root-helper")
def root_helper_cmd() -> int:
    """Print sparkpair's root helper, the one program sudo needs to grant (docs/checklist.md#sudo):
    sparkpair root-helper > sparkpair-root, then install it on every node as reach.sudo says."""
    from sparkpair.transport import root

    click.echo(root.helper_text(), nl=False)
    return ExitStatus.OK
