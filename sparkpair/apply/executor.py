"""Plan, then apply: changes are data with unified diffs; one generic executor applies them.

Planning reads probes only. `apply_changes` runs each node's changes in order (both nodes at
once), backs up every file before replacing it, and keeps a journal on the node after every
action, so an interrupted or failed apply can be reported exactly and undone (`restore`). With
`first_touch`, each file is also recorded as it was before sparkpair first changed it
(`firsttouch`).
"""

from __future__ import annotations

import difflib
import json
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from sparkpair import boundedjson, paths
from sparkpair.apply import firsttouch
from sparkpair.errors import RemoteCommandError, SparkpairError
from sparkpair.progress import Event, Progress, silent
from sparkpair.transport import Node, Pair, Root, Shell

JOURNAL_DIR = paths.JOURNAL_DIR.removeprefix("~/")
STAMP = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]{0,63}")  # a run stamp: one safe name (run_stamp: 20250101-000000)


@dataclass(frozen=True)
class WriteFile:
    """Write content to path atomically (sudo: a system file, root's, written by the root helper, which takes
    only netplan files); ~/ is the user's home."""

    path: str
    content: str
    mode: int = 0o644
    sudo: bool = False


@dataclass(frozen=True)
class RemoveFile:
    path: str
    sudo: bool = False


@dataclass(frozen=True)
class RunCommand:
    """Run a command that must succeed (as root: a `Root` verb); `creates` lists user files it makes (on
    restore: removed, or put back as they were if they existed before). With a timeout, a command that does
    not end in time stops that node's apply as timed out (e.g. a `netplan apply` that cut the SSH session
    it ran in)."""

    command: Shell
    creates: tuple[str, ...] = ()
    timeout: float | None = None


class ActionTimedOut(SparkpairError):
    """A RunCommand did not end within its timeout: its outcome on the node is unknown."""


Action = WriteFile | RemoveFile | RunCommand


@dataclass(frozen=True)
class Change:
    """One planned change on one node: what `--dry-run` prints and `apply_changes` executes."""

    node: str
    summary: str
    actions: tuple[Action, ...]
    diff: str = ""


def file_diff(path: str, old: str | None, new: str | None) -> str:
    """Unified diff of a file's content (None: the file does not exist)."""
    lines = difflib.unified_diff((old or "").splitlines(keepends=True), (new or "").splitlines(keepends=True),
                                 fromfile="/dev/null" if old is None else path,
                                 tofile="/dev/null" if new is None else path)
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def write_change(node: str, path: str, old: str | None, new: str, *, mode: int = 0o644, sudo: bool = False,
                 summary: str = "", then: Sequence[RunCommand] = ()) -> Change | None:
    """A change writing path, or None when it already holds exactly new."""
    if old == new:
        return None
    verb = "create" if old is None else "update"
    return Change(node, summary or f"{verb} {path}", (WriteFile(path, new, mode, sudo), *then),
                  file_diff(path, old, new))


@dataclass
class Journal:
    """What an apply did on one node, in order: enough to undo it."""

    command: str
    stamp: str
    entries: list[dict[str, object]] = field(default_factory=list)
    finished: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)


@dataclass
class NodeOutcome:
    """How far the apply got on one node."""

    applied: list[str] = field(default_factory=list)
    failed: str | None = None
    failed_change: str | None = None
    not_started: list[str] = field(default_factory=list)
    interrupted: bool = False
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.failed is None and not self.not_started and not self.interrupted


def journal_path(connection: Node, command: str) -> str:
    return f"{connection.home}/{JOURNAL_DIR}/{command}.json"


def read_journal(connection: Node, command: str) -> Journal | None:
    """The node's journal of command, checked whole before anything acts on it; None when there is none.

    A journal cut short, corrupt or only partly there (not UTF-8 JSON, a field missing or of the wrong
    type, a path that is not a clean absolute one, a backup that is not where an apply puts it) raises
    one SparkpairError naming the node, the file and the fix: nothing is undone from a journal in part."""
    raw = connection.read(journal_path(connection, command))
    if raw is None:
        return None
    try:
        return parse_journal(raw, command, connection.home)
    except ValueError as problem:
        raise unreadable_journal(connection, command, str(problem)) from None


