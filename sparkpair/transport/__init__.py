"""How sparkpair talks to nodes: SSH (fabric) and Docker over that same SSH connection.

One connection per node, opened lazily and verified against known_hosts (never blind
acceptance); both nodes are driven in parallel. This is the only module that imports fabric,
paramiko or docker, and the only place where a value is put into a remote shell: commands are
argv lists or `Shell` templates whose slots are quoted here.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import io
import logging
import secrets
import shlex
import socket
from collections.abc import Callable, Sequence
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import fabric
import invoke
import paramiko

from sparkpair.errors import ConnectError, RemoteCommandError
from sparkpair.inventory import Cluster, Inventory, Node

T = TypeVar("T")
logging.getLogger("paramiko").setLevel(logging.CRITICAL)  # its channel-open notices are not the user's business
# Non-interactive SSH sessions on Debian get no sbin in PATH; ip, ss, ethtool live there.
PATH_PREFIX = 'PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"; export PATH; '


class Shell:
    """A shell command line; each `{}` slot is filled with a shell-quoted argument.

    Only the literal two characters `{}` are slots, so shell braces (`${HOME}`, `{ a; }`) are
    safe in templates. The number of slots must match the number of arguments.
    """

    def __init__(self, template: str, *args: object) -> None:
        pieces = template.split("{}")
        if len(pieces) != len(args) + 1:
            raise ValueError(f"template has {len(pieces) - 1} slots for {len(args)} arguments: {template!r}")
        quoted = [shlex.quote(str(arg)) for arg in args] + [""]
        self.text = "".join(piece + value for piece, value in zip(pieces, quoted))

    @classmethod
    def compose(cls, parts: Sequence[Shell], separator: str = "; ") -> Shell:
        """Join already-quoted Shell commands into one script (nothing is re-quoted)."""
        joined = cls("")
        joined.text = separator.join(part.text for part in parts)
        return joined

    def __repr__(self) -> str:
        return f"Shell({self.text!r})"


Command = Shell | Sequence[str]


def command_text(command: Command, sudo: bool = False) -> str:
    """The exact line sent to the node's shell."""
    if isinstance(command, str):
        raise TypeError("pass an argv list or a Shell template, never a bare string")
    text = command.text if isinstance(command, Shell) else shlex.join(command)
    return f"sudo -n sh -c {shlex.quote(text)}" if sudo else text


@dataclass(frozen=True)
class CommandResult:
    """What a command did on a node."""

    node: str
    command: str
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def fingerprint(key_type: str, body: str) -> str:
    """A public key's type and OpenSSH-style SHA256 fingerprint; body is the key's base64 (as in known_hosts)."""
    digest = base64.b64encode(hashlib.sha256(base64.b64decode(body)).digest()).decode().rstrip("=")
    return f"{key_type} SHA256:{digest}"


