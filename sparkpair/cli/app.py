"""What every command shares: the click group, the App (inventory path, verbosity, pair, lock), exit codes."""

from __future__ import annotations

import enum
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # the CLI imports only click at start-up (docs/architecture.md, Performance invariants)
    from sparkpair.inventory import Inventory
    from sparkpair.transport import Node, Pair


class ExitStatus(enum.IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    INTERRUPTED = 130


class App:
    """What every command shares: where the inventory is, and how chatty to be."""

    def __init__(self, inventory_path: str, verbose: int) -> None:
        self.inventory_path = inventory_path
        self.verbose = verbose
        self._inventory: Inventory | None = None

    @property
    def inventory(self) -> Inventory:
        """The inventory, read and validated on first use (InventoryError names the field and the fix)."""
        if self._inventory is None:
            from sparkpair.inventory import read_inventory

            self._inventory = read_inventory(self.inventory_path)
        return self._inventory

    def locked(self, pair: Pair, command: str, dry_run: bool = False) -> AbstractContextManager[None]:
        """The pair's lock on the head, for every command that starts containers or writes files on a
        node (no lock for a dry run or a read-only command, which change nothing)."""
        import contextlib

        from sparkpair import report
        from sparkpair.transport import lock

        return contextlib.nullcontext() if dry_run else lock.held(pair.head, command, report.warning)

    @staticmethod
    def reachable(connection: Node) -> bool:
        """Whether a node's SSH connection opens (the reason it does not is for the command to report)."""
        from sparkpair.errors import ConnectError

        try:
            connection.connect()
        except ConnectError:
            return False
        return True

    def pair(self, *, connect_timeout: float = 10.0, accept_new_host_keys: bool = False) -> Pair:
        """Connections to every node, the head first, already being opened in the background (a node's error
        comes with the first use of its connection); `-vv` traces every remote command. Every command drives
        every node of a pair, a ring or a switch (docs/cluster.md)."""
        from sparkpair.transport import Pair, SshTarget

        trace = None
        if self.verbose >= 2:
            from sparkpair import report

            trace = lambda node, text: report.note(f"{node}$ {text}")
        cluster = self.inventory.cluster
        targets = [SshTarget(node.name, node.host, node.port, cluster.user, cluster.ssh_key, cluster.known_hosts)
                   for node in self.inventory.nodes]
        pair = Pair(targets, trace=trace, connect_timeout=connect_timeout, accept_new_host_keys=accept_new_host_keys)
        pair.connect_soon()
        return pair


pass_app = click.make_pass_decorator(App)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-i", "--inventory", "inventory_path", envvar="SPARKPAIR_INVENTORY", default="inventory.yaml",
              show_default=True, metavar="PATH", help="Inventory file (also $SPARKPAIR_INVENTORY).")
@click.option("-v", "--verbose", count=True, help="More detail (repeat for more).")
@click.version_option(package_name="sparkpair", prog_name="sparkpair")
@click.pass_context
def cli(ctx: click.Context, inventory_path: str, verbose: int) -> None:
    """Run one model across two DGX Sparks cabled back-to-back, and say what is wrong when it fails."""
    ctx.obj = App(inventory_path, verbose)
