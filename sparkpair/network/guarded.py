"""The self-reverting network apply: nothing setup-network changes can strand a node.

Before any change, each node that changes gets a root watchdog (`watchdog`) that puts its
network back as it was unless confirmed within `--confirm-timeout`. Then the changes are applied
(`netplan apply` bounded in time: it may cut the very SSH session it runs in), sparkpair reaches
both nodes again over NEW SSH connections and verifies the link with doctor's own checks, and only
then confirms. Anything short of that (a failed apply, a node that does not come back, a link that
does not verify, a Ctrl-C) reverts both nodes: a node sparkpair can reach reverts now, one it
cannot reach reverts by itself at its deadline, and sparkpair waits for it to come back.
"""

from __future__ import annotations

import dataclasses
import threading
import time

from sparkpair import apply
from sparkpair.apply import firsttouch
from sparkpair.errors import SparkpairError
from sparkpair.network import plan as netplan
from sparkpair.network import rollback, verify, watchdog
from sparkpair.network.run import SetupRun
from sparkpair.probes import net
from sparkpair.transport import NodeConnection, Pair

CONFIRM_MARGIN_S = 5.0    # confirm at least this long before a watchdog may fire
REVERT_MARGIN_S = 30.0    # how long past its deadline a node gets to come back by itself
RETRY_S = 1.0


def apply_timeout(confirm_timeout: float) -> float:
    """How long `netplan apply` may take before the node counts as cut off (it is reached again anyway)."""
    return max(5.0, min(30.0, confirm_timeout / 3))


def _files(changes: list[apply.Change]) -> list[str]:
    """The system files a node's changes write or remove (what its watchdog puts back)."""
    found = [action.path for change in changes for action in change.actions
             if isinstance(action, apply.WriteFile | apply.RemoveFile) and action.sudo]
    return list(dict.fromkeys(found))


def _bounded(changes: list[apply.Change], seconds: float) -> list[apply.Change]:
    """changes with every `netplan apply` bounded to seconds."""
    def bound(action: apply.Action) -> apply.Action:
        if isinstance(action, apply.RunCommand) and action.command is netplan.NETPLAN_APPLY:
            return dataclasses.replace(action, timeout=seconds)
        return action
    return [dataclasses.replace(change, actions=tuple(bound(a) for a in change.actions)) for change in changes]


def apply_network(run: SetupRun) -> bool:
    """Arm, apply, come back over new connections, verify, confirm; True when the new network stays.

    On failure both nodes are back as before (reported). Ctrl-C is raised as KeyboardInterrupt
    once every node finished the action it was in; `run` says what to undo."""
    changes = run.plan.network.changes
    names = [name for name in run.pair.nodes if any(change.node == name for change in changes)]
    before = {name: rollback.twins_snapshot(run.inventory.node(name), run.plan.facts[name][net.INTERFACES])
              for name in names}
    run.stage = "arming the watchdogs"

    def arm(connection: NodeConnection) -> None:
        firsttouch.record_twins(connection, before[connection.name])
        mine = [change for change in changes if change.node == connection.name]
        armed = watchdog.arm(connection, run.inventory.node(connection.name), run.plan.stamp,
                             int(run.options.confirm_timeout), _files(mine), before[connection.name])
        run.armed[connection.name] = armed
        run.say(connection.name, armed.describe())

    armed = run.pair.each(arm, names=names)
    if not armed.ok:
        run.errors(armed.error_lines())
        cancel(run)
        run.errors(["nothing was changed on either node"])
        return False
    run.stage = "applying the network"
    run.network_applied = True
    seconds = apply_timeout(run.options.confirm_timeout)
    outcomes = apply.apply_changes(run.pair, _bounded(changes, seconds), netplan.JOURNAL, stamp=run.plan.stamp,
                                   progress=run.progress, extra={n: {"twins_before": before[n]} for n in names},
                                   first_touch=True)
    run.result.outcomes.update(outcomes)
    if any(outcome.interrupted for outcome in outcomes.values()):
        raise KeyboardInterrupt
    failed = [name for name, outcome in outcomes.items() if outcome.failed and not outcome.timed_out]
    for name, outcome in outcomes.items():
        if outcome.timed_out:
            run.say(name, f"no answer within {seconds:.0f} s after `netplan apply`: it may have cut this SSH "
                          "session", "warning")
    if failed:
        report_outcomes(run, outcomes)
        revert(run, "apply failed")
        return False
    return _verify_and_confirm(run)


def _verify_and_confirm(run: SetupRun) -> bool:
    run.stage = "verifying the link"
    run.say("", "reaching both nodes again over new SSH connections")
    unreachable = reconnect(run.pair, run.seconds_left() - CONFIRM_MARGIN_S - 2)
    if unreachable:
        run.errors([f"{name}: not reachable over a new SSH connection after the apply" for name in unreachable])
        revert(run, f"{', '.join(unreachable)} cut off by the new network", cut_off=unreachable)
        return False
    problems = verify.verify_link(run.pair, run.inventory, max(0.0, min(20.0, run.seconds_left() - CONFIRM_MARGIN_S)))
    if problems:
        run.errors(problems)
        revert(run, "the link did not verify")
        return False
    if run.seconds_left() < 1:
        revert(run, "verified too late to confirm before the watchdogs' deadline; try a longer --confirm-timeout")
        return False
    run.stage = "confirming the new network"
    confirmed = run.pair.each(watchdog.confirm, names=list(run.armed))
    kept = [name for name, ok in confirmed.values.items() if ok]
    run.network_confirmed += kept
    for name in kept:
        del run.armed[name]
        run.say(name, "confirmed over a new SSH connection with the link verified: watchdog disarmed, the new "
                      "network stays")
    if not run.armed:
        return True
    run.errors([f"{name}: its watchdog fired before sparkpair could confirm" for name in run.armed])
    revert(run, "a watchdog fired before the confirmation")
    return False


