"""The lock as typed data and its stable JSON: sorted keys, two-space indent, one value per line.

Every value a node reported is a string (None: the node could not tell, `unreadable`); every field is
described in docs/lock.md. `Lock.from_json` treats the file as hostile: a size cap, the exact schema, and
no control character in any name or value; the first problem is one line naming the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sparkpair import boundedjson
from sparkpair.errors import UsageError

FORMAT = 1
LOCK_CAP = 16 << 20  # bytes of a lock file read at most
TEXT_CAP = 4096      # characters of one name or value
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
T = TypeVar("T")


@dataclass(frozen=True)
class ModelLock:
    """One model repo on one node: the revision its cache's refs/main names, and per snapshot file the hash of
    its content (the blob name, once verified; otherwise what was found instead)."""

    revision: str | None
    files: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeLock:
    """What one node ran: see docs/lock.md for each field."""

    image_id: str | None = None
    image_digests: tuple[str, ...] = ()
    runtime_version: str | None = None
    driver: str | None = None
    cuda: str | None = None
    kernel: str | None = None
    firmware: dict[str, str] = field(default_factory=dict)      # RDMA device -> fw_ver
    mtu: dict[str, str] = field(default_factory=dict)           # QSFP twin -> its MTU (`absent`: no such interface)
    netplan: dict[str, str] = field(default_factory=dict)       # /etc/netplan file -> sha256 of its content
    environment: dict[str, str] = field(default_factory=dict)   # NCCL_/UCX_/OMPI_... the engine container gets
    rendered: dict[str, str] = field(default_factory=dict)      # file in ~/.sparkpair/config -> sha256
    models: dict[str, ModelLock] = field(default_factory=dict)  # repo id -> its revision and file hashes


@dataclass(frozen=True)
class Lock:
    """A launch's lock: the pair's fields and each node's."""

    sparkpair: str
    inventory_sha256: str
    profile: str
    runtime: str
    image: str
    nodes: dict[str, NodeLock]
    written: str = ""  # UTC time of writing (informational, never compared)

    def to_json(self) -> str:
        """The lock as stable JSON (sorted keys, a final newline): the same lock gives the same bytes."""
        return json.dumps(_plain(self), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, raw: bytes, source: str = "the lock") -> Lock:
        """The lock raw holds; UsageError (one line naming source and the field) for anything else."""
        if len(raw) > LOCK_CAP:
            raise _bad(source, "", f"over {LOCK_CAP >> 20} MiB")
        try:
            data = boundedjson.loads(raw, cap=LOCK_CAP)
        except boundedjson.Refused as error:
            raise _bad(source, "", str(error)) from None
        reader = _Reader(source)
        top = reader.mapping(data, "", {"format", "sparkpair", "inventory_sha256", "profile", "runtime", "image",
                                        "nodes", "written"})
        if top.get("format") != FORMAT:
            raise _bad(source, "format", f"expected {FORMAT} (a lock this sparkpair writes)")
        nodes = reader.mapping(top.get("nodes"), "nodes")
        return cls(sparkpair=reader.text(top.get("sparkpair"), "sparkpair"),
                   inventory_sha256=reader.text(top.get("inventory_sha256"), "inventory_sha256"),
                   profile=reader.text(top.get("profile"), "profile"), runtime=reader.text(top.get("runtime"), "runtime"),
                   image=reader.text(top.get("image"), "image"),
                   nodes={reader.name(name, "nodes"): reader.node(value, f"nodes.{name}") for name, value in nodes.items()},
                   written=reader.text(top.get("written", ""), "written"))


def _plain(lock: Lock) -> dict[str, Any]:
    def node(item: NodeLock) -> dict[str, Any]:
        return {"image_id": item.image_id, "image_digests": list(item.image_digests),
                "runtime_version": item.runtime_version, "driver": item.driver, "cuda": item.cuda,
                "kernel": item.kernel, "firmware": item.firmware, "mtu": item.mtu, "netplan": item.netplan,
                "environment": item.environment, "rendered": item.rendered,
                "models": {repo: {"revision": model.revision, "files": model.files}
                           for repo, model in item.models.items()}}

    return {"format": FORMAT, "sparkpair": lock.sparkpair, "written": lock.written,
            "inventory_sha256": lock.inventory_sha256, "profile": lock.profile, "runtime": lock.runtime,
            "image": lock.image, "nodes": {name: node(item) for name, item in lock.nodes.items()}}


def _bad(source: str, where: str, problem: str) -> UsageError:
    return UsageError(f"{source}: {where or 'the file'}: {problem}",
                      hint="write a new lock with sparkpair launch (without --locked), or point --lock at another")


NODE_FIELDS = ("image_id", "image_digests", "runtime_version", "driver", "cuda", "kernel", "firmware", "mtu",
               "netplan", "environment", "rendered", "models")


class _Reader:
    """Typed reads of the decoded JSON, each failure a UsageError naming the field's dotted path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, problem: str) -> UsageError:
        return _bad(self.source, where, problem)

    def mapping(self, value: object, where: str, allowed: set[str] | None = None) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, "expected an object")
        unknown = sorted(key for key in value if allowed is not None and key not in allowed)
        if unknown:
            raise self.fail(where, f"unknown field {self.name(unknown[0], where)!r}")
        return value

    def name(self, value: str, where: str) -> str:
        if not value or len(value) > TEXT_CAP or UNSAFE.search(value):
            raise self.fail(where, "a name that is empty, too long or holds a control character")
        return value

    def text(self, value: object, where: str) -> str:
        if not isinstance(value, str):
            raise self.fail(where, "expected a string")
        if len(value) > TEXT_CAP or UNSAFE.search(value):
            raise self.fail(where, "too long, or holds a control character")
        return value

    def optional(self, value: object, where: str) -> str | None:
        return None if value is None else self.text(value, where)

    def strings(self, value: object, where: str) -> dict[str, str]:
        return self.each(value, where, self.text)

    def each(self, value: object, where: str, read: Callable[[object, str], T]) -> dict[str, T]:
        return {self.name(key, where): read(item, f"{where}.{key}")
                for key, item in self.mapping(value, where).items()}

    def node(self, value: object, where: str) -> NodeLock:
        data = self.mapping(value, where, set(NODE_FIELDS))
        digests = data.get("image_digests", [])
        if not isinstance(digests, list):
            raise self.fail(f"{where}.image_digests", "expected a list of strings")
        return NodeLock(
            image_id=self.optional(data.get("image_id"), f"{where}.image_id"),
            image_digests=tuple(self.text(item, f"{where}.image_digests") for item in digests),
            runtime_version=self.optional(data.get("runtime_version"), f"{where}.runtime_version"),
            driver=self.optional(data.get("driver"), f"{where}.driver"),
            cuda=self.optional(data.get("cuda"), f"{where}.cuda"),
            kernel=self.optional(data.get("kernel"), f"{where}.kernel"),
            **{key: self.strings(data.get(key, {}), f"{where}.{key}")
               for key in ("firmware", "mtu", "netplan", "environment", "rendered")},
            models=self.each(data.get("models", {}), f"{where}.models", self.model))

    def model(self, value: object, where: str) -> ModelLock:
        data: Mapping[str, Any] = self.mapping(value, where, {"revision", "files"})
        return ModelLock(self.optional(data.get("revision"), f"{where}.revision"),
                         self.strings(data.get("files", {}), f"{where}.files"))
