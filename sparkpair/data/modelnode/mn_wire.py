"""The copy's wire: the one-time-secret handshake, chunk frames, a chunk received straight into its file,
and one sending stream (a TCP socket bound to a twin, or `ssh -W` over it).

Part of sparkpair's node program for models (see mn_main); standard library only.
"""

import fcntl
import hashlib
import hmac
import os
import select
import socket
import struct
import subprocess
import time

HEADER = struct.Struct("!IQQ")     # file id, offset, length
ACK = struct.Struct("!IQ")
BYE = 0xFFFFFFFF
MAGIC = b"SPKPAIR1"
PIPE_BYTES = 1 << 20
IO_TIMEOUT = 15.0                  # a stream that moves nothing this long is given up (its chunk goes elsewhere)
CONNECT_TIMEOUT = 5.0
HANDSHAKE_TIMEOUT = 10.0           # the whole handshake: a peer that trickles its bytes gives its slot up


def read_exact(reader, size):
    data = b""
    while len(data) < size:
        piece = reader(size - len(data))
        if not piece:
            raise ConnectionError("the peer closed the stream")
        data += piece
    return data


def prove(secret, role, nonce_r, nonce_s):
    return hmac.new(secret, role + nonce_r + nonce_s, hashlib.sha256).digest()


def server_handshake(sock, secret, seconds=HANDSHAKE_TIMEOUT):
    """Receiver side: a fresh challenge; the sender must answer with the secret's HMAC within seconds of the
    start (TimeoutError else), then we prove ours."""
    deadline = time.monotonic() + seconds

    def recv(size):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the peer did not answer the handshake in time")
        sock.settimeout(left)
        return sock.recv(size)

    nonce_r = os.urandom(16)
    sock.settimeout(seconds)
    sock.sendall(MAGIC + nonce_r)
    answer = read_exact(recv, 48)
    nonce_s, proof = answer[:16], answer[16:]
    if not hmac.compare_digest(proof, prove(secret, b"sender", nonce_r, nonce_s)):
        raise PermissionError("the peer did not prove the one-time secret")
    sock.sendall(prove(secret, b"receiver", nonce_r, nonce_s))


def client_handshake(reader, writer, secret):
    hello = read_exact(reader, len(MAGIC) + 16)
    if hello[:len(MAGIC)] != MAGIC:
        raise PermissionError("not a sparkpair receiver")
    nonce_r, nonce_s = hello[len(MAGIC):], os.urandom(16)
    writer(nonce_s + prove(secret, b"sender", nonce_r, nonce_s))
    if not hmac.compare_digest(read_exact(reader, 32), prove(secret, b"receiver", nonce_r, nonce_s)):
        raise PermissionError("the receiver did not prove the one-time secret")


def make_pipe():
    if not hasattr(os, "splice"):
        return None
    read_end, write_end = os.pipe()
    try:
        fcntl.fcntl(write_end, 1031, PIPE_BYTES)  # F_SETPIPE_SZ
    except OSError:
        pass
    return read_end, write_end


def kernel_timeouts(sock):
    """Make sock blocking with kernel-side timeouts (SO_RCVTIMEO, SO_SNDTIMEO): splice and sendfile then
    wait inside the kernel instead of polling from Python, and still give up after IO_TIMEOUT."""
    sock.settimeout(None)
    seconds = int(IO_TIMEOUT)
    value = struct.pack("ll", seconds, int((IO_TIMEOUT - seconds) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)


def receive_into(sock, fd, offset, length, pipe):
    """length bytes from sock into fd at offset: spliced through a pipe (no copy into Python) where
    the kernel allows, else read and written. A stall of IO_TIMEOUT raises TimeoutError."""
    if pipe is not None:
        read_end, write_end = pipe
        while length:
            try:
                moved = os.splice(sock.fileno(), write_end, min(length, PIPE_BYTES), flags=os.SPLICE_F_MOVE)
            except BlockingIOError:
                raise TimeoutError(f"no data for {IO_TIMEOUT:.0f} s") from None
            if moved == 0:
                raise ConnectionError("the peer closed the stream")
            written = 0
            while written < moved:
                written += os.splice(read_end, fd, moved - written, offset_dst=offset + written, flags=os.SPLICE_F_MOVE)
            offset, length = offset + moved, length - moved
        return
    buffer = memoryview(bytearray(min(length, 4 << 20) or 1))
    while length:
        count = sock.recv_into(buffer, min(length, len(buffer)))
        if count == 0:
            raise ConnectionError("the peer closed the stream")
        written = 0
        while written < count:
            written += os.pwrite(fd, buffer[written:count], offset + written)
        offset, length = offset + count, length - count


class Stream:
    """One authenticated stream to the receiver: a TCP socket bound to a twin, or `ssh -W` over it."""

    def __init__(self, target, secret):
        self.process = None
        if target.get("ssh"):
            self.process = subprocess.Popen(target["ssh"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.DEVNULL, bufsize=0)
            self.out, self.inp = self.process.stdin.fileno(), self.process.stdout.fileno()
            reader, writer = self._pipe_read, self._pipe_write
        else:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.settimeout(CONNECT_TIMEOUT)
            self.sock.bind((target["bind"], 0))
            self.sock.connect(tuple(target["connect"]))
            kernel_timeouts(self.sock)
            reader, writer = self.sock.recv, self.sock.sendall
        client_handshake(reader, writer, secret)
        self.reader, self.writer = reader, writer

    def _pipe_read(self, size):
        if not select.select([self.inp], [], [], IO_TIMEOUT)[0]:
            raise TimeoutError(f"no answer for {IO_TIMEOUT:.0f} s")
        return os.read(self.inp, size)

    def _pipe_write(self, data):
        view = memoryview(data)
        while view:
            view = view[os.write(self.out, view):]

    def send_chunk(self, handle, ident, offset, length):
        self.writer(HEADER.pack(ident, offset, length))
        if length == 0:
            pass
        elif self.process is None:
            sent = 0
            while sent < length:
                try:
                    sent += os.sendfile(self.sock.fileno(), handle.fileno(), offset + sent, length - sent)
                except BlockingIOError:
                    raise TimeoutError(f"nothing sent for {IO_TIMEOUT:.0f} s") from None
        else:
            sent = 0
            while sent < length:
                sent += os.sendfile(self.out, handle.fileno(), offset + sent, length - sent)
        if ACK.unpack(read_exact(self.reader, ACK.size)) != (ident, offset):
            raise ConnectionError("the receiver acknowledged another chunk")

    def close(self, polite):
        try:
            if polite:
                self.writer(HEADER.pack(BYE, 0, 0))
        except OSError:
            pass
        if self.process is not None:
            for end in (self.process.stdin, self.process.stdout):
                end.close()
            self.process.terminate()
            self.process.wait()
        else:
            self.sock.close()