def reconnect(pair: Pair, seconds: float, names: list[str] | None = None) -> list[str]:
    """Close and reopen the nodes' SSH connections, retrying for up to seconds; the nodes not reached."""
    until = time.monotonic() + seconds
    stop = threading.Event()

    def again(connection: NodeConnection) -> bool:
        connection.close()
        while True:
            try:
                connection.connect(timeout=_attempt(until))
                return True
            except SparkpairError:
                connection.close()
                if stop.is_set() or time.monotonic() + RETRY_S >= until:
                    return False
                time.sleep(RETRY_S)

    result = pair.each(again, names=names, cancel=stop)
    return [name for name in result if not result.values.get(name, False)]


def _attempt(until: float) -> float:
    """Seconds one connection attempt may take so as to end by until (at least 1, at most 10)."""
    return max(1.0, min(10.0, until - time.monotonic()))


def cancel(run: SetupRun) -> None:
    """Disarm the watchdogs left before any change was made (best effort: each one logs it)."""
    if run.armed:
        run.pair.each(lambda connection: watchdog.confirm(connection, cancel=True), names=list(run.armed))
    run.armed.clear()


def revert(run: SetupRun, why: str, cut_off: list[str] | None = None) -> None:
    """Put every node whose watchdog is armed back as before: now where sparkpair reaches it, by its
    own watchdog where it does not (then wait until it is back); then report each node's state.

    cut_off: nodes known to be unreachable (their watchdog is left to fire)."""
    run.stage = "rolling back"
    run.say("", f"rolling back both nodes ({why})")
    back: dict[str, str] = {}

    def put_back(connection: NodeConnection) -> None:
        back[connection.name] = _back(run, connection, connection.name in (cut_off or []))

    try:  # Ctrl-C meanwhile: every node still finishes coming back, then it is reported and raised
        result = run.pair.each(put_back, names=list(run.armed))
    except KeyboardInterrupt:
        result = None
    for name in list(run.armed):
        if name in back:
            run.say(name, back[name])
            del run.armed[name]
    if result is not None:
        run.errors(result.error_lines("rollback"))
    run.result.rolled_back = not run.armed
    report_states(run)
    if result is None:
        raise KeyboardInterrupt


def _back(run: SetupRun, connection: NodeConnection, cut_off: bool) -> str:
    armed = run.armed[connection.name]
    give_up = armed.latest + REVERT_MARGIN_S
    connection.close()
    asked = False
    if cut_off:
        _waiting(run, armed)
    while True:
        try:
            connection.connect(timeout=_attempt(give_up))
            where = watchdog.state(connection)
            if where == "armed" and not asked:
                asked = True
                watchdog.revert(connection)
            if where == "gone":
                journal = apply.read_journal(connection, netplan.JOURNAL)
                if journal is not None and journal.stamp == run.plan.stamp:
                    apply.mark_restored(connection, netplan.JOURNAL)
                said = "; ".join(watchdog.log_tail(connection)) or "no log"
                how = "reverted now" if asked else "came back by itself (reached over a new SSH connection)" \
                    if cut_off else "reverted by its watchdog"
                return f"{how}; its watchdog logged: {said}"
        except SparkpairError:
            if not cut_off and not asked:
                _waiting(run, armed)
            cut_off = True
            connection.close()
        if time.monotonic() >= give_up:
            raise SparkpairError(f"did not come back within {REVERT_MARGIN_S:g} s after its watchdog's deadline",
                                 node=connection.name, hint=f"reach it at its console; its watchdog logs to "
                                                            f"{watchdog.LOG}")
        time.sleep(RETRY_S)


def _waiting(run: SetupRun, armed: watchdog.Armed) -> None:
    clock = time.strftime("%H:%M:%S", time.localtime(time.time() + armed.latest - time.monotonic()))
    run.say(armed.node, f"not reachable; its watchdog puts it back by itself at {clock}: waiting for it (up to "
                        f"{REVERT_MARGIN_S:g} s more)")


def report_states(run: SetupRun) -> None:
    """Each node's twins as they are now (best effort, never raises: it follows a failure or an interrupt)."""
    for name, connection in run.pair.nodes.items():
        try:
            run.say(name, f"now {verify.node_state(connection, run.inventory.node(name))}")
        except Exception as error:  # noqa: BLE001 (a report after Ctrl-C must not hide the interrupt)
            run.say(name, f"state unknown ({type(error).__name__}); sparkpair doctor --only links shows it")


def report_outcomes(run: SetupRun, outcomes: dict[str, apply.NodeOutcome]) -> None:
    """What an apply did on each node, as events."""
    for node, outcome in outcomes.items():
        if outcome.ok:
            run.say(node, f"applied {len(outcome.applied)} change(s)")
            continue
        if outcome.applied:
            run.say(node, f"applied: {'; '.join(outcome.applied)}")
        if outcome.failed:
            run.say(node, f"{outcome.failed_change or 'apply'} failed: {outcome.failed}", "error")
        if outcome.not_started:
            run.say(node, f"not started{' (interrupted)' if outcome.interrupted else ''}: "
                          f"{'; '.join(outcome.not_started)}")
