"""One sparkpair at a time per pair: a lock file on the head node that names its holder.

Taken by every command that starts containers or writes files on the nodes (read-only commands
never take it). Creation is atomic on the node (the shell's hard link of a private file). The
holder is named by the machine it runs on (`/etc/machine-id`, not the hostname: two laptops may
share one), its boot, its pid and that process's start time. A lock whose holder ran on this
machine and is gone (another boot, no such pid, or the pid now another process) is stale and is
taken over with a warning: compare-and-delete under `flock` on the lock's directory, so that of
two runs judging the same stale lock, only one replaces it and the other is refused, naming the
winner. Any other lock stops the command and names who holds it since when.
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import json
import os
import re
import secrets
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

from sparkpair import boundedjson, paths
from sparkpair.errors import ConnectError, SparkpairError
from sparkpair.transport import Node, Shell

LOCK_FILE = paths.LOCK.removeprefix("~/")
MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
TAKEOVER_WAIT_S = 10  # how long a takeover waits for another run's takeover of the same lock (on the node)
_MACHINE_ID = re.compile(r"[0-9a-f]{32}")
_BOOT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True)
class Found:
    """A lock found on the head: its holder's record, and its exact content (what a takeover compares)."""

    info: dict[str, object]
    content: str


def _read_id(path: str, pattern: re.Pattern[str]) -> str | None:
    try:
        with open(path, encoding="ascii") as file:
            text = file.read(100).strip()
    except (OSError, ValueError):
        return None
    return text if pattern.fullmatch(text) else None


@functools.cache
def machine_id() -> str | None:
    """This machine's id (systemd's `/etc/machine-id`); None where it has none (then no lock is judged stale)."""
    return next(filter(None, (_read_id(path, _MACHINE_ID) for path in MACHINE_ID_FILES)), None)


def boot_id() -> str | None:
    """This boot's id (the kernel's); None where the kernel has none."""
    return _read_id(BOOT_ID_FILE, _BOOT_ID)


def process_start(pid: int) -> str | None:
    """When process pid started, in clock ticks since boot (`/proc/PID/stat`); None when unknown or gone."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as file:
            stat = file.read(4096)
    except (OSError, ValueError, OverflowError):
        return None
    fields = stat.rpartition(b")")[2].split()  # the name in parentheses may hold spaces and ')'
    return fields[19].decode() if len(fields) > 19 and fields[19].isdigit() else None


def holder(command: str) -> dict[str, object]:
    """Who this run is, as written into the lock: user, host (for people), machine, boot, pid and
    its start time (what staleness is judged by), command and since."""
    pid = os.getpid()
    return {"user": getpass.getuser(), "host": socket.gethostname(), "machine": machine_id(), "boot": boot_id(),
            "pid": pid, "started": process_start(pid), "command": command, "since": time.time()}


def _shown(value: object) -> str:
    """A field of a lock (hostile: written on the node) as one line of printable text."""
    text = str(value)[:200]
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def describe(info: dict[str, object]) -> str:
    try:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(str(info.get("since", 0)))))
    except (TypeError, ValueError, OverflowError, OSError):  # a lock file written by hand, or damaged
        since = "an unknown time"
    return (f"{_shown(info.get('user'))}@{_shown(info.get('host'))} pid {_shown(info.get('pid'))} "
            f"({_shown(info.get('command'))}, since {since})")


def is_stale(info: dict[str, object]) -> bool:
    """True when the holder ran on this very machine (same machine id) and is gone: the machine booted
    since, no process has its pid, or the process with its pid started at another time (the pid was
    reused). A lock without a machine id (hand-written, or from an older sparkpair) is never stale."""
    mine = machine_id()
    if mine is None or info.get("machine") != mine:
        return False
    booted, now = info.get("boot"), boot_id()
    if isinstance(booted, str) and now is not None and booted != now:
        return True
    pid = info.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        pass  # alive, another user's (or not a pid): judged by its start time
    started, running = info.get("started"), process_start(pid)
    return isinstance(started, str) and running is not None and running != started


def parse(raw: bytes | str | None) -> dict[str, object] | None:
    """The holder record in a lock file's content; None when it is missing, empty or not a JSON object."""
    try:
        info = boundedjson.loads(raw) if raw else None
    except ValueError:  # includes UnicodeDecodeError
        return None
    return info if isinstance(info, dict) else None


