"""NCCL's communicator set-up between the ranks, over sockets as NCCL's bootstrap does it.

Rank 0 listens on an address of the interface ``NCCL_SOCKET_IFNAME`` selects (NCCL's rules:
comma list of prefixes, ``=`` exact, ``^`` excludes; unset: the first interface that is not
loopback or docker) and hands it to the other ranks through MPI, as TensorRT-LLM broadcasts
NCCL's unique id. Every other rank connects there and starts with NCCL's socket magic
(``NCCL_SOCKET_MAGIC``, 8 bytes little-endian), then its rank; rank 0 answers each once all have
joined. The waits have no timeout, as NCCL's do: a handshake that never arrives (a peer that is
gone, traffic that is dropped on the way) leaves every rank alive and waiting in "Init START".
With ``NCCL_DEBUG=INFO`` the ranks print NCCL's INFO lines (``NCCL_DEBUG=VERSION``: only the
version line); otherwise NCCL says nothing.
"""

import fcntl
import os
import secrets
import socket
import struct
import sys

from .node_checks import _interface_matches

NCCL_SOCKET_MAGIC = 0x564AB9F2FC4B9D6C
NCCL_VERSION = "2.28.9+cuda13.0"
SIOCGIFADDR = 0x8915
HELLO = struct.Struct("<QI")   # magic, rank
ANSWER = struct.Struct("<Q")   # magic


def interface_address(name):
    """The IPv4 address of interface name, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            raw = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(raw[20:24])


def bootstrap_interface(env):
    """(interface, address) NCCL's bootstrap uses on this node, or None when none qualifies."""
    names = [name for _, name in socket.if_nameindex()]
    spec = env.get("NCCL_SOCKET_IFNAME", "")
    if spec:
        candidates = _interface_matches(spec, names)
    else:
        candidates = [n for n in names if n != "lo" and not n.startswith("docker")] + ["lo"]
    for name in candidates:
        address = interface_address(name)
        if address:
            return name, address
    return None


class NcclLog:
    """NCCL's own lines for one rank (``HOST:PID:TID [DEV] NCCL INFO ...``), as NCCL_DEBUG asks."""

    def __init__(self, env):
        self.level = env.get("NCCL_DEBUG", "").upper()
        self.prefix = f"{socket.gethostname()}:{os.getpid()}:{os.getpid()} [0] NCCL INFO "

    def info(self, text):
        if self.level in ("INFO", "TRACE"):
            print(self.prefix + text, file=sys.stderr, flush=True)

    def version(self):
        if self.level in ("INFO", "TRACE"):
            self.info(f"NCCL version {NCCL_VERSION}")
        elif self.level == "VERSION":
            print(f"NCCL version {NCCL_VERSION}", file=sys.stderr, flush=True)


def _receive(sock, size):
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise RuntimeError("NCCL error: remote process exited or there was a network error")
        data += chunk
    return data


def init_communicator(world, env):
    """Set up the ranks' communicator (every rank calls it; a one-rank world has nothing to set up)."""
    if world.size < 2:
        return
    nccl = NcclLog(env)
    if env.get("NCCL_SOCKET_IFNAME"):
        nccl.info(f"NCCL_SOCKET_IFNAME set to {env['NCCL_SOCKET_IFNAME']}")
    nccl.version()
    chosen = bootstrap_interface(env)
    if chosen is None:
        raise RuntimeError("NCCL error: unhandled system error (no socket interface for the bootstrap)")
    nccl.info(f"Bootstrap : Using {chosen[0]}:{chosen[1]}<0>")
    listener = None
    if world.rank == 0:
        listener = socket.create_server((chosen[1], 0), backlog=world.size)
    root = world.bcast_object((chosen[1], listener.getsockname()[1]) if listener else None)
    comm_id = world.bcast_object(secrets.randbits(64) if world.rank == 0 else None)
    described = (f"ncclCommInitRankConfig comm 0x{secrets.randbits(48):x} rank {world.rank} nranks {world.size} "
                 f"cudaDev 0 nvmlDev 0 busId f01000 commId 0x{comm_id:016x}")
    nccl.info(f"{described} - Init START")
    if listener is not None:
        peers = []
        with listener:
            for _ in range(world.size - 1):
                peer, _address = listener.accept()
                magic, _rank = HELLO.unpack(_receive(peer, HELLO.size))
                if magic != NCCL_SOCKET_MAGIC:
                    raise RuntimeError("NCCL error: socket magic mismatch at bootstrap")
                peers.append(peer)
        for peer in peers:
            with peer:
                peer.sendall(ANSWER.pack(NCCL_SOCKET_MAGIC))
    else:
        with socket.create_connection(root) as peer:
            peer.sendall(HELLO.pack(NCCL_SOCKET_MAGIC, world.rank))
            _receive(peer, ANSWER.size)
    nccl.info(f"{described} - Init COMPLETE")
