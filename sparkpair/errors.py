"""The only exceptions the CLI maps to exit codes.

Every error sparkpair expects carries a one-line message that names the field or the node and,
where there is one, the fix. Anything else reaching the CLI is a bug.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping


def last_line(text: str, fallback: str) -> str:
    """The last non-empty line of a command's output (its stderr, usually), or fallback when there is none."""
    lines = text.strip().splitlines()
    return lines[-1] if lines else fallback


class SparkpairError(Exception):
    """A failure the operator can act on (exit code 1)."""

    exit_code = 1

    def __init__(self, message: str, *, node: str | None = None, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.node = node
        self.hint = hint

    def lines(self) -> list[str]:
        """The message as printed: one line, prefixed with the node when there is one."""
        prefix = f"{self.node}: " if self.node else ""
        text = f"{prefix}{self.message}"
        return [f"{text} (fix: {self.hint})" if self.hint else text]


class UsageError(SparkpairError):
    """Bad input on the command line or in a file (exit code 2)."""

    exit_code = 2


class InventoryError(UsageError):
    """The inventory file is missing, unreadable or invalid; one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems[0] if problems else "invalid inventory")
        self.problems = problems

    def lines(self) -> list[str]:
        return list(self.problems)


class RenderError(SparkpairError):
    """A generated file failed its own validation (template bug or bad override)."""

    exit_code = 2


class ConnectError(SparkpairError):
    """A node could not be reached over SSH (or its Docker engine over SSH)."""


class NodesUnreachable(ConnectError):
    """Nodes that could not be reached: one line per node (the node named first), and for a command that
    changes nodes a last line that nothing was changed."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines[0] if lines else "no node could be reached")
        self._lines = list(lines)

    def lines(self) -> list[str]:
        return list(self._lines)


class ConnectionLost(ConnectError):
    """An open SSH connection ended under a command (the node's sshd closed it, or the network went)."""


class RemoteCommandError(SparkpairError):
    """A command on a node exited non-zero where success was required."""

    def __init__(self, node: str, command: str, exit_code: int, stderr: str) -> None:
        super().__init__(f"`{command}` failed: {last_line(stderr, f'exit {exit_code}')}", node=node)
        self.command = command
        self.stderr = stderr


class Interrupted(SparkpairError):
    """Ctrl-C: the command stopped where it was safe to; the message says what each node holds (exit 130)."""

    exit_code = 130


class PairError(SparkpairError):
    """An action failed on several nodes: every node's exception kept (`errors`, node -> exception), one
    line per node. Built by `PairError.of`, as the most specific class every node's error shares, so a
    caller that catches ConnectError (or Interrupted) still catches two unreachable nodes, with that
    class's exit code."""

    def __init__(self, errors: Mapping[str, SparkpairError]) -> None:
        self.errors: dict[str, SparkpairError] = dict(errors)
        self._lines = [_node_line(name, error) for name, error in errors.items()]
        SparkpairError.__init__(self, "; ".join(self._lines))  # not the shared class's own __init__

    def lines(self) -> list[str]:
        """One line per failed node, each starting with the node's name."""
        return list(self._lines)

    @staticmethod
    def of(errors: Mapping[str, BaseException]) -> BaseException:
        """The one exception to raise for errors (node -> exception, at least one): a lone node's own
        exception unchanged; a bug (not a SparkpairError) as itself; else a PairError of the errors'
        most specific shared class."""
        failures = list(errors.values())
        bug = next((error for error in failures if not isinstance(error, SparkpairError)), None)
        if len(failures) == 1 or bug is not None:
            return bug or failures[0]
        shared = next(kind for kind in type(failures[0]).__mro__
                      if all(isinstance(error, kind) for error in failures))
        return _pair_error_class(shared)({name: error for name, error in errors.items()
                                          if isinstance(error, SparkpairError)})


def _node_line(name: str, error: SparkpairError) -> str:
    """error's lines as one line starting with `name: ` (the node named once)."""
    return f"{name}: " + " ".join(error.lines()).removeprefix(f"{name}: ")


@functools.cache
def _pair_error_class(shared: type) -> type[PairError]:
    """PairError, also an instance of shared (a SparkpairError subclass) when it is more specific."""
    if issubclass(shared, PairError):
        return shared
    if shared is SparkpairError or not issubclass(shared, SparkpairError):
        return PairError
    return type(f"Pair{shared.__name__}", (PairError, shared), {"__doc__": PairError.__doc__})
