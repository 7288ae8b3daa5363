"""One SSH connection per node (paramiko): commands, files, HTTP and streams over it.

Opened lazily and verified against known_hosts (never blind acceptance); commands never raise on
exit codes. Takes plain connection parameters (`SshTarget`), never the inventory.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import secrets
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sparkpair.errors import ConnectError, ConnectionLost, RemoteCommandError
from sparkpair.transport import httpio, sftpread, tcp
from sparkpair.transport.lines import CappedOutput, LineSink
from sparkpair.transport.node import COMMAND_TIMEOUT_S, OUTPUT_CAP, STREAM_TIMEOUT_S, require_limits, said_of_silent_exit
from sparkpair.transport.root import Root
from sparkpair.transport.sftpread import READ_CAP, READ_TIMEOUT_S
from sparkpair.transport.shell import PATH_PREFIX, Command, Shell, command_text, shown_text

# paramiko.config imports invoke, when installed, only to run the `Match exec` lines of ssh_config files, which
# sparkpair never reads; that import (invoke pulls in unittest.mock and asyncio) cost every command about 50 ms
# of start-up. A None in sys.modules makes paramiko's guarded import fail softly (it keeps invoke = None); it is
# removed right after, so anything else in this process imports invoke as usual.
_BLOCKED = "invoke" not in sys.modules
if _BLOCKED:
    sys.modules["invoke"] = None  # type: ignore[assignment]
import paramiko  # noqa: E402

if _BLOCKED:
    del sys.modules["invoke"]

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
        """`user@host:port` for a message (an IPv6 host in brackets); never a command's argument."""
        return f"{self.user}@{httpio.url_host(self.host)}:{self.port}"

    def copy_id_hint(self) -> str:
        """The `ssh-copy-id` that authorizes key_file on the node, every value shell-quoted."""
        return shlex.join(["ssh-copy-id", "-i", f"{self.key_file}.pub", "-p", str(self.port), f"{self.user}@{self.host}"])


@dataclass(frozen=True)
class CommandResult:
    """What a command did on a node."""

    node: str
    command: str
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False  # the command outlived its timeout (exit_code is then TIMED_OUT): its outcome is unknown
    over_cap: bool = False   # it printed more than its byte cap (exit_code OVER_CAP): the rest was not read

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.over_cap


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


TIMED_OUT = 124  # the exit code of a command that outlived its timeout (as coreutils' timeout says it)
OVER_CAP = 125   # the exit code of a command whose output outgrew its byte cap (reading stopped there)
EARLY_FAILURE_KEPT_S = 2.0  # an early connect's error older than this is not reported: the first use retries


