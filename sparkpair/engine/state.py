"""The launch's state on the head (`~/.sparkpair/state/launch.json`): what runs, since when, from what.

One typed record, read by status, logs, stop and bench; its defaults live here and nowhere else.
A file sparkpair cannot read (hand-edited, another version) reads as no state, never as a crash.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from sparkpair import boundedjson, paths, registry
from sparkpair.transport import Node, Shell


@dataclass(frozen=True)
class LaunchState:
    """What the last launch started."""

    profile: str
    nodes: list[str]                       # rank order: the serving node first
    started: float                         # epoch seconds
    command: str                           # the serve command line, as run
    endpoint: str = ""
    revisions: dict[str, str] = field(default_factory=dict)
    transport: str = ""
    image_id: str | None = None
    stopped: float | None = None           # set by `sparkpair stop`
    fabric: dict[str, Any] = field(default_factory=dict)   # each node's NCCL settings; --check-fabric's figures
    runtime: str = registry.DEFAULT        # the engine that runs (sparkpair.registry); older states ran the first

    @property
    def running(self) -> bool:
        """The launch has not been stopped since (the engine may still have died on its own)."""
        return self.stopped is None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, raw: bytes | str) -> LaunchState | None:
        """The state in raw; None when it is not a launch state this version understands."""
        try:
            data = boundedjson.loads(raw)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        known = {f.name for f in fields(cls)}
        try:
            state = cls(**{key: value for key, value in data.items() if key in known})
        except TypeError:  # a required field is missing
            return None
        return state if _well_typed(state) else None


def _well_typed(state: LaunchState) -> bool:
    checks: list[tuple[Any, type | tuple[type, ...]]] = [
        (state.profile, str), (state.nodes, list), (state.started, (int, float)), (state.command, str),
        (state.endpoint, str), (state.revisions, dict), (state.transport, str),
        (state.image_id, (str, type(None))), (state.stopped, (int, float, type(None))), (state.fabric, dict),
        (state.runtime, str)]
    if state.runtime not in registry.NAMES:
        return False
    return all(isinstance(value, kinds) for value, kinds in checks) and all(isinstance(n, str) for n in state.nodes)


def state_path(head: Node) -> str:
    return paths.under_home(paths.LAUNCH_STATE, head.home)


def write_state(head: Node, state: LaunchState) -> None:
    """Write the state on the head (private to the user)."""
    path = state_path(head)
    head.check(Shell("mkdir -p {}", path.rsplit("/", 1)[0]))
    head.put(state.to_json(), path, mode=0o600)


def read_state(head: Node) -> LaunchState | None:
    """The last launch's state, or None when nothing was launched (or the file is unreadable)."""
    raw = head.read(state_path(head))
    return LaunchState.from_json(raw) if raw else None
