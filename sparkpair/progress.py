"""How flows tell the operator what they are doing: `Event`s handed to a `Progress` callback.

Flows (setup-network, launch, bench, ...) never print: they return a result and call
`progress(Event(...))` as they go; `sparkpair.report` renders events on a terminal or as plain
lines. A leaf module: it imports nothing of sparkpair.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Level = Literal["info", "warning", "error", "result"]


@dataclass(frozen=True)
class Event:
    """One thing worth saying, about a node ("" for the pair or the run as a whole).

    level: info (progress, stderr), warning, error, or result (a line of the command's output,
    stdout). key: events with the same non-empty key describe one evolving thing (a node's
    loading stage, a copy): a terminal shows them on one updating line. done/total/unit: how far
    that thing is (bytes, seconds), when it is measurable.
    """

    node: str
    text: str
    level: Level = "info"
    key: str = ""
    done: float | None = None
    total: float | None = None
    unit: str = ""


Progress = Callable[[Event], None]


def silent(event: Event) -> None:
    """A Progress that drops every event (for callers that only want the result)."""


def collect(into: list[Event]) -> Progress:
    """A Progress that appends every event to into (for tests and for flows inside flows)."""
    return into.append