class NodeConnection:
    """One lazily opened SSH connection to one node; commands never raise on exit codes."""

    def __init__(self, target: SshTarget, *, accept_new_host_keys: bool = False,
                 connect_timeout: float = 10.0, trace: Callable[[str, str], None] | None = None) -> None:
        self.target = target
        self.name = target.name
        self._accept_new = accept_new_host_keys
        self._timeout = connect_timeout
        self._trace = trace
        self._connection: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._home: str | None = None
        self._opening = threading.Lock()
        self._early_failure: tuple[float, BaseException] | None = None
        self._opening_thread: threading.Thread | None = None
        self._home_lock = threading.Lock()

    def connect_soon(self) -> None:
        """Start opening the connection in the background, and learn the home directory, so both round
        trips overlap the caller's own start-up; the first use waits for the connection, and gets its error if it failed in the last
        EARLY_FAILURE_KEPT_S seconds (later, that use tries again)."""
        def opening() -> None:
            try:
                self._open()
            except BaseException as error:  # noqa: BLE001 (handed to the first use, as that use would have raised it)
                self._early_failure = (time.monotonic(), error)
                return
            with contextlib.suppress(Exception):  # most commands need the home next; asked again if this failed
                _ = self.home

        self._opening_thread = threading.Thread(target=opening, name=f"connect-{self.name}", daemon=True)
        self._opening_thread.start()

    def _open(self, timeout: float | None = None) -> paramiko.SSHClient:
        with self._opening:
            failure, self._early_failure = self._early_failure, None
            if failure is not None and time.monotonic() - failure[0] < EARLY_FAILURE_KEPT_S:
                raise failure[1]
            return self._open_locked(timeout)

    def _open_locked(self, timeout: float | None) -> paramiko.SSHClient:
        if self._connection is not None:
            transport = self._connection.get_transport()
            if transport is not None and transport.is_active():
                return self._connection
            self.close()  # the node dropped the connection: open a new one, as fabric did on every run
        target = self.target
        timeout = timeout or self._timeout
        key_file = target.key_file
        if not key_file.is_file():
            raise ConnectError(f"the SSH key {key_file} (cluster.ssh_key) does not exist on this machine",
                               hint=f"{shlex.join(['ssh-keygen', '-t', 'ed25519', '-f', str(key_file)])}, "
                                    "then ssh-copy-id to every node of the inventory")
        client = paramiko.SSHClient()
        if target.known_hosts.is_file():
            client.load_host_keys(str(target.known_hosts))
        client.set_missing_host_key_policy(_HostKeyPolicy(target, self._accept_new))
        try:
            client.connect(target.host, port=target.port, username=target.user, key_filename=str(key_file),
                           look_for_keys=False, allow_agent=False, timeout=timeout, banner_timeout=timeout,
                           auth_timeout=timeout, sock=tcp.dial(target.host, target.port, timeout))
        except ConnectError:
            raise
        except Exception as error:  # noqa: BLE001 (every way SSH can fail becomes one line)
            client.close()
            raise _connect_error(target, error) from None
        self._connection = client
        return client

    def _execute(self, text: str, timeout: float, stdin: str | None, on_out: Callable[[bytes], None],
                 on_err: Callable[[bytes], None], enough: Callable[[], bool] = lambda: False) -> int | None:
        """Run text in a new session channel, handing its stdout and stderr to on_out/on_err as they come
        (stderr from a reader thread); its exit code, or None when timeout seconds passed first or enough()
        said to stop reading (a byte cap reached)."""
        try:
            transport = self._open().get_transport()
            if transport is None:
                raise paramiko.SSHException("the SSH transport is closed")
            channel = transport.open_session(timeout=self._timeout)
            channel.exec_command(PATH_PREFIX + text)
            if stdin is not None:
                channel.sendall(stdin.encode())
            channel.shutdown_write()
        except (OSError, EOFError, paramiko.SSHException) as error:
            raise ConnectionLost(f"connection lost while running `{text}`: {error}", node=self.name) from None
        reader = threading.Thread(target=_drain, args=(channel, on_err), daemon=True)
        reader.start()
        deadline = time.monotonic() + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or enough():
                    return None
                channel.settimeout(min(left, 1.0))
                try:
                    data = channel.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                on_out(data)
            while not channel.exit_status_ready():
                if time.monotonic() > deadline or enough():
                    return None
                channel.status_event.wait(0.5)
            reader.join(5)
            return channel.recv_exit_status()
        except (OSError, EOFError, paramiko.SSHException) as error:
            raise ConnectionLost(f"connection lost while running `{text}`: {error}", node=self.name) from None
        finally:
            channel.close()

    def connect(self, timeout: float | None = None) -> None:
        """Open the connection now (to fail early and clearly); timeout: seconds for this attempt, when it
        must be shorter than the connection's own (looking for a node that may be cut off)."""
        self._open(timeout)

    def run(self, command: Command, *, timeout: float = COMMAND_TIMEOUT_S, stdin: str | None = None,
            cap: int = OUTPUT_CAP) -> CommandResult:
        """Run a command; a non-zero exit is a result, not an exception. Its output is read for at most timeout
        seconds and cap bytes (stdout and stderr together); past either it is a result with timed_out or
        over_cap set, and the channel is closed."""
        require_limits(timeout, cap)
        text, shown = command_text(command), shown_text(command)
        if self._trace:
            self._trace(self.name, shown)
        output = CappedOutput(cap)
        code = self._execute(text, timeout, stdin, output.stdout, output.stderr, lambda: output.over)
        text = shown  # a result names the command as a person reads it (a root verb, not the helper's text)
        stdout, stderr = output.out.decode(errors="replace"), output.err.decode(errors="replace")
        if output.over:
            return CommandResult(self.name, text, OVER_CAP, stdout, f"printed more than {cap} bytes; the rest was "
                                 "not read", over_cap=True)
        if code is None:
            return CommandResult(self.name, text, TIMED_OUT, stdout, f"timed out after {timeout} s", timed_out=True)
        return CommandResult(self.name, text, code, stdout, stderr or said_of_silent_exit(code))

    def stream(self, command: Command, on_line: Callable[[str], None], *, timeout: float = STREAM_TIMEOUT_S) -> int:
        """Run a command, handing each line of its output (stdout and stderr) to on_line as it comes, each at
        most lines.MAX_LINE characters (nothing else is kept); the exit code, TIMED_OUT after timeout seconds.
        Carriage returns end a line too (progress bars)."""
        require_limits(timeout)
        text = command_text(command)
        if self._trace:
            self._trace(self.name, text)
        out, err = LineSink(on_line), LineSink(on_line)
        code = self._execute(text, timeout, None, out.feed, err.feed)
        out.flush()
        err.flush()
        return TIMED_OUT if code is None else code

    def check(self, command: Command, *, timeout: float = COMMAND_TIMEOUT_S, cap: int = OUTPUT_CAP) -> str:
        """Run a command that must succeed; return its stdout."""
        result = self.run(command, timeout=timeout, cap=cap)
        if not result.ok:
            raise RemoteCommandError(self.name, result.command, result.exit_code, result.stderr or result.stdout)
        return result.stdout

    def client(self) -> paramiko.SSHClient:
        """The open, verified paramiko client (transport.session opens its own channels on it)."""
        return self._open()

    def trace(self, text: str) -> None:
        """Show a command line at -vv (what `run` does for every command)."""
        if self._trace:
            self._trace(self.name, text)

    def server_key(self) -> tuple[str, str]:
        """(type, base64) of the host key this connection verified against known_hosts."""
        transport = self._open().get_transport()
        if transport is None:
            raise ConnectError("the SSH connection is closed", node=self.name)
        key = transport.get_remote_server_key()
        return key.get_name(), key.get_base64()

    @property
    def home(self) -> str:
        """The login user's home directory on the node."""
        with self._home_lock:  # asked once, also when connect_soon's thread is asking it right now
            if self._home is None:
                self._home = self.check(Shell('printf %s "$HOME"')).strip()
        return self._home

    def put(self, content: str | bytes, path: str, *, mode: int = 0o644, sudo: bool = False) -> None:
        """Write a file atomically: upload beside it and rename into place; a system file (sudo) through the
        root helper's `install`, its content on stdin."""
        data = content.encode() if isinstance(content, str) else content
        if sudo:
            result = self.run(Root("install", path, format(mode, "o")), stdin=data.decode())
            if not result.ok:
                raise RemoteCommandError(self.name, result.command, result.exit_code, result.stderr or result.stdout)
            return
        sftp = self._sftp_client()
        temp = f"{path}.sparkpair-{secrets.token_hex(4)}"
        try:
            with sftp.open(temp, "wb") as handle:
                handle.chmod(mode)
                handle.write(data)
            sftp.posix_rename(temp, path)
        except BaseException:  # Ctrl-C or a lost connection mid-upload: leave no partial temp file behind
            with contextlib.suppress(Exception):
                sftp.remove(temp)
            raise

    def read(self, path: str, cap: int = READ_CAP, timeout: float = READ_TIMEOUT_S) -> bytes | None:
        """A file's content, or None when it does not exist (user-readable files only): at most cap bytes,
        within timeout seconds in all; a larger file or a slower node is a RemoteCommandError naming the path."""
        return sftpread.read_capped(self._sftp_client(), self.name, path, cap, timeout)

    def http(self, port: int, method: str, path: str, body: bytes | None = None, timeout: float = 10.0,
             cap: int = httpio.ANSWER_CAP, headers: Mapping[str, str] | None = None) -> httpio.Reply | None:
        """An HTTP request to 127.0.0.1:port on the node, tunnelled through this SSH connection, done within
        timeout seconds in all (the tunnel's opening included) and reading at most cap bytes of the answer.

        None when nothing listens on the port (so no firewall between here and the node matters); a Reply
        with status 0 and the reason when no whole answer came in time or it was larger than cap.
        """
        deadline = httpio.Deadline(timeout)
        try:
            transport = self._open().get_transport()
            if transport is None:
                raise paramiko.SSHException("the SSH transport is closed")
            channel = transport.open_channel(
                "direct-tcpip", ("127.0.0.1", port), ("127.0.0.1", 0), timeout=deadline.left())
        except paramiko.ChannelException:
            return None
        except httpio.HttpFailure as failure:
            return httpio.Reply.failed(failure)
        except (OSError, EOFError, paramiko.SSHException) as error:
            raise ConnectError(f"SSH tunnel to port {port} failed: {error}", node=self.name) from None
        return httpio.fetch(channel, deadline, method, path, body=body,
                            headers={"Content-Type": "application/json", **(headers or {})}, cap=cap)

    def _sftp_client(self) -> paramiko.SFTPClient:
        """The connection's SFTP session, opened on first use."""
        if self._sftp is None:
            self._sftp = self._open().open_sftp()
        return self._sftp

    def close(self) -> None:
        if self._sftp is not None:
            with contextlib.suppress(Exception):
                self._sftp.close()
        if self._connection is not None:
            self._connection.close()
        self._connection, self._sftp = None, None


