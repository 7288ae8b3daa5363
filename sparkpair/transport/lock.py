"""One sparkpair at a time per pair: a lock file on the head node that names its holder.

Taken by every command that starts containers or writes files on the nodes (read-only commands
never take it). Creation is atomic on the node (the shell's
hard link of a private file). A lock whose holder ran on this machine and is gone is stale and is
replaced with a warning; any other lock stops the command and names who holds it since when.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import socket
import time
from collections.abc import Iterator

from sparkpair import paths
from sparkpair.errors import ConnectError, SparkpairError
from sparkpair.transport import NodeConnection, Shell

LOCK_FILE = paths.LOCK.removeprefix("~/")


def holder(command: str) -> dict[str, object]:
    """Who this run is, as written into the lock."""
    return {"user": getpass.getuser(), "host": socket.gethostname(), "pid": os.getpid(),
            "command": command, "since": time.time()}


def describe(info: dict[str, object]) -> str:
    try:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(str(info.get("since", 0)))))
    except (TypeError, ValueError, OverflowError, OSError):  # a lock file written by hand, or damaged
        since = "an unknown time"
    return f"{info.get('user')}@{info.get('host')} pid {info.get('pid')} ({info.get('command')}, since {since})"


def is_stale(info: dict[str, object]) -> bool:
    """True when the holder ran on this machine and its process is gone."""
    if info.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(str(info.get("pid", 0))), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, TypeError, OverflowError):
        return False
    return False


def parse(raw: bytes | str | None) -> dict[str, object] | None:
    """The holder record in a lock file's content; None when it is missing, empty or not a JSON object."""
    try:
        info = json.loads(raw) if raw else None
    except ValueError:  # includes UnicodeDecodeError
        return None
    return info if isinstance(info, dict) else None


def _try_take(head: NodeConnection, mine: dict[str, object]) -> dict[str, object] | None:
    """Create the lock (a private file hard-linked into place: atomic, fails if it exists), in one round
    trip that also reads the lock when it is taken; None when taken, else the current holder's record."""
    path = f"{head.home}/{LOCK_FILE}"
    staged = f"{path}.{mine['host']}.{mine['pid']}"
    result = head.run(Shell("mkdir -p {} && (umask 077 && printf %s {} > {}) && { ln {} {} 2>/dev/null; rc=$?; "
                            "rm -f {}; [ $rc -eq 0 ] && exit 0; cat {} 2>/dev/null; exit 3; }",
                            os.path.dirname(path), json.dumps(mine), staged, staged, path, staged, path))
    if result.ok:
        return None
    if result.exit_code != 3:
        raise SparkpairError(f"cannot create the pair's lock {path}: {result.stderr.strip() or result.exit_code}",
                             node=head.name, hint=f"check that {os.path.dirname(path)} is writable by the user")
    if not result.stdout:
        return {"command": "unknown (empty lock file)"}
    return parse(result.stdout) or {"command": "unknown (unreadable lock file)"}


def release(head: NodeConnection, mine: dict[str, object], warn: object = None) -> None:
    """Remove the lock if it is still ours; an unreadable lock is not ours: left in place, with a warning.

    A head that cannot be reached (a network change cut it off) keeps the lock, with a warning: the
    next run from this machine finds it stale and replaces it."""
    try:
        _release(head, mine, warn)
    except ConnectError as error:
        if callable(warn):
            warn(f"{head.name}: could not release the pair's lock ({error.message}); the next sparkpair run from "
                 "this machine replaces it (its holder is gone), or run sparkpair unlock")


def _release(head: NodeConnection, mine: dict[str, object], warn: object) -> None:
    """Remove the lock when it holds exactly what this run wrote; one round trip, which also reads it back
    when it is not ours (to warn about an unreadable one)."""
    path = f"{head.home}/{LOCK_FILE}"
    result = head.run(Shell('[ -e {} ] || exit 0; c=$(cat {}) || exit 4; [ "$c" = {} ] && { rm -f {}; exit 0; }; '
                            'printf %s "$c"; exit 3', path, path, json.dumps(mine), path))
    if result.exit_code == 3 and parse(result.stdout) is None and callable(warn):
        warn(f"{head.name}: left the lock {path} in place: it is unreadable, so it may not be this run's "
             "(`sparkpair unlock` removes it)")


@contextlib.contextmanager
def held(head: NodeConnection, command: str, warn: object = None) -> Iterator[None]:
    """Hold the pair's lock for the duration of a changing command."""
    mine = holder(command)
    current = _try_take(head, mine)
    if current is not None and is_stale(current):
        if callable(warn):
            warn(f"removing a stale lock left by {describe(current)}")
        head.run(Shell("rm -f {}", f"{head.home}/{LOCK_FILE}"))
        current = _try_take(head, mine)
    if current is not None:
        raise SparkpairError(f"another sparkpair run holds the pair: {describe(current)}", node=head.name,
                             hint="wait for it; if it is gone, sparkpair unlock")
    try:
        yield
    finally:
        release(head, mine, warn)


def force_unlock(head: NodeConnection) -> str:
    """Remove the lock whoever holds it; what it said."""
    path = f"{head.home}/{LOCK_FILE}"
    raw = head.read(path)
    if raw is None:
        return "no lock"
    head.check(Shell("rm -f {}", path))
    info = parse(raw)
    return f"removed the lock of {describe(info)}" if info is not None else "removed an unreadable lock"
