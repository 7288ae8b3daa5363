"""The TCP connection under each SSH connection: dialed by sparkpair, not paramiko, with the socket options
SSH's small packets need (Nagle off, quick ACKs). Standard library only.
"""

from __future__ import annotations

import contextlib
import socket


def dial(host: str, port: int, timeout: float) -> QuickAckSocket:
    """A TCP connection to the node's sshd with Nagle's algorithm off (and quick ACKs: QuickAckSocket).

    SSH sends each command as a few small packets (channel open, exec, end of input) and sshd answers
    with a few more; with Nagle on, each small write after the first waits for the peer's delayed ACK
    (40 ms on Linux), so every command cost about 45 ms more than its round trip (3 ms on the
    simulated pair), on a real pair as much as here. OpenSSH's own client turns Nagle off only for
    interactive sessions.
    """
    plain = socket.create_connection((host, port), timeout=timeout)
    sock = QuickAckSocket(plain.family, plain.type, plain.proto, fileno=plain.detach())
    sock.settimeout(timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class QuickAckSocket(socket.socket):
    """A TCP socket that acknowledges what it receives at once: TCP_QUICKACK, re-armed before each read
    (the kernel clears it by itself).

    sshd sends a packet right after authentication (its host keys) and holds its answer to the first
    channel open behind it (Nagle) until this side acknowledges that packet; Linux's delayed ACK made
    the first command of every connection wait 40-50 ms for it (opening the channel: 52 ms; with this,
    12 ms).
    """

    def recv(self, size: int, flags: int = 0) -> bytes:
        with contextlib.suppress(OSError):
            self.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        return super().recv(size, flags)
