"""The self-reverting network apply: nothing setup-network changes can strand a node.

Before any change, each node that changes gets a root watchdog (`watchdog`) that puts its
network back as it was unless confirmed within `--confirm-timeout`. Then the changes are applied
(`netplan apply` bounded in time: it may cut the very SSH session it runs in), sparkpair reaches
both nodes again over NEW SSH connections and verifies the link with doctor's own checks, and only
then confirms. Anything short of that (a failed apply, a node that does not come back, a link that
does not verify, a watchdog that fired before its node's confirmation, a Ctrl-C) reverts both
nodes: a node sparkpair can reach reverts now, one it cannot reach reverts by itself at its
deadline, and sparkpair waits for it to come back; a node that confirmed while the other did not is
rolled back from its journal. Then each node is checked against its state before the apply (files
and twins), and the report says what each one holds.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sparkpair import apply, transport
from sparkpair.apply import firsttouch
from sparkpair.checks import any_node, every_node
from sparkpair.errors import SparkpairError
from sparkpair.inventory import Node
from sparkpair.network import netplan, rollback, verify, watchdog
from sparkpair.network.run import SetupRun
from sparkpair.probes import net
from sparkpair.transport import Pair

CONFIRM_MARGIN_S = 5.0    # confirm at least this long before a watchdog may fire
REVERT_MARGIN_S = 30.0    # how long past its deadline a node gets to come back by itself
RETRY_S = 1.0
SETTLE_S = 5.0            # how long a node rolled back from its journal gets to show its old twins


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
    run.twins_before = before
    run.stage = "arming the watchdogs"

    def arm(connection: transport.Node) -> None:
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
        run.errors([f"nothing was changed on {any_node(len(run.inventory.nodes))}"])
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
    run.say("", f"reaching {every_node(len(run.inventory.nodes))} again over new SSH connections")
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
    asked = [name for name in run.pair.nodes if name in run.armed]  # in the inventory's order, however they armed
    answers = run.pair.each(watchdog.confirm, names=asked)
    verdict = judge_confirmation(asked, answers.values, answers.failed)
    run.network_confirmed += verdict.kept
    for name in verdict.kept:
        del run.armed[name]
    if verdict.keep:
        for name in verdict.kept:
            run.say(name, "confirmed over a new SSH connection with the link verified: watchdog disarmed, the new "
                          "network stays")
        return True
    run.errors([f"{name}: {why}" for name, why in verdict.missed.items()])
    for name in verdict.kept:
        run.say(name, verdict.rolling_back(name), "warning")
    revert(run, "a watchdog fired before the confirmation" if verdict.fired else "a node could not be confirmed")
    return False


@dataclass(frozen=True)
class Confirmation:
    """What the confirmations said: the nodes that kept the new network, and each node that did not, why.

    The new network stays only when every node kept it; otherwise both nodes go back as before, those
    that kept it too (from their journals): a pair is never left with one node on each side."""

    kept: list[str]
    missed: dict[str, str]
    fired: bool  # some node answered that its watchdog had fired (rather than not answering)

    @property
    def keep(self) -> bool:
        return not self.missed

    def rolling_back(self, name: str) -> str:
        """What is said of a node that kept the new network when another did not."""
        others = ", ".join(self.missed)
        return (f"confirmed, but {others} {'was' if len(self.missed) == 1 else 'were'} not: rolling {name} back too, "
                f"so that {'both nodes end' if len(self.kept) + len(self.missed) == 2 else 'every node ends'} as before")


def judge_confirmation(asked: Sequence[str], answers: Mapping[str, bool],
                       errors: Mapping[str, BaseException]) -> Confirmation:
    """The confirmations' verdict (pure): answers[node] is True when the node kept the new network, False
    when its watchdog had fired; a node in errors did not answer (whether it kept it is unknown)."""
    missed: dict[str, str] = {}
    for name in asked:
        if name in errors:
            error = errors[name]
            said = error.message if isinstance(error, SparkpairError) else f"{type(error).__name__}: {error}"
            missed[name] = f"could not be confirmed ({said}); its state is checked below"
        elif answers.get(name) is not True:
            missed[name] = "its watchdog fired before sparkpair could confirm"
    fired = any(name not in errors and answers.get(name) is not True for name in asked)
    return Confirmation([name for name in asked if name not in missed], missed, fired)


def reconnect(pair: Pair, seconds: float, names: list[str] | None = None) -> list[str]:
    """Close and reopen the nodes' SSH connections, retrying for up to seconds; the nodes not reached."""
    until = time.monotonic() + seconds
    stop = threading.Event()

    def again(connection: transport.Node) -> bool:
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
    """Put every node this run changed back as before, and check it: a node whose watchdog is armed
    reverts now where sparkpair reaches it, by its own watchdog where it does not (then sparkpair waits
    until it is back); then each node's files and twins are compared with before the apply, and a node
    not as before (one that confirmed, or whose watchdog fired before its apply ended) is rolled back
    from its journal. Then each node's state is reported, as `ip addr` shows it.

    cut_off: nodes known to be unreachable (their watchdog is left to fire)."""
    run.stage = "rolling back"
    run.say("", f"rolling back {'both nodes' if len(run.inventory.nodes) == 2 else 'every node this run changed'} "
                f"({why})")
    back: set[str] = set()       # nodes whose watchdog is done
    settled: set[str] = set()    # nodes checked as before (or rolled back to it)
    said: dict[str, list[str]] = {}

    def put_back(connection: transport.Node) -> None:
        lines = said.setdefault(connection.name, [])
        if connection.name in run.armed:
            lines.append(_back(run, connection, connection.name in (cut_off or [])))
            back.add(connection.name)
        lines += _settle(run, connection)
        settled.add(connection.name)

    names = [name for name in run.pair.nodes if name in run.armed or name in run.twins_before]
    try:  # Ctrl-C meanwhile: every node still finishes coming back, then it is reported and raised
        result = run.pair.each(put_back, names=names)
    except KeyboardInterrupt:
        result = None
    for name in names:
        for line in said.get(name, []):
            run.say(name, line)
    for name in back:
        run.armed.pop(name, None)
    run.network_confirmed[:] = [name for name in run.network_confirmed if name not in settled]
    if result is not None:
        run.errors(result.error_lines("rollback"))
    run.result.rolled_back = settled == set(names) and not run.armed
    report_states(run)
    if result is None:
        raise KeyboardInterrupt