def _drain(channel: paramiko.Channel, on_err: Callable[[bytes], None]) -> None:
    """Hand a channel's stderr to on_err until it ends (the reader thread of `_execute`)."""
    while True:
        try:
            data = channel.recv_stderr(65536)
        except TimeoutError:
            continue
        except (OSError, EOFError, paramiko.SSHException):
            return
        if not data:
            return
        on_err(data)


def _connect_error(node: SshTarget, error: Exception) -> ConnectError:
    target = node.address
    if isinstance(error, paramiko.BadHostKeyException):
        expected, offered = (fingerprint(k.get_name(), k.get_base64()) for k in (error.expected_key, error.key))
        return ConnectError(f"host key of {node.host} CHANGED: known_hosts has {expected}, "
                            f"the node offers {offered}; refusing to connect", node=node.name,
                            hint="if the node was reinstalled: " + shlex.join(
                                ["ssh-keygen", "-R", known_hosts_name(node.host, node.port), "-f", str(node.known_hosts)]))
    if isinstance(error, paramiko.AuthenticationException):
        return ConnectError(f"{target} refused key {node.key_file} (Permission denied (publickey))",
                            node=node.name, hint=node.copy_id_hint())
    if isinstance(error, socket.gaierror):
        return ConnectError(f"cannot resolve {node.host}", node=node.name, hint="fix nodes[].host or DNS")
    if isinstance(error, (TimeoutError, socket.timeout)):
        return ConnectError(f"no answer from {target} (timed out)", node=node.name,
                            hint="is the node up and on the management network?")
    if isinstance(error, ConnectionRefusedError):  # from tcp.dial (paramiko dials no socket of its own)
        return ConnectError(f"{target} refused the connection; is sshd running?", node=node.name,
                            hint="sudo systemctl start ssh on the node")
    return ConnectError(f"cannot connect to {target}: {type(error).__name__}: {error}", node=node.name)