def known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Unknown host: refuse, or with accept_new record it in known_hosts (like accept-new)."""

    def __init__(self, node: Node, known_hosts: Path, accept_new: bool) -> None:
        self.node, self.known_hosts, self.accept_new = node, known_hosts, accept_new

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if not self.accept_new:
            raise ConnectError(f"host key of {hostname} is not in {self.known_hosts} (offered "
                               f"{fingerprint(key.get_name(), key.get_base64())})", node=self.node.name,
                               hint="check the fingerprint on the node's console, then rerun with "
                                    "--accept-new-host-keys")
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        with self.known_hosts.open("a", encoding="utf-8") as handle:
            handle.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)


class NodeConnection:
    """One lazily opened SSH connection to one node; commands never raise on exit codes."""

    def __init__(self, node: Node, cluster: Cluster, *, accept_new_host_keys: bool = False,
                 connect_timeout: float = 10.0, trace: Callable[[str, str], None] | None = None) -> None:
        self.node = node
        self.name = node.name
        self._cluster = cluster
        self._accept_new = accept_new_host_keys
        self._timeout = connect_timeout
        self._trace = trace
        self._connection: fabric.Connection | None = None
        self._home: str | None = None
        self._docker: Any = None

    def _open(self) -> fabric.Connection:
        if self._connection is not None:
            return self._connection
        key_file = self._cluster.ssh_key
        if not key_file.is_file():
            raise ConnectError(f"cluster.ssh_key {key_file} does not exist on this machine",
                               hint=f"ssh-keygen -t ed25519 -f {key_file}, then ssh-copy-id to both nodes")
        client = paramiko.SSHClient()
        known = self._cluster.known_hosts
        if known.is_file():
            client.load_host_keys(str(known))
        client.set_missing_host_key_policy(_HostKeyPolicy(self.node, known, self._accept_new))
        connection = fabric.Connection(
            self.node.host, user=self._cluster.user, port=self.node.port, connect_timeout=self._timeout,
            connect_kwargs={"key_filename": str(key_file), "look_for_keys": False, "allow_agent": False,
                            "banner_timeout": self._timeout, "auth_timeout": self._timeout})
        connection.client = client
        try:
            connection.open()
        except ConnectError:
            raise
        except Exception as error:  # noqa: BLE001 (every way SSH can fail becomes one line)
            raise _connect_error(self.node, self._cluster, error) from None
        self._connection = connection
        return connection

    def connect(self) -> None:
        """Open the connection now (to fail early and clearly)."""
        self._open()

    def run(self, command: Command, *, sudo: bool = False, timeout: float | None = None,
            stdin: str | None = None) -> CommandResult:
        """Run a command; a non-zero exit is a result, not an exception."""
        text = command_text(command, sudo)
        if self._trace:
            self._trace(self.name, text)
        try:
            result = self._open().run(PATH_PREFIX + text, hide=True, warn=True, timeout=timeout,
                                      in_stream=io.StringIO(stdin) if stdin is not None else False)
        except invoke.exceptions.CommandTimedOut as error:
            return CommandResult(self.name, text, 124, error.result.stdout, f"timed out after {timeout} s")
        except invoke.exceptions.ThreadException as error:  # e.g. the command exited before reading stdin
            return CommandResult(self.name, text, 255, "", f"I/O with the command failed: {error.exceptions}")
        except (OSError, EOFError, paramiko.SSHException) as error:
            raise ConnectError(f"connection lost while running `{text}`: {error}", node=self.name) from None
        return CommandResult(self.name, text, result.exited, result.stdout, result.stderr)

    def check(self, command: Command, *, sudo: bool = False, timeout: float | None = None) -> str:
        """Run a command that must succeed; return its stdout."""
        result = self.run(command, sudo=sudo, timeout=timeout)
        if not result.ok:
            raise RemoteCommandError(self.name, result.command, result.exit_code, result.stderr or result.stdout)
        return result.stdout

    def server_key(self) -> tuple[str, str]:
        """(type, base64) of the host key this connection verified against known_hosts."""
        key = self._open().client.get_transport().get_remote_server_key()
        return key.get_name(), key.get_base64()

    @property
    def home(self) -> str:
        """The login user's home directory on the node."""
        if self._home is None:
            self._home = self.check(Shell('printf %s "$HOME"')).strip()
        return self._home

    def put(self, content: str | bytes, path: str, *, mode: int = 0o644, sudo: bool = False) -> None:
        """Write a file atomically: upload beside it (or to a private temp) and rename into place."""
        data = content.encode() if isinstance(content, str) else content
        sftp = self._open().sftp()
        temp = f"{path}.sparkpair-{secrets.token_hex(4)}" if not sudo else \
            f"{self.home}/.sparkpair-upload-{secrets.token_hex(4)}"
        try:
            with sftp.open(temp, "wb") as handle:
                handle.chmod(mode if not sudo else 0o600)
                handle.write(data)
            if not sudo:
                sftp.posix_rename(temp, path)
                return
        except BaseException:  # Ctrl-C or a lost connection mid-upload: leave no partial temp file behind
            with contextlib.suppress(Exception):
                sftp.remove(temp)
            raise
        staged = f"{path}.sparkpair-new"
        self.check(Shell("install -m {} -o root -g root {} {} && mv -f {} {}; rc=$?; rm -f {}; exit $rc",
                         format(mode, "o"), temp, staged, staged, path, temp), sudo=True)

    def read(self, path: str) -> bytes | None:
        """A file's content, or None when it does not exist (user-readable files only)."""
        try:
            with self._open().sftp().open(path, "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def http(self, port: int, method: str, path: str, body: bytes | None = None,
             timeout: float = 10.0) -> tuple[int, bytes] | None:
        """An HTTP request to 127.0.0.1:port on the node, tunnelled through this SSH connection.

        None when nothing listens on the port (so no firewall between here and the node matters).
        """
        try:
            channel = self._open().client.get_transport().open_channel(
                "direct-tcpip", ("127.0.0.1", port), ("127.0.0.1", 0), timeout=timeout)
        except paramiko.ChannelException:
            return None
        except (OSError, EOFError, paramiko.SSHException) as error:
            raise ConnectError(f"SSH tunnel to port {port} failed: {error}", node=self.name) from None
        channel.settimeout(timeout)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        connection.sock = channel  # type: ignore[assignment]
        try:
            connection.request(method, path, body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException):
            return None
        finally:
            connection.close()

    def docker(self) -> Any:
        """A Docker SDK client that talks to the node's engine over this SSH connection."""
        if self._docker is None:
            from sparkpair.transport.dockerapi import docker_over  # the Docker SDK only when a command needs it

            self._docker = docker_over(self._open().client, self.name)
        return self._docker

    def close(self) -> None:
        if self._docker is not None:
            self._docker.close()
        if self._connection is not None:
            self._connection.close()
        self._connection, self._docker = None, None


