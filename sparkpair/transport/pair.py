"""Both nodes at once: `Pair.each` runs an action on every node in parallel and returns a `PairResult`."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sparkpair.errors import NodesUnreachable, PairError, SparkpairError
from sparkpair.transport.node import Node
from sparkpair.transport.ssh import NodeConnection, SshTarget

T = TypeVar("T")


@dataclass(frozen=True)
class PairResult(Generic[T]):
    """What an action did on each node: its value, or the exception it raised; node order kept.

    >>> result = pair.each(lambda connection: connection.check(["hostname"]))
    >>> result.ok, result.failed, result.values
    """

    values: Mapping[str, T] = field(default_factory=dict)
    errors: Mapping[str, BaseException] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the action succeeded on every node."""
        return not self.errors

    @property
    def failed(self) -> Mapping[str, BaseException]:
        """Node name -> the exception its action raised."""
        return self.errors

    def __getitem__(self, name: str) -> T:
        """The node's value; its exception is raised when the action failed there."""
        if name in self.errors:
            raise self.errors[name]
        return self.values[name]

    def __iter__(self) -> Iterator[str]:
        return iter([*self.values, *self.errors])

    def raise_failures(self) -> PairResult[T]:
        """self when the action succeeded on every node (for chaining); else raise one exception that
        carries every node's failure (`PairError.of`: a lone node's own, or a PairError naming each)."""
        if self.errors:
            raise PairError.of(self.errors)
        return self

    def error_lines(self, doing: str = "") -> list[str]:
        """One line per failed node: `node: [doing failed: ]message` (the node named once)."""
        lines = []
        for name, error in self.errors.items():
            text = " ".join(error.lines()) if isinstance(error, SparkpairError) else f"{type(error).__name__}: {error}"
            text = text.removeprefix(f"{name}: ")
            lines.append(f"{name}: {doing} failed: {text}" if doing else f"{name}: {text}")
        return lines


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """SIGINT held back in this thread for the block; a Ctrl-C meanwhile is raised when it ends.
    (The worker threads started inside inherit the block, so the signal always reaches this thread.)"""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


class Pair:
    """Both nodes' connections, the head first; `each` runs a function on every node in parallel."""

    def __init__(self, targets: Sequence[SshTarget], **options: Any) -> None:
        self.nodes: Mapping[str, Node] = {target.name: NodeConnection(target, **options) for target in targets}
        self._order = [target.name for target in targets]

    @classmethod
    def of(cls, nodes: Sequence[Node]) -> Pair:
        """A pair of the given nodes, the head first (tests give scripted nodes: tests/fakenode.py)."""
        pair = cls([])
        pair.nodes = {node.name: node for node in nodes}
        pair._order = [node.name for node in nodes]
        return pair

    @property
    def head(self) -> Node:
        return self.nodes[self._order[0]]

    @property
    def worker(self) -> Node:
        return self.nodes[self._order[1]]

    def each(self, action: Callable[[Node], T], names: Sequence[str] | None = None,
             cancel: threading.Event | None = None) -> PairResult[T]:
        """action on every named node at once; each node's value or exception, in node order.

        On Ctrl-C the cancel event is set and the nodes' current work is awaited before the
        interrupt propagates, so no node is left in the middle of an action.
        """
        chosen = [self.nodes[name] for name in (names or self._order)]
        pool = ThreadPoolExecutor(max_workers=len(chosen))
        futures = {}
        try:
            with _sigint_deferred():  # Ctrl-C while the threads start must not leave a node without its action
                futures = {connection.name: pool.submit(action, connection) for connection in chosen}
            wait(futures.values())
        except KeyboardInterrupt:
            if cancel is not None:
                cancel.set()
            wait(futures.values())
            raise
        finally:
            pool.shutdown(wait=False)
        values: dict[str, T] = {}
        errors: dict[str, BaseException] = {}
        for name, future in futures.items():
            error = future.exception()
            if error is None:
                values[name] = future.result()
            else:
                errors[name] = error
        return PairResult(values, errors)

    def connect_soon(self) -> None:
        """Start opening every connection in the background (NodeConnection.connect_soon). The threads, and
        paramiko's that they start, inherit SIGINT blocked: a Ctrl-C always reaches the calling thread."""
        with _sigint_deferred():
            for connection in self.nodes.values():
                connection.connect_soon()

    def connect(self, *, changing: bool = False) -> None:
        """Open every connection; if any node is unreachable, one error with a line per such node (a command that
        changes nodes adds that nothing was changed; a read-only one changes nothing anyway)."""
        result = self.each(lambda connection: connection.connect())
        if not result.ok:
            raise NodesUnreachable(result.error_lines() + (["nothing was changed on any node"] if changing else []))

    def close(self) -> None:
        for connection in self.nodes.values():
            connection.close()

    def __enter__(self) -> Pair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