def _take_command(path: str, mine: dict[str, object], replacing: str | None) -> Shell:
    """The node's command that creates the lock from a private file hard-linked into place (atomic:
    fails if it exists), and prints the lock when it is taken (exit 3). With replacing: first, under
    `flock` on the lock's directory (every takeover takes it), remove the lock only if it still holds
    exactly replacing (the stale lock judged), so that one takeover of a stale lock wins."""
    directory, staged = os.path.dirname(path), f"{path}.{secrets.token_hex(8)}"
    create = Shell("(umask 077 && printf %s {} > {}) || exit 1", json.dumps(mine), staged)
    link = Shell("ln {} {} 2>/dev/null; rc=$?; rm -f {}; [ $rc -eq 0 ] && exit 0; cat {} 2>/dev/null; exit 3",
                 staged, path, staged, path)
    if replacing is None:
        return Shell.compose([Shell("mkdir -p {} || exit 1", directory), create, link], "; ")
    return Shell.compose([
        Shell("command -v flock >/dev/null || { echo 'flock (util-linux) is missing on this node' >&2; exit 1; }"),
        Shell("mkdir -p {} || exit 1", directory), create,
        Shell("{ flock -w {} 9 || { rm -f {}; echo {} >&2; exit 1; }", TAKEOVER_WAIT_S, staged,
              f"another run kept {directory} locked for {TAKEOVER_WAIT_S} s"),
        Shell('if [ -e {} ] && [ "$(cat {})" = {} ]; then rm -f {}; fi', path, path, replacing.rstrip("\n"), path),
        link, Shell("} 9<{}", directory)], "; ")


def _try_take(head: Node, mine: dict[str, object], replacing: str | None = None) -> Found | None:
    """Create the lock in one round trip that also reads it when it is taken; None when taken, else
    the lock found. replacing: the content of a stale lock to remove first, if it is still that."""
    path = f"{head.home}/{LOCK_FILE}"
    result = head.run(_take_command(path, mine, replacing))
    if result.ok:
        return None
    if result.exit_code != 3:
        raise SparkpairError(f"cannot create the pair's lock {path}: {result.stderr.strip() or result.exit_code}",
                             node=head.name, hint=f"check that {os.path.dirname(path)} is writable by the user")
    if not result.stdout:
        return Found({"command": "unknown (empty lock file)"}, "")
    return Found(parse(result.stdout) or {"command": "unknown (unreadable lock file)"}, result.stdout)


def release(head: Node, mine: dict[str, object], warn: object = None) -> None:
    """Remove the lock if it is still ours; an unreadable lock is not ours: left in place, with a warning.

    A head that cannot be reached (a network change cut it off) keeps the lock, with a warning: the
    next run from this machine finds it stale and replaces it (where the machine has an id)."""
    try:
        _release(head, mine, warn)
    except ConnectError as error:
        if callable(warn):
            then = "the next sparkpair run from this machine replaces it (its holder is gone), or run sparkpair " \
                "unlock" if machine_id() is not None else "run sparkpair unlock (this machine has no machine id)"
            warn(f"{head.name}: could not release the pair's lock ({error.message}); {then}")


def _release(head: Node, mine: dict[str, object], warn: object) -> None:
    """Remove the lock when it holds exactly what this run wrote; one round trip, which also reads it back
    when it is not ours (to warn about an unreadable one)."""
    path = f"{head.home}/{LOCK_FILE}"
    result = head.run(Shell('[ -e {} ] || exit 0; c=$(cat {}) || exit 4; [ "$c" = {} ] && { rm -f {}; exit 0; }; '
                            'printf %s "$c"; exit 3', path, path, json.dumps(mine), path))
    if result.exit_code == 3 and parse(result.stdout) is None and callable(warn):
        warn(f"{head.name}: left the lock {path} in place: it is unreadable, so it may not be this run's "
             "(`sparkpair unlock` removes it)")


@contextlib.contextmanager
def held(head: Node, command: str, warn: object = None) -> Iterator[None]:
    """Hold the pair's lock for the duration of a changing command; a stale lock is taken over (only
    the exact one judged stale), any other lock refuses with its holder named."""
    mine = holder(command)
    current = _try_take(head, mine)
    if current is not None and is_stale(current.info):
        if callable(warn):
            warn(f"removing a stale lock left by {describe(current.info)}")
        current = _try_take(head, mine, replacing=current.content)
    if current is not None:
        raise SparkpairError(f"another sparkpair run holds the pair: {describe(current.info)}", node=head.name,
                             hint="wait for it; if it is gone, sparkpair unlock")
    try:
        yield
    finally:
        release(head, mine, warn)


def held_by(head: Node) -> str:
    """Who holds the pair's lock, as force_unlock words it ("no lock" when none is held); changes nothing."""
    raw = head.read(f"{head.home}/{LOCK_FILE}")
    if raw is None:
        return "no lock"
    info = parse(raw)
    return f"the lock of {describe(info)}" if info is not None else "an unreadable lock"


def force_unlock(head: Node) -> str:
    """Remove the lock whoever holds it; what it said."""
    path = f"{head.home}/{LOCK_FILE}"
    raw = head.read(path)
    if raw is None:
        return "no lock"
    head.check(Shell("rm -f {}", path))
    info = parse(raw)
    return f"removed the lock of {describe(info)}" if info is not None else "removed an unreadable lock"
