"""One SSH connection per node (fabric over paramiko): commands, files, HTTP and streams over it.

Opened lazily and verified against known_hosts (never blind acceptance); commands never raise on
exit codes. Takes plain connection parameters (`SshTarget`), never the inventory.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import io
import logging
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import fabric
import invoke
import paramiko

from sparkpair.errors import ConnectError, RemoteCommandError
from sparkpair.paths import UPLOAD_PREFIX, under_home
from sparkpair.transport.shell import PATH_PREFIX, Command, Shell, command_text

logging.getLogger("paramiko").setLevel(logging.CRITICAL)  # its channel-open notices are not the user's business


@dataclass(frozen=True)
class SshTarget:
    """Where one node is and how to log in: plain values, so transport needs no inventory."""

    name: str
    host: str
    port: int
    user: str
    key_file: Path
    known_hosts: Path

    @property
    def address(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


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

    def __init__(self, target: SshTarget, accept_new: bool) -> None:
        self.target, self.known_hosts, self.accept_new = target, target.known_hosts, accept_new

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if not self.accept_new:
            raise ConnectError(f"host key of {hostname} is not in {self.known_hosts} (offered "
                               f"{fingerprint(key.get_name(), key.get_base64())})", node=self.target.name,
                               hint="check the fingerprint on the node's console, then rerun with "
                                    "--accept-new-host-keys")
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        with self.known_hosts.open("a", encoding="utf-8") as handle:
            handle.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)


class NodeConnection:
    """One lazily opened SSH connection to one node; commands never raise on exit codes."""

    def __init__(self, target: SshTarget, *, accept_new_host_keys: bool = False,
                 connect_timeout: float = 10.0, trace: Callable[[str, str], None] | None = None) -> None:
        self.target = target
        self.name = target.name
        self._accept_new = accept_new_host_keys
        self._timeout = connect_timeout
        self._trace = trace
        self._connection: fabric.Connection | None = None
        self._home: str | None = None

    def _open(self, timeout: float | None = None) -> fabric.Connection:
        if self._connection is not None:
            return self._connection
        target = self.target
        timeout = timeout or self._timeout
        key_file = target.key_file
        if not key_file.is_file():
            raise ConnectError(f"the SSH key {key_file} (cluster.ssh_key) does not exist on this machine",
                               hint=f"ssh-keygen -t ed25519 -f {key_file}, then ssh-copy-id to both nodes")
        client = paramiko.SSHClient()
        if target.known_hosts.is_file():
            client.load_host_keys(str(target.known_hosts))
        client.set_missing_host_key_policy(_HostKeyPolicy(target, self._accept_new))
        connection = fabric.Connection(
            target.host, user=target.user, port=target.port, connect_timeout=timeout,
            connect_kwargs={"key_filename": str(key_file), "look_for_keys": False, "allow_agent": False,
                            "banner_timeout": timeout, "auth_timeout": timeout})
        connection.client = client
        try:
            connection.open()
        except ConnectError:
            raise
        except Exception as error:  # noqa: BLE001 (every way SSH can fail becomes one line)
            raise _connect_error(target, error) from None
        self._connection = connection
        return connection

    def connect(self, timeout: float | None = None) -> None:
        """Open the connection now (to fail early and clearly); timeout: seconds for this attempt, when it
        must be shorter than the connection's own (looking for a node that may be cut off)."""
        self._open(timeout)

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

    def stream(self, command: Command, on_line: Callable[[str], None], *, timeout: float | None = None) -> int:
        """Run a command, handing each line of its output (stdout and stderr) to on_line as it comes;
        the exit code. Carriage returns end a line too (progress bars)."""
        text = command_text(command)
        if self._trace:
            self._trace(self.name, text)
        sink = _LineSink(on_line)
        try:
            result = self._open().run(PATH_PREFIX + text, hide=True, warn=True, timeout=timeout, in_stream=False,
                                      out_stream=sink, err_stream=sink)
        except invoke.exceptions.CommandTimedOut:
            sink.flush()
            return 124
        except (OSError, EOFError, paramiko.SSHException) as error:
            raise ConnectError(f"connection lost while running `{text}`: {error}", node=self.name) from None
        sink.flush()
        return int(result.exited)

    def check(self, command: Command, *, sudo: bool = False, timeout: float | None = None) -> str:
        """Run a command that must succeed; return its stdout."""
        result = self.run(command, sudo=sudo, timeout=timeout)
        if not result.ok:
            raise RemoteCommandError(self.name, result.command, result.exit_code, result.stderr or result.stdout)
        return result.stdout

    def client(self) -> paramiko.SSHClient:
        """The open, verified paramiko client (transport.session opens its own channels on it)."""
        client: paramiko.SSHClient = self._open().client
        return client

    def trace(self, text: str) -> None:
        """Show a command line at -vv (what `run` does for every command)."""
        if self._trace:
            self._trace(self.name, text)

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
            f"{under_home(UPLOAD_PREFIX, self.home)}{secrets.token_hex(4)}"
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
                return bytes(handle.read())
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
        connection.sock = channel
        try:
            connection.request(method, path, body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException):
            return None
        finally:
            connection.close()

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection = None


class _LineSink(io.TextIOBase):
    """A write-only stream that hands complete lines to a callback (fabric writes output chunks to it)."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self._on_line, self._pending = on_line, ""

    def write(self, text: str) -> int:
        self._pending += text.replace("\r", "\n")
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            if line.strip():
                self._on_line(line)
        return len(text)

    def flush(self) -> None:
        if self._pending.strip():
            self._on_line(self._pending)
        self._pending = ""


def _connect_error(node: SshTarget, error: Exception) -> ConnectError:
    target = node.address
    if isinstance(error, paramiko.BadHostKeyException):
        expected, offered = (fingerprint(k.get_name(), k.get_base64()) for k in (error.expected_key, error.key))
        return ConnectError(f"host key of {node.host} CHANGED: known_hosts has {expected}, "
                            f"the node offers {offered}; refusing to connect", node=node.name,
                            hint=f"if the node was reinstalled: ssh-keygen -R {known_hosts_name(node.host, node.port)}"
                                 f" -f {node.known_hosts}")
    if isinstance(error, paramiko.AuthenticationException):
        return ConnectError(f"{target} refused key {node.key_file} (Permission denied (publickey))",
                            node=node.name, hint=f"ssh-copy-id -i {node.key_file}.pub {target}")
    if isinstance(error, socket.gaierror):
        return ConnectError(f"cannot resolve {node.host}", node=node.name, hint="fix nodes[].host or DNS")
    if isinstance(error, (TimeoutError, socket.timeout)):
        return ConnectError(f"no answer from {target} (timed out)", node=node.name,
                            hint="is the node up and on the management network?")
    if isinstance(error, paramiko.ssh_exception.NoValidConnectionsError):
        return ConnectError(f"{target} refused the connection; is sshd running?", node=node.name,
                            hint="sudo systemctl start ssh on the node")
    return ConnectError(f"cannot connect to {target}: {type(error).__name__}: {error}", node=node.name)
