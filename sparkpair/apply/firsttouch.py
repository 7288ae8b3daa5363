"""The first-touch snapshot: each file as it was before sparkpair first changed it, kept however
many applies follow (what `setup-network --restore` goes back to).

`apply_changes(..., first_touch=True)` records a path the first time it changes it: a copy
(`cp -a`: content, mode and owner, byte for byte) or, for a path that did not exist, an
`.absent` marker; a path already recorded is left alone. User files are recorded under
`~/.sparkpair/first-touch`, system files (sudo) under `/var/backups/sparkpair/first-touch` (root,
0700: the root helper keeps them, named alike); a record's name is its path, percent-encoded. The
flow adds what files cannot say (the QSFP twins' state then, `twins.json`). `records` lists a node's records, `put_back` returns one
path to its recorded state, `clear` drops the snapshot once it has been restored.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote

from sparkpair import paths
from sparkpair.errors import SparkpairError
from sparkpair.transport import Node, Root, Shell

ABSENT = ".absent"
TWINS = "twins.json"


def store(connection: Node, sudo: bool) -> str:
    """Where a node's records of user (sudo False) or system files live."""
    return paths.SYSTEM_FIRST_TOUCH if sudo else paths.under_home(paths.USER_FIRST_TOUCH, connection.home)


def clean_absolute(path: str) -> bool:
    """Whether path is absolute, without `.`, `..` or empty parts and without control characters."""
    return (path.startswith("/") and len(path) <= 4096 and all(part not in ("", ".", "..") for part in path.split("/")[1:])
            and not any(ord(char) < 32 or ord(char) == 127 for char in path))


def record_name(path: str) -> str:
    return quote(path, safe="")


def record_command(connection: Node, path: str) -> Shell:
    """Record a user file (absolute path) unless it is recorded already; atomic (a copy is renamed into place).
    A system file is recorded by the root helper's `backup STAMP PATH first-touch`, the same way."""
    base = f"{store(connection, False)}/{record_name(path)}"
    return Shell("if [ ! -e {} ] && [ ! -e {} ]; then mkdir -p -m 700 {} && if [ -e {} ] || [ -L {} ]; then "
                 "cp -a {} {} && mv -f {} {}; else : > {}; fi; fi",
                 base, base + ABSENT, store(connection, False), path, path, path, base + ".new", base + ".new", base,
                 base + ABSENT)


@dataclass(frozen=True)
class Record:
    """One recorded path: where it is, whether it existed, and whether it is a system file."""

    path: str
    existed: bool
    sudo: bool

    def copy(self, connection: Node) -> str:
        return f"{store(connection, self.sudo)}/{record_name(self.path)}"


def records(connection: Node) -> list[Record]:
    """Every path recorded on a node (user files first); empty when sparkpair never changed one."""
    found = []
    for sudo in (False, True):
        listing = connection.run(Root("first-touch-list") if sudo else
                                 Shell("ls -A {} 2>/dev/null || true", store(connection, sudo))).stdout
        for name in sorted(listing.split()):
            if name.endswith(".new") or name == TWINS:
                continue
            existed = not name.endswith(ABSENT)
            path = unquote(name.removesuffix(ABSENT))
            if path.startswith("/") and not clean_absolute(path):
                record = f"{store(connection, sudo)}/{name}"
                raise SparkpairError(f"the first-touch record {record} does not name a clean absolute path",
                                     node=connection.name, hint=f"remove it ({'sudo ' if sudo else ''}rm {record}) "
                                     "and run again")
            if path.startswith("/"):
                found.append(Record(path, existed, sudo))
    return found


def twins_path(connection: Node) -> str:
    """Where the QSFP twins' state before sparkpair first changed them is kept."""
    return f"{store(connection, False)}/{TWINS}"


def twins(connection: Node) -> str | None:
    """The QSFP twins' state recorded before sparkpair first changed them (JSON text, unchecked), or None;
    a SparkpairError naming the file when it is not UTF-8."""
    raw = connection.read(twins_path(connection))
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise unreadable_twins(connection, "it is not UTF-8 text") from None


def unreadable_twins(connection: Node, problem: str) -> SparkpairError:
    """The one-line error for a twins record that cannot be used: the node, the file, what is wrong, the fix."""
    path = twins_path(connection)
    return SparkpairError(f"the record of the twins before sparkpair first changed them, {path}, cannot be read "
                          f"({problem})", node=connection.name,
                          hint=f"set it aside with mv {path} {path}.unreadable and run again: the files are put back, "
                               "the twins stay as they are")


def record_twins(connection: Node, snapshot: str) -> None:
    """Keep snapshot as the twins' first-touch state, unless one is kept already."""
    target = twins_path(connection)
    connection.check(Shell("[ -e {} ] || { mkdir -p -m 700 {} && printf '%s' {} > {} && mv -f {} {}; }",
                           target, store(connection, False), snapshot, target + ".new", target + ".new", target))


def put_back(connection: Node, record: Record) -> str | None:
    """Return record's path to its recorded state; what was done, or None when it already was so."""
    path, copy = record.path, record.copy(connection)
    if record.sudo:  # the root helper reads the record itself (same, or done)
        out = connection.check(Root("first-touch-put-back", path))
        if record.existed:
            return None if out.strip() == "same" else f"restored {path}"
        return f"removed {path}" if out.strip() == "done" else None
    if record.existed:
        staged = f"{path}.sparkpair-restore"
        out = connection.check(Shell('if cmp -s {} {} && [ "$(stat -c %a.%u.%g {})" = "$(stat -c %a.%u.%g {})" ]; '
                                     "then echo same; else cp -a {} {} && mv -f {} {} && echo done; fi",
                                     copy, path, copy, path, copy, staged, staged, path))
        return None if out.strip() == "same" else f"restored {path}"
    out = connection.check(Shell("if [ -e {} ] || [ -L {} ]; then rm -f {} && echo done; fi", path, path, path))
    return f"removed {path}" if out.strip() == "done" else None


def clear(connection: Node) -> None:
    """Drop a node's snapshot (after a restore: the next apply takes a new one)."""
    connection.check(Shell("rm -rf {}", store(connection, False)))
    connection.check(Root("first-touch-clear"))
