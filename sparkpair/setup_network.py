"""The setup-network command's flow: network first, verified; then SSH trust, verified.

Nothing changes until both nodes are reached and planned. A failed network verification
restores both nodes; an interrupted apply reports exactly what each node holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkpair import network, report, steps, trust
from sparkpair.errors import Interrupted
from sparkpair.inventory import Inventory
from sparkpair.transport import Pair


@dataclass(frozen=True)
class Options:
    dry_run: bool = False
    yes: bool = False
    restore: bool = False
    skip_ssh: bool = False
    replace: bool = False


def setup_network(pair: Pair, inventory: Inventory, options: Options) -> int:
    """Plan, show, apply and verify; the exit status."""
    pair.connect()
    if options.restore:
        return restore(pair, inventory)
    try:
        facts = network.probe_nodes(pair, [] if options.skip_ssh else [trust.SSH_FILES])
        plan = network.plan_network(inventory, facts, options.replace)
        files = {} if options.skip_ssh else trust.ssh_files(facts)
        host_keys = {name: connection.server_key() for name, connection in pair.nodes.items()}
        trust_changes, trust_refusals = ([], []) if options.skip_ssh else trust.trust_plan(inventory, files, host_keys)
        key_changes = trust.key_changes(files)
        stamp = steps.run_stamp()
        report.plan(plan.changes + key_changes + trust_changes, plan.refusals + trust_refusals)
        if plan.refusals or trust_refusals:
            return 1
        if options.dry_run:
            return 0
        if (plan.changes or key_changes or trust_changes) and not options.yes \
                and not report.confirm("apply these changes to both nodes?"):
            return 1
    except KeyboardInterrupt:
        raise Interrupted("interrupted before any change; nothing was changed on either node") from None
    before = {node.name: {"twins_before": network.twins_snapshot(node, facts[node.name]["interfaces"])}
              for node in inventory.nodes}
    if plan.changes and not _apply_network(pair, inventory, plan.changes, before):
        return 1
    try:
        problems = network.verify_link(pair, inventory)
    except KeyboardInterrupt:
        _report_states(pair, inventory)
        raise Interrupted("interrupted while verifying the link; both nodes keep the network configuration "
                          f"{'just applied' if plan.changes else 'they had'} (states above). Verify it with: "
                          "sparkpair setup-network --yes; undo with: sparkpair setup-network --restore") from None
    if problems:
        report.error_lines(problems)
        if plan.changes:
            _roll_back(pair, inventory, "the link did not verify")
        return 1
    report.line("link verified: carrier, addresses, MTU, pings and full-MTU don't-fragment pings both ways")
    if options.skip_ssh:
        return 0
    try:
        return _establish_trust(pair, inventory, host_keys, key_changes, trust_changes, stamp)
    except KeyboardInterrupt:
        raise Interrupted("interrupted while setting up SSH trust; the network is applied and verified, and each "
                          "trust change reported above is complete. Finish with: sparkpair setup-network --yes; "
                          "undo with: sparkpair setup-network --restore") from None


def _report_states(pair: Pair, inventory: Inventory) -> None:
    """Each node's twins as they are now (best effort, never raises: it follows a failure or an interrupt)."""
    for name, connection in pair.nodes.items():
        try:
            report.note(f"{name}: now {network.node_state(connection, inventory.node(name))}")
        except Exception as error:  # noqa: BLE001 (a report after Ctrl-C must not hide the interrupt)
            report.note(f"{name}: state unknown ({type(error).__name__}); sparkpair doctor --only links shows it")


def _apply_network(pair: Pair, inventory: Inventory, changes: list[steps.Change],
                   before: dict[str, dict[str, str]]) -> bool:
    outcomes = steps.apply_changes(pair, changes, network.JOURNAL, progress=report.progress, extra=before)
    if all(outcome.ok for outcome in outcomes.values()):
        return True
    report.outcomes(outcomes)
    _report_states(pair, inventory)
    if any(outcome.interrupted for outcome in outcomes.values()):
        raise Interrupted("interrupted; each node finished the change it was making and every file is whole "
                          "(atomic writes). Finish with: sparkpair setup-network --yes; undo with: "
                          "sparkpair setup-network --restore")
    _roll_back(pair, inventory, "apply failed")
    return False


def _roll_back(pair: Pair, inventory: Inventory, why: str) -> None:
    report.note(f"rolling back both nodes ({why})")
    for name, result in pair.each(lambda c: network.roll_back(c, inventory.node(c.name))).items():
        if isinstance(result, BaseException):
            report.error_lines([f"{name}: rollback failed: {result}"])
        else:
            report.note(f"{name}: {'; '.join(result)}")
    _report_states(pair, inventory)


def _establish_trust(pair: Pair, inventory: Inventory, host_keys: dict[str, tuple[str, str]],
                     key_changes: list[steps.Change], changes: list[steps.Change], stamp: str) -> int:
    """Apply key_changes, then changes (planned before any key was made: re-planned if one was)."""
    if key_changes:
        if not _applied(pair, key_changes, stamp):
            return 1
        changes, refusals = trust.trust_plan(inventory, trust.probe_ssh_files(pair), host_keys)
        if refusals:
            report.error_lines(refusals)
            return 1
    if changes and not _applied(pair, changes, stamp):
        return 1
    problems = trust.verify_trust(pair, inventory)
    if problems:
        report.error_lines(problems + ["undo with: sparkpair setup-network --restore"])
        return 1
    report.line("SSH trust verified: ssh -o BatchMode=yes works both ways over every QSFP address")
    return 0


def _applied(pair: Pair, changes: list[steps.Change], stamp: str) -> bool:
    outcomes = steps.apply_changes(pair, changes, trust.JOURNAL, stamp=stamp, progress=report.progress)
    if all(outcome.ok for outcome in outcomes.values()):
        return True
    report.outcomes(outcomes)
    if any(outcome.interrupted for outcome in outcomes.values()):
        raise Interrupted("interrupted; each node finished the change it was making and every file is whole. "
                          "Finish with: sparkpair setup-network --yes; undo with: sparkpair setup-network --restore")
    return False


def restore(pair: Pair, inventory: Inventory) -> int:
    """Return both nodes to the state before the last apply (trust first, then network)."""
    def undo(connection: object) -> list[str]:
        done = []
        journal = steps.read_journal(connection, trust.JOURNAL)  # type: ignore[arg-type]
        if journal is not None:
            done += steps.restore(connection, journal)  # type: ignore[arg-type]
        done += network.roll_back(connection, inventory.node(connection.name))  # type: ignore[attr-defined]
        return done
    failed = False
    for name, result in pair.each(undo).items():
        if isinstance(result, BaseException):
            failed = True
            report.error_lines([f"{name}: restore failed: {result}"])
        else:
            report.line(f"{name}: {'; '.join(result)}")
    return 1 if failed else 0