def _settle(run: SetupRun, connection: transport.Node) -> list[str]:
    """Check that a node whose watchdog is done holds what it held before this run (its journal's files, its
    twins); roll it back from its journal when it does not. What was done; raises when it is not as before."""
    name = connection.name
    node, before = run.inventory.node(name), run.twins_before.get(name)
    if before is None:
        return []
    journal = apply.read_journal(connection, netplan.JOURNAL)
    ours = journal if journal is not None and journal.stamp == run.plan.stamp else None
    found = rollback.differences(connection, node, before, ours)
    said = []
    if found and ours is not None:
        done = rollback.roll_back(connection, node)
        said.append(f"still held this run's network ({'; '.join(found)}): rolled back from its journal: "
                    f"{'; '.join(done)}")
        found = _settled(connection, node, before, ours)
    elif ours is not None:
        apply.mark_restored(connection, netplan.JOURNAL)  # put back by its watchdog: not to be undone again
    if found:
        raise SparkpairError(f"not back as before this run: {'; '.join(found)}", node=name,
                             hint="sparkpair setup-network --restore puts it back as before sparkpair first changed it")
    return [*said, "back as before this run: its netplan files and QSFP twins as they were"]


def _settled(connection: transport.Node, node: Node, before: str, journal: apply.Journal) -> list[str]:
    """What is still not as before after a rollback, polled for a few seconds (networkd settles)."""
    until = time.monotonic() + SETTLE_S
    while True:
        found = rollback.differences(connection, node, before, journal)
        if not found or time.monotonic() >= until:
            return found
        time.sleep(RETRY_S)


def _back(run: SetupRun, connection: transport.Node, cut_off: bool) -> str:
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
