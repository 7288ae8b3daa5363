"""The setup-network command's flow: plan both nodes; then the network, self-reverting and verified;
then SSH trust, verified.

Nothing changes until both nodes are reached and planned (`plan_setup`, read-only: it is the dry
run). `apply_setup` applies the network under the nodes' watchdogs (`guarded`), then the SSH keys.
Ctrl-C at any stage lets each node finish the action it is in, then undoes what this run changed,
so both nodes are as before, and says so (a `--restore` is finished instead: `restore`). Progress
goes to a callback; the caller gets a `SetupResult`.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkpair import apply
from sparkpair.checks import Status, any_node, judge
from sparkpair.checks.known import known_checks, known_probes
from sparkpair.errors import Interrupted, SparkpairError
from sparkpair.inventory import Inventory
from sparkpair.network import guarded, netplan, rollback, trust, verify
from sparkpair.network.restore import restore
from sparkpair.network.run import SetupOptions, SetupPlan, SetupResult, SetupRun
from sparkpair.probes import ssh
from sparkpair.progress import Progress
from sparkpair.transport import Node, Pair

__all__ = ["SetupOptions", "SetupPlan", "SetupResult", "apply_setup", "plan_setup", "restore"]

RESTORE = "sparkpair setup-network --restore --last"


def plan_setup(pair: Pair, inventory: Inventory, options: SetupOptions,
               wanted: Mapping[str, str] | None = None) -> SetupPlan:
    """Probe both nodes (one round trip each) and plan the network and trust changes; changes nothing.
    wanted: the netplan files already rendered (`plan.wanted_netplan`), else they are rendered here."""
    try:
        beside = {name: [*asked, *known_probes(inventory)]
                  for name, asked in verify.state_probes(inventory, with_trust=not options.skip_ssh).items()}
        facts, current = netplan.probe_nodes(pair, [] if options.skip_ssh else [ssh.SSH_FILES], beside)
        plan = SetupPlan(facts, netplan.plan_network(inventory, facts, options.replace, wanted),
                         skip_ssh=options.skip_ssh, current=current)
        plan.known_refusals = [f"{row.node}: {row.check}: {row.detail} (fix: {row.fix})" for row in
                               judge(inventory, current, known_checks(options.catalog), ["known"])
                               if row.status is Status.FAIL]
        if options.skip_ssh:
            return plan
        files = trust.ssh_files(facts)
        plan.host_keys = {name: connection.server_key() for name, connection in pair.nodes.items()}
        plan.trust_changes, plan.trust_refusals = trust.trust_plan(inventory, files, plan.host_keys)
        plan.key_changes = trust.key_changes(files)
        return plan
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted before any change; nothing was changed on {any_node(len(inventory.nodes))}") \
            from None


def apply_setup(pair: Pair, inventory: Inventory, plan: SetupPlan, progress: Progress,
                options: SetupOptions | None = None) -> SetupResult:
    """Apply the network (self-reverting, verified), then set up and verify trust."""
    run = SetupRun(pair, inventory, plan, progress, options or SetupOptions())
    try:
        _apply(run)
    except KeyboardInterrupt:
        raise _undo_after_interrupt(run) from None
    return run.result


def _apply(run: SetupRun) -> None:
    result = run.result
    if run.plan.network.changes:
        if not guarded.apply_network(run):
            return
    else:
        run.stage = "verifying the link"
        problems = verify.judge_link(run.inventory, run.plan.current)
        if problems:  # probe again, polling: the planning round may have caught the link settling
            problems = verify.verify_link(run.pair, run.inventory)
        if problems:
            run.errors(problems)
            return
    result.link_verified = True
    run.say("", "link verified: carrier, addresses, MTU, pings and full-MTU don't-fragment pings both ways"
            f"{_between(run)}", "result")
    if run.plan.skip_ssh:
        result.ok = True
        return
    result.ok = result.trust_verified = _establish_trust(run)


def _establish_trust(run: SetupRun) -> bool:
    """Apply the key changes, then the trust changes (re-planned when a key was made), then verify."""
    run.stage = "exchanging SSH keys"
    changes = run.plan.trust_changes
    if run.plan.key_changes:
        if not _applied(run, run.plan.key_changes):
            return False
        changes, refusals = trust.trust_plan(run.inventory, trust.probe_ssh_files(run.pair), run.plan.host_keys)
        if refusals:
            run.errors(refusals)
            return False
    if changes and not _applied(run, changes):
        return False
    run.stage = "verifying SSH trust"
    changed = bool(run.plan.key_changes or changes or run.plan.network.changes)
    problems: list[str] = []
    if changed or verify.judge_trust(run.inventory, run.plan.current):  # probe again: the planning round's view is
        problems = verify.verify_trust(run.pair, run.inventory)        # out of date, or may have caught it settling
    if problems:
        run.errors(problems + ["undo with: sparkpair setup-network --restore"])
        return False
    run.say("", f"SSH trust verified: ssh -o BatchMode=yes works both ways{_between(run, ',')} over every QSFP address",
            "result")
    return True


def _between(run: SetupRun, then: str = "") -> str:
    """Where a verification went both ways: between the two nodes (said as always: nothing), or between
    every two nodes that share a subnet (then follows it)."""
    return "" if len(run.inventory.nodes) == 2 else f" between every two nodes that share a subnet{then}"


def _applied(run: SetupRun, changes: list[apply.Change]) -> bool:
    run.trust_started = True
    outcomes = apply.apply_changes(run.pair, changes, trust.JOURNAL, stamp=run.plan.stamp, progress=run.progress,
                                   first_touch=True)
    run.result.outcomes.update(outcomes)
    if any(outcome.interrupted for outcome in outcomes.values()):
        raise KeyboardInterrupt
    if all(outcome.ok for outcome in outcomes.values()):
        return True
    guarded.report_outcomes(run, outcomes)
    return False


def _undo_trust(run: SetupRun, connection: Node) -> list[str]:
    journal = apply.read_journal(connection, trust.JOURNAL)
    if journal is None or journal.stamp != run.plan.stamp:
        return []
    return apply.restore(connection, journal)


def _undo_network(run: SetupRun, connection: Node) -> list[str]:
    journal = apply.read_journal(connection, netplan.JOURNAL)
    if connection.name not in run.network_confirmed or journal is None or journal.stamp != run.plan.stamp:
        return []
    return rollback.roll_back(connection, run.inventory.node(connection.name))


def _undo_after_interrupt(run: SetupRun) -> Interrupted:
    """Undo what this run changed (each node finished its action first); the line that says where both are."""
    stage, count = run.stage, len(run.inventory.nodes)
    try:
        if run.armed and not run.network_applied:
            guarded.cancel(run)
        changed = run.network_applied or run.trust_started
        if not changed:
            return Interrupted(f"interrupted while {stage}; nothing was changed on {any_node(count)} "
                               f"({'both' if count == 2 else f'all {count}'} are as before)")
        run.say("", f"interrupted while {stage}: undoing this run on {'both nodes' if count == 2 else 'every node'}")
        if run.armed:
            guarded.revert(run, "interrupted")
        if run.trust_started or run.network_confirmed:
            undone = run.pair.each(lambda c: _undo_trust(run, c) + _undo_network(run, c))
            for name, done in undone.values.items():
                if done:
                    run.say(name, "undone: " + "; ".join(done))
            if not undone.ok:
                run.errors(undone.error_lines("undo"))
                return Interrupted(f"interrupted while {stage}; undoing this run failed on "
                                   f"{', '.join(undone.failed)} (above), so that node is not as before: {RESTORE}")
            guarded.report_states(run)
    except KeyboardInterrupt:
        return Interrupted(f"interrupted again while undoing this run (after {stage}); each node's state is above; "
                           f"finish with: {RESTORE}")
    except SparkpairError as error:
        return Interrupted(f"interrupted while {stage}; undoing this run failed: {' '.join(error.lines())}; "
                           f"finish with: {RESTORE}")
    if not run.result.rolled_back and run.network_applied and not run.network_confirmed:
        return Interrupted(f"interrupted while {stage}; a node did not come back as before (above): {RESTORE}")
    return Interrupted(f"interrupted while {stage}; each node finished the action it was in, then this run was "
                       f"undone: {'both nodes are' if count == 2 else 'every node is'} as before (states above)")
