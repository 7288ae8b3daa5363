"""`Node`: what sparkpair asks of one node's connection, as a protocol.

`ssh.NodeConnection` is the real one (checked below by mypy); tests give `Pair.of` scripted nodes
that satisfy it (tests/fakenode.py), so every flow above transport runs without a pair.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from sparkpair.transport import httpio
from sparkpair.transport.shell import Command

if TYPE_CHECKING:
    import paramiko

    from sparkpair.transport.ssh import CommandResult, SshTarget


class Node(Protocol):
    """One node as every flow uses it: commands (never raising on an exit code but in `check`), files,
    HTTP to its loopback, and the connection's life."""

    @property
    def name(self) -> str:
        """The node's name in the inventory."""

    @property
    def target(self) -> SshTarget:
        """Where the node is and how to log in."""

    @property
    def home(self) -> str:
        """The login user's home directory on the node."""

    def run(self, command: Command, *, sudo: bool = False, timeout: float | None = None,
            stdin: str | None = None) -> CommandResult:
        """The command's outcome; a non-zero exit (or a timeout: `timed_out`) is a result, not an exception."""

    def check(self, command: Command, *, sudo: bool = False, timeout: float | None = None) -> str:
        """The stdout of a command that must succeed; RemoteCommandError when it does not."""

    def stream(self, command: Command, on_line: Callable[[str], None], *, timeout: float | None = None) -> int:
        """Each line of the command's output handed to on_line as it comes; its exit code."""

    def put(self, content: str | bytes, path: str, *, mode: int = 0o644, sudo: bool = False) -> None:
        """path holds content, written atomically."""

    def read(self, path: str, cap: int = ..., timeout: float = ...) -> bytes | None:
        """A user-readable file's content, or None when it does not exist; at most cap bytes within timeout
        seconds (RemoteCommandError beyond either)."""

    def http(self, port: int, method: str, path: str, body: bytes | None = None, timeout: float = 10.0,
             cap: int = httpio.ANSWER_CAP) -> httpio.Reply | None:
        """An HTTP exchange with 127.0.0.1:port on the node; None when nothing listens there."""

    def trace(self, text: str) -> None:
        """Show a command line at -vv."""

    def server_key(self) -> tuple[str, str]:
        """(type, base64) of the host key the connection verified."""

    def client(self) -> paramiko.SSHClient:
        """The open, verified paramiko client (`session` opens its own channels on it)."""

    def connect(self, timeout: float | None = None) -> None:
        """Open the connection now; ConnectError when the node cannot be reached."""

    def connect_soon(self) -> None:
        """Start opening the connection in the background."""

    def close(self) -> None:
        """Close the connection (a later use opens it again)."""


if TYPE_CHECKING:
    from sparkpair.transport.ssh import NodeConnection

    def _the_real_node_is_a_node(connection: NodeConnection) -> Node:
        """mypy's proof that NodeConnection satisfies Node (never called)."""
        return connection
