"""`setup-network --restore`: each node as it was before sparkpair first changed it; `--last`: undo
only the last apply.

`undo_first_touch` puts back every file in the first-touch snapshot (`apply.firsttouch`: the
netplan files byte for byte, the SSH files sparkpair added or changed), re-applies netplan when a
netplan file changed, and puts the QSFP twins back to their state then (addresses, MTU, up or
down); then the snapshot is dropped, so that the next apply takes a new one. `undo_last` undoes
the per-run journals of the last apply (trust first, then network). Each node's restore is one
action: Ctrl-C lets both finish, so a restore is never left half done.
"""

from __future__ import annotations

import ipaddress

from sparkpair import apply, boundedjson, probes
from sparkpair.apply import firsttouch
from sparkpair.checks import any_node
from sparkpair.errors import Interrupted, SparkpairError
from sparkpair.inventory import Inventory
from sparkpair.network import netplan, rollback, trust
from sparkpair.probes import net
from sparkpair.progress import Event, Progress
from sparkpair.transport import Node, Pair

NOTHING = "nothing to restore"


def _twins_now(connection: Node, inventory: Inventory) -> str:
    interfaces = probes.gather(connection, [net.INTERFACES]).get(net.INTERFACES)
    if not isinstance(interfaces, dict):
        raise SparkpairError(f"cannot read the interfaces: {interfaces}", node=connection.name)
    return rollback.twins_snapshot(inventory.node(connection.name), interfaces)


def twins_problem(snapshot: str) -> str:
    """What is wrong with a twins snapshot (`rollback.twins_snapshot`'s JSON: per twin its MTU, up or
    down, IPv4 addresses); "" when nothing is. Checked before a restore acts on it."""
    try:
        data = boundedjson.loads(snapshot)
    except ValueError:
        return "it is not JSON: cut short or corrupt"
    if not isinstance(data, dict):
        return "it is not a JSON object"
    for name, state in data.items():
        mtu = state.get("mtu") if isinstance(state, dict) else None
        if not isinstance(mtu, int) or isinstance(mtu, bool) or not 68 <= mtu <= 65535:
            return f"{name}: 'mtu' is not an MTU"
        if not isinstance(state.get("up"), bool):
            return f"{name}: 'up' is not true or false"
        addresses = state.get("ipv4")
        if not isinstance(addresses, list) or not all(isinstance(a, str) and _ipv4_interface(a) for a in addresses):
            return f"{name}: 'ipv4' is not a list of IPv4 addresses with their prefix"
    return ""


def _ipv4_interface(text: str) -> bool:
    try:
        ipaddress.IPv4Interface(text)
    except ValueError:
        return False
    return True


def undo_first_touch(connection: Node, inventory: Inventory) -> list[str]:
    """Return one node to its state before sparkpair first changed it; what was done. Every record is read
    and checked first: one that cannot be used raises its one-line error before anything changes."""
    node = inventory.node(connection.name)
    records = firsttouch.records(connection)
    twins = firsttouch.twins(connection)
    if twins is not None and twins_problem(twins):
        raise firsttouch.unreadable_twins(connection, twins_problem(twins))
    if not records and twins is None:
        if _journals(connection):
            undone = undo_last(connection, inventory)
            return [f"no first-touch snapshot (the applies predate it); undid the last apply instead: {undone[0]}",
                    *undone[1:]]
        return [NOTHING]
    done = []
    netplan_changed = False
    for record in sorted(records, key=lambda r: r.sudo):  # the SSH files first, then the netplan files
        did = firsttouch.put_back(connection, record)
        if did:
            done.append(did)
            netplan_changed |= record.path.startswith("/etc/netplan/")
    if netplan_changed:
        connection.check(netplan.NETPLAN_APPLY)
        done.append("netplan generate && netplan apply")
    if twins is not None and boundedjson.loads(_twins_now(connection, inventory)) != boundedjson.loads(twins):
        connection.check(rollback.snapshot_commands(node, twins))
        done.append(f"twins back to: {rollback.describe_twins(node, twins)}")
    firsttouch.clear(connection)
    for command in (trust.JOURNAL, netplan.JOURNAL):
        apply.mark_restored(connection, command)
    return done or ["already as before sparkpair first changed it"]


def _journals(connection: Node) -> dict[str, apply.Journal]:
    """The node's journals not yet undone, by command (trust, network), each checked whole (the network's
    twins too); a SparkpairError naming the node and the file for one that cannot be used."""
    found = {command: apply.read_journal(connection, command) for command in (trust.JOURNAL, netplan.JOURNAL)}
    network = found.get(netplan.JOURNAL)
    twins = network.extra.get("twins_before", "") if network is not None else ""
    if twins and twins_problem(twins):
        raise apply.unreadable_journal(connection, netplan.JOURNAL, f"its 'twins_before': {twins_problem(twins)}")
    return {command: journal for command, journal in found.items() if journal is not None}


def undo_last(connection: Node, inventory: Inventory, stamp: str | None = None) -> list[str]:
    """Undo one apply on one node (trust first, then network): the run stamp's, by default the node's
    latest; what was done."""
    journals = _journals(connection)
    stamp = stamp or max((journal.stamp for journal in journals.values()), default=None)
    done = []
    trust_journal = journals.get(trust.JOURNAL)
    if trust_journal is not None and trust_journal.stamp == stamp:
        done += apply.restore(connection, trust_journal)
    network = journals.get(netplan.JOURNAL)
    if network is not None and network.stamp == stamp:
        done += rollback.roll_back(connection, inventory.node(connection.name))
    return done or [NOTHING]


def restore(pair: Pair, inventory: Inventory, progress: Progress, last: bool = False) -> bool:
    """--restore (or --restore --last) on both nodes; True when both are done.

    Ctrl-C lets each node finish its restore, reports what each did, and says so."""
    done: dict[str, list[str]] = {}
    stamp, count = "", len(inventory.nodes)
    if last:  # the pair's last apply (a node it did not change keeps its own earlier one)
        try:
            read = pair.each(_journals)
        except KeyboardInterrupt:
            raise Interrupted("interrupted during --restore, before any change: nothing was changed on "
                              f"{any_node(count)} ({'both' if count == 2 else f'all {count}'} are as before)") from None
        if not read.ok:  # a journal that cannot be used: say so for each node, change nothing on either
            for line in read.error_lines("restore --last"):
                progress(Event("", line, "error"))
            progress(Event("", f"nothing was changed on {any_node(count)}", "result"))
            return False
        stamp = max((journal.stamp for journals in read.values.values() for journal in journals.values()),
                    default="")

    def restore_node(connection: Node) -> None:
        done[connection.name] = undo_last(connection, inventory, stamp or "none") if last else \
            undo_first_touch(connection, inventory)

    interrupted = False
    try:
        undone = pair.each(restore_node)
    except KeyboardInterrupt:
        interrupted, undone = True, None
    for name in pair.nodes:
        if name in done:
            progress(Event(name, "; ".join(done[name]), "result"))
    if undone is not None:
        for line in undone.error_lines("restore"):
            progress(Event("", line, "error"))
    if interrupted:
        missing = [name for name in pair.nodes if name not in done]
        if missing:
            raise Interrupted(f"interrupted during --restore; {', '.join(missing)} did not finish restoring (see "
                              "above): run sparkpair setup-network --restore again")
        raise Interrupted("interrupted during --restore; each node finished restoring first: "
                          f"{'both nodes are' if count == 2 else 'every node is'} as planned (restored, above)")
    return undone is not None and undone.ok
