"""`Node`: what sparkpair asks of one node's connection, as a protocol.

`ssh.NodeConnection` is the real one (checked below by mypy); tests give `Pair.of` scripted nodes
that satisfy it (tests/fakenode.py), so every flow above transport runs without a pair.

Every read from a node has a deadline and a byte cap: a command's output (`run`, `check`) at most `cap` bytes
(OUTPUT_CAP unless its caller gives another) within `timeout` seconds (COMMAND_TIMEOUT_S); a stream's lines
each capped (transport.lines.MAX_LINE) within its own deadline; a file (`read`) and an HTTP answer (`http`) the
same. `require_limits` refuses a call without them (None, or not above zero): the real node and the unit tests'
scripted node both ask it, and the types here admit no None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from sparkpair.transport import httpio
from sparkpair.transport.shell import Command

if TYPE_CHECKING:
    import paramiko

    from sparkpair.transport.ssh import CommandResult, SshTarget

COMMAND_TIMEOUT_S = 600.0       # a command's deadline unless its caller gives one (netplan apply, docker run fit)
OUTPUT_CAP = 16 << 20           # the most a command's stdout and stderr hold together unless its caller says
STREAM_TIMEOUT_S = 24 * 3600.0  # a stream (a download, a verification, logs --follow): lines handed on as they come
NO_EXIT_STATUS = -1  # paramiko's exit code of a session that closed without sending one, said as NO_EXIT_STATUS_TEXT
NO_EXIT_STATUS_TEXT = ("the SSH session closed without an exit status (the command was killed by a signal, or sshd "
                       "ended the session); run it again, and see the node's journal if it repeats")


def said_of_silent_exit(code: int) -> str:
    """What to say of exit code CODE when the command printed nothing to stderr: NO_EXIT_STATUS_TEXT for paramiko's
    -1 (never a bare "exit -1"), else nothing."""
    return NO_EXIT_STATUS_TEXT if code == NO_EXIT_STATUS else ""


def require_limits(timeout: float, cap: int | None = OUTPUT_CAP) -> None:
    """ValueError unless timeout and cap are both given and above zero: nothing reads from a node without them."""
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise ValueError(f"a command on a node needs a deadline in seconds, not {timeout!r}")
    if not isinstance(cap, int) or isinstance(cap, bool) or cap <= 0:
        raise ValueError(f"a command on a node needs a byte cap on its output, not {cap!r}")


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

    def run(self, command: Command, *, timeout: float = COMMAND_TIMEOUT_S, stdin: str | None = None,
            cap: int = OUTPUT_CAP) -> CommandResult:
        """The command's outcome; a non-zero exit, a timeout (`timed_out`) or output over cap bytes (`over_cap`)
        is a result, not an exception."""

    def check(self, command: Command, *, timeout: float = COMMAND_TIMEOUT_S, cap: int = OUTPUT_CAP) -> str:
        """The stdout of a command that must succeed; RemoteCommandError when it does not (or outlives timeout,
        or prints more than cap bytes)."""

    def stream(self, command: Command, on_line: Callable[[str], None], *, timeout: float = STREAM_TIMEOUT_S) -> int:
        """Each line of the command's output handed to on_line as it comes (each capped); its exit code
        (ssh.TIMED_OUT after timeout seconds)."""

    def put(self, content: str | bytes, path: str, *, mode: int = 0o644, sudo: bool = False) -> None:
        """path holds content, written atomically (sudo: a root-owned system file, through the root helper)."""

    def read(self, path: str, cap: int = ..., timeout: float = ...) -> bytes | None:
        """A user-readable file's content, or None when it does not exist; at most cap bytes within timeout
        seconds (RemoteCommandError beyond either)."""

    def http(self, port: int, method: str, path: str, body: bytes | None = None, timeout: float = 10.0,
             cap: int = httpio.ANSWER_CAP, headers: Mapping[str, str] | None = None) -> httpio.Reply | None:
        """An HTTP exchange with 127.0.0.1:port on the node (headers beside Content-Type: an engine's
        Authorization); None when nothing listens there."""

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