def unreadable_journal(connection: Node, command: str, problem: str) -> SparkpairError:
    """The one-line error for a journal that cannot be used: the node, the file, what is wrong, the fix."""
    path = journal_path(connection, command)
    return SparkpairError(
        f"the journal {path} cannot be read ({problem}), so the apply it records cannot be undone from it",
        node=connection.name,
        hint=f"set it aside with mv {path} {path}.unreadable and run again; sparkpair setup-network --restore "
             "still returns the node to its state before sparkpair first changed it")


def parse_journal(raw: bytes, command: str, home: str) -> Journal:
    """The journal of command in raw, every field checked; ValueError naming the first one that is wrong."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("it is not UTF-8 text") from None
    try:
        data = boundedjson.loads(text)
    except boundedjson.Refused as error:
        raise ValueError(f"it is not whole JSON, cut short or corrupt: {error.detail} of {len(text)}") from None
    if not isinstance(data, dict):
        raise ValueError("it is not a JSON object")
    if data.get("command") != command:
        raise ValueError(f"its 'command' is not {command!r}")
    stamp = data.get("stamp")
    if not isinstance(stamp, str) or not STAMP.fullmatch(stamp):
        raise ValueError("its 'stamp' is missing or not a run stamp")
    entries, finished, extra = data.get("entries", []), data.get("finished", False), data.get("extra", {})
    if not isinstance(entries, list):
        raise ValueError("its 'entries' is not a list")
    for number, entry in enumerate(entries, 1):
        problem = _entry_problem(entry, stamp, home)
        if problem:
            raise ValueError(f"entry {number}: {problem}")
    if not isinstance(finished, bool):
        raise ValueError("its 'finished' is not true or false")
    if not isinstance(extra, dict) or not all(isinstance(v, str) for v in extra.values()):
        raise ValueError("its 'extra' is not a mapping of texts")
    return Journal(command, stamp, entries, finished, extra)


def _entry_problem(entry: object, stamp: str, home: str) -> str:
    """What is wrong with one journal entry ("" when nothing): the keys an apply writes, each as it writes it."""
    if not isinstance(entry, dict) or set(entry) != {"path", "backup", "sudo"}:
        return "it does not hold exactly 'path', 'backup' and 'sudo'"
    path, backup, sudo = entry["path"], entry["backup"], entry["sudo"]
    if not isinstance(sudo, bool):
        return "its 'sudo' is not true or false"
    if not isinstance(path, str) or not firsttouch.clean_absolute(path):
        return "its 'path' is not a clean absolute path"
    if backup is not None and backup != backup_path(home, stamp, path, sudo):
        return f"its 'backup' of {path} is not where the apply of {stamp} keeps it"
    return ""


def _save_journal(connection: Node, journal: Journal) -> None:
    """Write the journal (its directory exists: `_journal_for` made it)."""
    connection.put(journal.to_json(), journal_path(connection, journal.command), mode=0o600)


def _expand(connection: Node, path: str) -> str:
    return connection.home + path[1:] if path.startswith("~/") else path


def backup_path(home: str, stamp: str, path: str, sudo: bool) -> str:
    """Where the apply of stamp copies path aside before changing it (system files under root's store)."""
    store = f"{paths.SYSTEM_BACKUPS}/{stamp}" if sudo else f"{paths.under_home(paths.USER_BACKUPS, home)}/{stamp}"
    return f"{store}/{path.strip('/').replace('/', '%')}"


def _backup(connection: Node, journal: Journal, path: str, sudo: bool, first_touch: bool) -> None:
    """Copy path aside (if it exists) and journal where to find it; with first_touch, also record it
    as it was before sparkpair first changed it (once)."""
    backup = backup_path(connection.home, journal.stamp, path, sudo)
    if sudo:  # the root helper keeps it under paths.SYSTEM_BACKUPS, named as backup_path names it
        command: Shell = Root("backup", journal.stamp, path, *(["first-touch"] if first_touch else []))
    else:
        store = backup.rsplit("/", 1)[0]
        command = Shell("if [ -e {} ]; then mkdir -p {} && cp -a {} {} && echo saved; fi", path, store, path, backup)
        if first_touch:
            command = Shell.compose([firsttouch.record_command(connection, path), command], " && ")
    result = connection.run(command)
    if not result.ok:
        raise SparkpairError(f"cannot back up {path}: {result.stderr.strip()}", node=connection.name)
    journal.entries.append({"path": path, "backup": backup if "saved" in result.stdout else None, "sudo": sudo})
    _save_journal(connection, journal)


def _run_action(connection: Node, journal: Journal, action: Action, first_touch: bool = False) -> None:
    if isinstance(action, WriteFile):
        path = _expand(connection, action.path)
        _backup(connection, journal, path, action.sudo, first_touch)
        connection.put(action.content, path, mode=action.mode, sudo=action.sudo)
    elif isinstance(action, RemoveFile):
        path = _expand(connection, action.path)
        _backup(connection, journal, path, action.sudo, first_touch)
        connection.check(Root("remove", path) if action.sudo else Shell("rm -f {}", path))
    else:
        for created in action.creates:
            _backup(connection, journal, _expand(connection, created), False, first_touch)
        if action.timeout is None:
            connection.check(action.command)
            return
        result = connection.run(action.command, timeout=action.timeout)
        if result.timed_out:
            raise ActionTimedOut(f"`{result.command}` gave no answer within {action.timeout:g} s",
                                 node=connection.name)
        if not result.ok:
            raise RemoteCommandError(connection.name, result.command, result.exit_code, result.stderr or result.stdout)


def run_stamp() -> str:
    """Names one run; applies with the same stamp share (extend) one journal per node."""
    return time.strftime("%Y%m%d-%H%M%S")


def _journal_for(connection: Node, command: str, stamp: str) -> Journal:
    existing = read_journal(connection, command)
    if existing is not None and existing.stamp == stamp:
        existing.finished = False
        return existing
    if existing is None:
        connection.check(Shell("mkdir -p {}", f"{connection.home}/{JOURNAL_DIR}"))
    return Journal(command, stamp)


def apply_changes(pair: Pair, changes: Sequence[Change], command: str, *, stamp: str | None = None,
                  progress: Progress = silent, extra: dict[str, dict[str, str]] | None = None,
                  first_touch: bool = False) -> dict[str, NodeOutcome]:
    """Apply each node's changes in order, both nodes at once; never raises for a node's failure.

    extra: per node, facts to keep in the journal for a later restore (e.g. the state before).
    first_touch: also record each file as it was before sparkpair first changed it (`firsttouch`).

    Ctrl-C lets each node finish its current action, then returns outcomes marked interrupted.
    """
    stamp = stamp or run_stamp()
    cancel = threading.Event()
    outcomes = {name: NodeOutcome(not_started=[c.summary for c in changes if c.node == name]) for name in pair.nodes}

    def apply_on(connection: Node) -> None:
        outcome = outcomes[connection.name]
        mine = [change for change in changes if change.node == connection.name]
        if not mine:
            return
        journal = _journal_for(connection, command, stamp)
        for key, value in (extra or {}).get(connection.name, {}).items():
            journal.extra.setdefault(key, value)
        for change in mine:
            if cancel.is_set():
                return
            progress(Event(connection.name, change.summary))
            try:
                for action in change.actions:
                    _run_action(connection, journal, action, first_touch)
            except SparkpairError as error:
                outcome.failed, outcome.failed_change = error.message, change.summary
                outcome.timed_out = isinstance(error, ActionTimedOut)
                return
            outcome.not_started.remove(change.summary)
            outcome.applied.append(change.summary)
        journal.finished = True
        _save_journal(connection, journal)

    try:
        results = pair.each(apply_on, cancel=cancel)
    except KeyboardInterrupt:
        for outcome in outcomes.values():
            outcome.interrupted = True
        return outcomes
    for name, error in results.failed.items():
        if outcomes[name].failed is None:
            outcomes[name].failed = error.message if isinstance(error, SparkpairError) else f"{type(error).__name__}: {error}"
    return outcomes


def restore(connection: Node, journal: Journal) -> list[str]:
    """Undo a journal on its node, newest first; returns what was done."""
    done = []
    for entry in reversed(journal.entries):
        path, backup, sudo = str(entry["path"]), entry.get("backup"), bool(entry.get("sudo"))
        if backup:
            connection.check(Root("restore-backup", journal.stamp, path) if sudo else Shell("cp -a {} {}", backup, path))
            done.append(f"restored {path}")
        else:
            connection.check(Root("remove", path) if sudo else Shell("rm -f {}", path))
            done.append(f"removed {path}")
    mark_restored(connection, journal.command)
    return done


def mark_restored(connection: Node, command: str) -> None:
    """Set a command's journal aside as undone (`*.json.restored`), so that it is not undone twice."""
    path = journal_path(connection, command)
    connection.check(Shell("if [ -e {} ]; then mv -f {} {}.restored; fi", path, path, path))
