"""`reset`: take back, on every node, what the project driving the pair left there, as its spec says.

The testbed knows nothing of that project (file names, container names, key comments): the
project says what to take back, as data, a JSON object given to `reset --spec FILE` or
`--spec-json TEXT` (the pytest plugin's `testbed_reset_spec` fixture, which the project's tests
override). Every field is optional (an empty spec resets nothing); an unknown field is refused.

    containers               containers to remove (docker rm -f)
    paths                    files or directories to delete (rm -rf): absolute, or under the
                             login user's home when they start with `~/`
    authorized_key_comments  fnmatch patterns: the lines of the login user's
                             ~/.ssh/authorized_keys whose key comment matches one are dropped
    interfaces               links put back as `up` made them: no addresses, down, MTU 1500

The same spec applies to every node; it runs there as root.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from pathlib import Path
from shlex import quote

from .hostexec import node_sh
from .layout import USER_HOME

FRESH_MTU = 1500  # a twin's MTU after `up` (the veth default)
CONTAINER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
INTERFACE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,15}")

# Run inside the node with the system python: drop authorized_keys lines by key comment.
DROP_KEYS_SCRIPT = """
import fnmatch, os, sys
path, patterns = sys.argv[1], sys.argv[2:]
def comment(line):
    fields = line.split()
    for index, field in enumerate(fields):
        if field.startswith(("ssh-", "ecdsa-", "sk-")):
            return " ".join(fields[index + 2:])
    return ""
if os.path.exists(path):
    with open(path) as handle:
        lines = handle.readlines()
    kept = [line for line in lines if not any(fnmatch.fnmatchcase(comment(line), p) for p in patterns)]
    if kept != lines:
        with open(path, "w") as handle:
            handle.writelines(kept)
"""


class SpecError(ValueError):
    """A reset spec that cannot be used; the message says which field and why."""


@dataclass(frozen=True)
class ResetSpec:
    """What `reset` takes back on each node (see the module docstring)."""

    containers: tuple = ()
    paths: tuple = ()
    authorized_key_comments: tuple = ()
    interfaces: tuple = ()

    def summary(self) -> str:
        """One line: how much the spec takes back."""
        counts = [f"{f.name.replace('_', ' ')} ({len(getattr(self, f.name))})" for f in fields(self)
                  if getattr(self, f.name)]
        return ", ".join(counts) if counts else "nothing (empty spec)"


def node_path(path: str) -> str:
    """PATH as the node sees it (`~/` is the login user's home); refuses what rm -rf must never get."""
    if not isinstance(path, str) or not path.startswith(("/", "~/")):
        raise SpecError(f"paths: {path!r} is neither absolute nor under ~/")
    parts = path.removeprefix("~/").strip("/").split("/")
    if parts == [""] or any(part in ("", ".", "..") or "\n" in part for part in parts):
        raise SpecError(f"paths: {path!r} is not a plain path below / or ~/")
    return str(USER_HOME / path[2:]) if path.startswith("~/") else path


def names(data: dict, key: str, pattern: re.Pattern | None = None) -> tuple:
    """The list of strings under KEY (each matching PATTERN when given)."""
    values = data.get(key, [])
    if not isinstance(values, list) or not all(isinstance(value, str) and value for value in values):
        raise SpecError(f"{key}: expected a list of non-empty strings, got {values!r}")
    for value in values:
        if "\n" in value or (pattern and not pattern.fullmatch(value)):
            raise SpecError(f"{key}: {value!r} is not a valid name")
    return tuple(values)


def parse_spec(data) -> ResetSpec:
    """A ResetSpec from the decoded JSON object DATA; SpecError when it is not one."""
    if not isinstance(data, dict):
        raise SpecError(f"a reset spec is a JSON object, got {type(data).__name__}")
    known = {f.name for f in fields(ResetSpec)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise SpecError(f"unknown field(s) {', '.join(unknown)}; fields: {', '.join(sorted(known))}")
    paths = names(data, "paths")
    for path in paths:
        node_path(path)
    return ResetSpec(containers=names(data, "containers", CONTAINER_NAME), paths=paths,
                     authorized_key_comments=names(data, "authorized_key_comments"),
                     interfaces=names(data, "interfaces", INTERFACE_NAME))


def load_spec(path: str | None = None, text: str | None = None) -> ResetSpec:
    """The spec in the JSON file PATH, or in TEXT."""
    try:
        data = json.loads(Path(path).read_text() if path is not None else text)
    except OSError as exc:
        raise SpecError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"not JSON: {exc}") from None
    return parse_spec(data)


def node_script(spec: ResetSpec) -> str:
    """The shell script that applies SPEC inside a node, as root."""
    lines = ["set -e"]
    if spec.containers:
        # Absent containers, or an engine that is down, leave nothing to remove.
        lines.append(f"docker rm -f {' '.join(map(quote, spec.containers))} >/dev/null 2>&1 || true")
    if spec.paths:
        lines.append(f"rm -rf -- {' '.join(quote(node_path(path)) for path in spec.paths)}")
    if spec.authorized_key_comments:
        authorized = USER_HOME / ".ssh" / "authorized_keys"
        lines.append(f"/usr/bin/python3 -c {quote(DROP_KEYS_SCRIPT)} {quote(str(authorized))} "
                     + " ".join(map(quote, spec.authorized_key_comments)))
    for name in spec.interfaces:
        lines.append(f"ip addr flush dev {quote(name)}")
        lines.append(f"ip link set dev {quote(name)} down mtu {FRESH_MTU}")
    return "\n".join(lines) + "\n"


def reset(spec: ResetSpec, nodes) -> None:
    """Apply SPEC on each of NODES."""
    script = node_script(spec)
    for node in nodes:
        node_sh(node, script)
