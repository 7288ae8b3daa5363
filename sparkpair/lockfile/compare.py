"""What differs: a lock against what runs now (`compare`), or the nodes against each other (`side_by_side`:
one value per node, head first, for a pair or for every node of a ring or a switch).

Both flatten a `NodeLock` into fields (`image_id`, `mtu enp1s0f1np1`, `model REPO file PATH`, ...; `fields`)
so that every difference from a lock is one line: node, field, locked value, found value, and its fix; and
every field of the side by side is one row: its value on each node, and whether they all agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sparkpair.lockfile.record import Lock, NodeLock

ABSENT = "absent"          # the field is not there (no such interface, file, repo or model file)
UNREADABLE = "unreadable"  # the node could not tell (a probe failed)
PAIR = ""                  # the node of a pair-wide field (sparkpair's version, the inventory, the profile)
ACCEPT = "or launch without --locked to accept it (a new lock is written)"
FIXES = (  # field prefix -> how to get the locked value back
    ("sparkpair", "run the sparkpair version the lock names"),
    ("inventory_sha256", "put the inventory back as it was when the lock was written"),
    ("profile", "launch the profile the lock names"),
    ("runtime", "launch with the runtime the lock names (--runtime)"),
    ("image_id", "put the locked image back under the image's name on {node} (docker image ls --digests; "
                 "docker tag IMAGE-ID NAME, or docker pull NAME@DIGEST)"),
    ("image_digests", "pull the locked digest on {node} (docker pull NAME@DIGEST)"),
    ("image", "set container.image back to the locked image"),
    ("runtime_version", "put the locked image back on {node}: the engine's version comes with it"),
    ("driver", "install the locked NVIDIA driver on {node} (apt list --installed 'nvidia-driver*')"),
    ("cuda", "install the locked NVIDIA driver on {node}: the CUDA version comes with it"),
    ("kernel", "boot {node} into the locked kernel (grub's Advanced options)"),
    ("firmware", "flash the locked ConnectX-7 firmware on {node} (mlxfwmanager)"),
    ("mtu", "sparkpair setup-network puts the twins' MTU back on {node}"),
    ("netplan", "sparkpair setup-network --dry-run shows what changed in {node}'s netplan"),
    ("environment", "the inventory's container.env or {node}'s RoCE devices changed: sparkpair render, doctor"),
    ("rendered", "the inventory or profile changed: sparkpair render shows the files"),
    ("model", "sparkpair doctor names a corrupt file (launch without --locked fetches it again); "
              "a moved revision comes back with the locked one in the cache"),
)


@dataclass(frozen=True)
class Difference:
    """One thing that is not as the lock (or the other node) says: where, what, both values and the fix."""

    node: str
    field: str
    locked: str
    found: str
    fix: str

    def as_dict(self) -> dict[str, str]:
        return {"node": self.node or "pair", "field": self.field, "locked": self.locked, "found": self.found,
                "fix": self.fix}


@dataclass(frozen=True)
class Row:
    """One field of `sparkpair diff`: its value on each node (in the order the nodes were named), and whether
    they all agree."""

    field: str
    values: tuple[str, ...]

    @property
    def same(self) -> bool:
        return len(set(self.values)) <= 1


def fields(node: NodeLock) -> dict[str, str]:
    """node's facts as field -> value, in a stable order (UNREADABLE where the node could not tell)."""
    flat = {"image_id": _value(node.image_id), "image_digests": " ".join(node.image_digests) or ABSENT,
            "runtime_version": _value(node.runtime_version), "driver": _value(node.driver),
            "cuda": _value(node.cuda), "kernel": _value(node.kernel)}
    for kind in ("firmware", "mtu", "netplan", "environment", "rendered"):
        flat |= {f"{kind} {key}": value for key, value in sorted(getattr(node, kind).items())}
    for repo, model in sorted(node.models.items()):
        flat[f"model {repo} revision"] = _value(model.revision) if model.revision or model.files else ABSENT
        flat |= {f"model {repo} file {path}": value for path, value in sorted(model.files.items())}
    return flat


def _value(value: str | None) -> str:
    return UNREADABLE if value is None else value


def fix_of(field: str, node: str) -> str:
    """How to get field's locked value back on node, and the way to accept the change instead."""
    fix = next((text for prefix, text in FIXES if field == prefix or field.startswith(prefix + " ")),
               "put the locked value back")
    return f"{fix.format(node=node or 'the pair')}, {ACCEPT}"


def compare(locked: Lock, found: Lock) -> list[Difference]:
    """Every field whose value now is not the locked one (a field only one side has counts, as ABSENT):
    the pair's fields first, then each node's in the lock's order, each node's fields in `fields` order."""
    differences = [Difference(PAIR, name, mine, theirs, fix_of(name, PAIR))
                   for name, mine, theirs in _pair_fields(locked, found) if mine != theirs]
    for node in [*locked.nodes, *(name for name in found.nodes if name not in locked.nodes)]:
        mine, theirs = locked.nodes.get(node), found.nodes.get(node)
        if mine is None or theirs is None:
            differences.append(Difference(node, "node", "locked" if mine else ABSENT, "found" if theirs else ABSENT,
                                          f"the pair's nodes changed since the lock, {ACCEPT}"))
            continue
        differences += _node_differences(node, fields(mine), fields(theirs))
    return differences


def _pair_fields(locked: Lock, found: Lock) -> list[tuple[str, str, str]]:
    return [(name, getattr(locked, name), getattr(found, name))
            for name in ("sparkpair", "inventory_sha256", "profile", "runtime", "image")]


def _node_differences(node: str, locked: dict[str, str], found: dict[str, str]) -> list[Difference]:
    names = [*locked, *(name for name in found if name not in locked)]
    return [Difference(node, name, locked.get(name, ABSENT), found.get(name, ABSENT), fix_of(name, node))
            for name in names if locked.get(name, ABSENT) != found.get(name, ABSENT)]


def side_by_side(found: Lock, *nodes: str) -> list[Row]:
    """The named nodes' fields side by side (two nodes or more, one value each in the order named; ABSENT where a
    node lacks the field): the fields whose values differ on any node first, then those all agree on (each group
    in `fields` order, the first node's fields before those only a later node has)."""
    flat = [fields(found.nodes[node]) for node in nodes]
    names = list(dict.fromkeys(name for node in flat for name in node))
    rows = [Row(name, tuple(node.get(name, ABSENT) for node in flat)) for name in names]
    return [row for row in rows if not row.same] + [row for row in rows if row.same]


def rows_json(rows: list[Row], names: Sequence[str]) -> dict[str, object]:
    """`sparkpair diff --json`: the nodes (head first), how many fields differ, and every field with each node's
    value (`values`: node -> value; the same shape for two nodes or more)."""
    return {"nodes": list(names), "differing": sum(not row.same for row in rows),
            "fields": [{"field": row.field, "same": row.same, "values": dict(zip(names, row.values, strict=True))}
                       for row in rows]}


def differences_json(differences: list[Difference], lock: str) -> dict[str, object]:
    """`sparkpair diff --lock PATH --json`: the lock compared with, and every difference."""
    return {"lock": lock, "differing": len(differences), "differences": [item.as_dict() for item in differences]}
