"""A long-running command on a node with its own SSH channel: input written as it goes, output lines read
as they come (each line at most lines.MAX_LINE bytes, QUEUED lines read ahead at most; every `line` waits with a
deadline), ended by closing the channel.

For node-side programs that talk to sparkpair while they run (the model copy's sender and receiver):
their input (which may hold a one-time secret) goes over the channel's stdin, so it never appears
in argv, `ps` or a trace; closing the channel ends their input, which they take as "stop now".
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import deque

import paramiko

from sparkpair.errors import ConnectError
from sparkpair.transport.lines import MAX_LINE
from sparkpair.transport.node import Node
from sparkpair.transport.shell import PATH_PREFIX, Command, command_text

END = None  # what `line` returns once the command's output has ended
QUEUED = 4096  # lines read ahead at most; then the reader waits (and the channel's window holds the node back)


class RemoteProcess:
    """One command running on a node: `send` to its stdin, `line` reads its stdout, `close` ends it."""

    def __init__(self, connection: Node, command: Command) -> None:
        self.node = connection.name
        self.text = command_text(command)
        connection.trace(self.text)
        try:
            transport = connection.client().get_transport()
            if transport is None:
                raise ConnectError("the SSH connection is closed", node=self.node)
            self._channel = transport.open_session()
            self._channel.exec_command(PATH_PREFIX + self.text)
        except (OSError, EOFError, paramiko.SSHException) as error:
            raise ConnectError(f"cannot start `{self.text[:60]}`: {error}", node=self.node) from None
        self._lines: queue.Queue[str | None] = queue.Queue(QUEUED)
        self._stderr: deque[str] = deque(maxlen=20)
        self._readers = [threading.Thread(target=self._read, args=(self._channel.makefile("rb"), True), daemon=True),
                         threading.Thread(target=self._read, args=(self._channel.makefile_stderr("rb"), False),
                                          daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: paramiko.ChannelFile, is_stdout: bool) -> None:
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            while raw := stream.readline(MAX_LINE):  # a line longer than MAX_LINE comes as several
                text = raw.decode(errors="replace").rstrip("\n")
                if is_stdout:
                    self._lines.put(text)
                else:
                    self._stderr.append(text)
        if is_stdout:
            self._lines.put(END)

    def send(self, text: str) -> None:
        """Write text to the command's stdin (nothing of it is traced or logged)."""
        try:
            self._channel.sendall(text.encode())
        except (OSError, EOFError, paramiko.SSHException) as error:
            raise ConnectError(f"lost the command `{self.text[:60]}`: {error}", node=self.node) from None

    def line(self, timeout: float) -> str | None:
        """The next line of stdout; END when the output ended; raises TimeoutError after timeout seconds."""
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no output from `{self.text[:60]}` for {timeout} s") from None

    def stderr_tail(self) -> str:
        """The last lines the command wrote to stderr."""
        return "\n".join(self._stderr)

    def exit_code(self, timeout: float = 10.0) -> int | None:
        """The exit status once the command ended (None if it has not within timeout)."""
        for reader in self._readers:
            reader.join(timeout)
        if not self._channel.exit_status_ready():
            return None
        return int(self._channel.recv_exit_status())

    def close(self) -> None:
        """Close the channel: the command's stdin ends (its cue to stop) and its output goes nowhere."""
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            self._channel.close()
