"""setup-network's watchdog: a root job left on a node before its network changes, which puts the
network back as it was and re-applies it unless sparkpair confirms in time (what `netplan try`
does at a console, here for two machines over SSH).

The watchdog is the root helper itself (`transport.root`, package data `sparkpair-root`): `arm` asks
its verb `watchdog-arm`, which copies the helper to /run/sparkpair-watchdog/watchdog beside the
run's data (the node's name, the stamp, the files the apply changes, copied as they are, and the
QSFP twins' previous state, each checked by the helper) and starts its timer: a transient systemd
timer (`systemd-run --on-active`) where systemd runs (pid 1 is systemd and `/run/systemd/system`
exists: `netplan generate` makes that directory even where systemd does not run), else a detached
process (`setsid`, `sleep`, then the watchdog's `fire`). So the watchdog runs no program but the
helper, and nothing the login wrote. `confirm` keeps the new network and disarms it; `revert` runs it
now; `state` reads where it is. Each is one round trip over an open connection; the watchdog logs to
/var/log/sparkpair-watchdog.log and removes its directory when it ends, whichever way.

A reboot inside the confirm window empties /run and ends the timer, while the new netplan file in
/etc/netplan stays: so arming also keeps a copy of the directory on disk (`BOOT_DIR`, synced before
any change) and, where systemd runs, enables a boot unit (`BOOT_UNIT`, running `BOOT_EXEC`) that
runs the copy's `boot` at the next boot: it puts the directory back in /run and reverts, as if the
timer had fired. Every end of the watchdog (confirm, cancel, revert, fire) removes the copy and the
unit first.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from sparkpair import paths, transport
from sparkpair.errors import SparkpairError, last_line
from sparkpair.inventory import Node
from sparkpair.network import rollback
from sparkpair.transport import HELPER_PATH, Root, Shell, root

DIR, SCRIPT, LOG = paths.WATCHDOG_DIR, paths.WATCHDOG_SCRIPT, paths.WATCHDOG_LOG
NETPLAN_TIMEOUT_S = 120  # the watchdog's own bound on `netplan apply` (it must end, and remove itself)
CONFIRM = f"sudo {HELPER_PATH} confirm (without the root helper: sudo sh {SCRIPT} confirm)"
REVERT = f"sudo {HELPER_PATH} revert (without the root helper: sudo sh {SCRIPT} revert)"
BOOT_DIR = "/var/backups/sparkpair-watchdog"  # the armed directory's copy that survives a reboot
BOOT_SCRIPT = f"{BOOT_DIR}/watchdog"
BOOT_EXEC = f"/bin/sh {BOOT_SCRIPT} boot"  # what the boot unit runs
BOOT_UNIT = "sparkpair-watchdog-boot.service"
BOOT_UNIT_FILE = f"/etc/systemd/system/{BOOT_UNIT}"
BOOT_WANTS = f"/etc/systemd/system/multi-user.target.wants/{BOOT_UNIT}"


def unit_name(stamp: str) -> str:
    """The transient systemd unit (`.timer` and `.service`) of one run's watchdog."""
    return f"{paths.WATCHDOG_UNIT}-{stamp}"


def arm_command(node: Node, stamp: str, seconds: int, files: Sequence[str], twins_before: str) -> Root:
    """The root helper's `watchdog-arm`: put files and twins back as before the apply of run stamp unless
    confirmed within seconds (each twin as `name,MTU,up|down,address/prefix...`)."""
    twins = [",".join(state) for state in rollback.twin_states(node, twins_before)]
    return Root("watchdog-arm", stamp, seconds, node.name, *files, "--", *twins)


@dataclass(frozen=True)
class Armed:
    """A watchdog left on a node: how it runs and when it fires (this machine's monotonic clock)."""

    node: str
    how: str           # "a transient systemd timer sparkpair-watchdog-STAMP.timer" or "a detached process (pid N)"
    seconds: float
    earliest: float    # time.monotonic() before which it cannot fire (confirm before this)
    latest: float      # time.monotonic() by which it has fired

    def describe(self) -> str:
        clock = time.strftime("%H:%M:%S", time.localtime(time.time() + self.earliest - time.monotonic()))
        return (f"watchdog armed as root ({self.how}): unless confirmed by {clock} ({self.seconds:g} s), it puts "
                "the network back as it was and re-applies it")


def arm(connection: transport.Node, node: Node, stamp: str, seconds: int, files: Sequence[str],
        twins_before: str) -> Armed:
    """Leave the watchdog on a node (as root); raises when it could not be armed (nothing changed then).
    The helper's text goes on stdin: where it is not installed, the watchdog is a copy of that text."""
    started = time.monotonic()
    result = connection.run(arm_command(node, stamp, seconds, files, twins_before), stdin=root.helper_text())
    if not result.ok:
        raise SparkpairError(f"cannot arm the watchdog: {last_line(result.stderr, f'exit {result.exit_code}')}",
                             node=connection.name, hint=f"if an earlier watchdog is pending, wait for it or: {CONFIRM}")
    kind, _, detail = last_line(result.stdout, "").partition(" ")
    how = f"a transient systemd timer {detail}.timer" if kind == "systemd" else f"a detached process (pid {detail})"
    return Armed(connection.name, how, seconds, started + seconds, time.monotonic() + seconds)


def state(connection: transport.Node) -> str:
    """Where a node's watchdog is: armed, reverting, confirmed, or gone (ended, or never armed)."""
    out = connection.check(Shell('d={}; for s in armed reverting confirmed; do [ -e "$d/$s" ] && echo $s && exit 0; '
                                 "done; echo gone", DIR))
    return out.strip() or "gone"


def confirm(connection: transport.Node, cancel: bool = False) -> bool:
    """Keep the new network (or, with cancel, disarm before any change): False when the watchdog had
    fired already (it reverts) or is not there."""
    result = connection.run(Root("cancel" if cancel else "confirm"), timeout=30)
    return result.ok and result.stdout.strip().endswith(("confirmed", "cancelled"))


def revert(connection: transport.Node) -> None:
    """Start the watchdog's revert now, detached from this SSH session (which its `netplan apply` may
    cut); `state` says `gone` once it has ended."""
    connection.check(Root("revert-soon"))


def log_tail(connection: transport.Node, lines: int = 1) -> list[str]:
    """The last lines the watchdogs logged on a node."""
    return connection.run(Shell("tail -n {} {} 2>/dev/null", lines, LOG)).stdout.splitlines()
