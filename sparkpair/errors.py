"""The only exceptions the CLI maps to exit codes.

Every error sparkpair expects carries a one-line message that names the field or the node and,
where there is one, the fix. Anything else reaching the CLI is a bug.
"""

from __future__ import annotations


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