def _connect_error(node: Node, cluster: Cluster, error: Exception) -> ConnectError:
    target = f"{cluster.user}@{node.host}:{node.port}"
    if isinstance(error, paramiko.BadHostKeyException):
        expected, offered = (fingerprint(k.get_name(), k.get_base64()) for k in (error.expected_key, error.key))
        return ConnectError(f"host key of {node.host} CHANGED: known_hosts has {expected}, "
                            f"the node offers {offered}; refusing to connect", node=node.name,
                            hint=f"if the node was reinstalled: ssh-keygen -R {known_hosts_name(node.host, node.port)}"
                                 f" -f {cluster.known_hosts}")
    if isinstance(error, paramiko.AuthenticationException):
        return ConnectError(f"{target} refused key {cluster.ssh_key} (Permission denied (publickey))",
                            node=node.name, hint=f"ssh-copy-id -i {cluster.ssh_key}.pub {target}")
    if isinstance(error, socket.gaierror):
        return ConnectError(f"cannot resolve {node.host}", node=node.name, hint="fix nodes[].host or DNS")
    if isinstance(error, (TimeoutError, socket.timeout)):
        return ConnectError(f"no answer from {target} (timed out)", node=node.name,
                            hint="is the node up and on the management network?")
    if isinstance(error, paramiko.ssh_exception.NoValidConnectionsError):
        return ConnectError(f"{target} refused the connection; is sshd running?", node=node.name,
                            hint="sudo systemctl start ssh on the node")
    return ConnectError(f"cannot connect to {target}: {type(error).__name__}: {error}", node=node.name)


class Pair:
    """Both nodes' connections; `each` runs a function on every node in parallel."""

    def __init__(self, inventory: Inventory, **options: Any) -> None:
        self.inventory = inventory
        self.nodes = {node.name: NodeConnection(node, inventory.cluster, **options) for node in inventory.nodes}

    @property
    def head(self) -> NodeConnection:
        return self.nodes[self.inventory.head.name]

    @property
    def worker(self) -> NodeConnection:
        return self.nodes[self.inventory.worker.name]

    def each(self, action: Callable[[NodeConnection], T], names: Sequence[str] | None = None,
             cancel: threading.Event | None = None) -> dict[str, T | BaseException]:
        """action on every named node at once; the map keeps each node's result or exception.

        On Ctrl-C the cancel event is set and the nodes' current work is awaited before the
        interrupt propagates, so no node is left in the middle of an action.
        """
        chosen = [self.nodes[name] for name in (names or self.nodes)]
        pool = ThreadPoolExecutor(max_workers=len(chosen))
        futures = {conn.name: pool.submit(action, conn) for conn in chosen}
        try:
            wait(futures.values())
        except KeyboardInterrupt:
            if cancel is not None:
                cancel.set()
            wait(futures.values())
            raise
        finally:
            pool.shutdown(wait=False)
        outcome: dict[str, T | BaseException] = {}
        for name, future in futures.items():
            error = future.exception()
            outcome[name] = error if error is not None else future.result()
        return outcome

    def connect(self) -> None:
        """Open both connections; if any node is unreachable, one error names every such node."""
        failures = [error for error in self.each(lambda connection: connection.connect()).values()
                    if isinstance(error, BaseException)]
        if failures:
            raise ConnectError("; ".join(" ".join(e.lines()) if isinstance(e, ConnectError) else str(e)
                                         for e in failures) + "; nothing was changed")

    def close(self) -> None:
        for connection in self.nodes.values():
            connection.close()

    def __enter__(self) -> Pair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
