"""The stand-in SGLang's ranks across nodes: its own rendezvous at `--dist-init-addr`, NCCL, and the
cross-node MessageQueue, each the way SGLang 0.5.23 sets them up (the traps included).

A multi-node SGLang start (`--nnodes N --node-rank R --tp T --dist-init-addr HOST:PORT`) has one
scheduler rank per GPU; on Sparks one per node. What the stand-in does, in SGLang's order:

1. Rendezvous: node rank 0 serves torch's TCP store on PORT (every address); the other ranks connect
   to HOST:PORT and retry until they get in, silently, as a store client does. Rank 0 waits for
   all of them with no deadline. Objects are then broadcast over these connections.
2. NCCL (simengine.nccl: the bootstrap on the interface NCCL_SOCKET_IFNAME selects) and PyNccl's
   4-byte warm-up all-reduce, a barrier over the store. NCCL reads /etc/nccl.conf (the environment
   wins over it): with the IB transport (an RDMA device in the container, NCCL_IB_DISABLE not 1)
   and both NCCL_IB_USE_INLINE=1 and NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS=1, the warm-up never
   completes, so every rank hangs after `sglang is using nccl==...` (a leftover /etc/nccl.conf in an
   image froze SGLang's PyNccl warm-up on three Sparks: luxingcom/aicad-nccl-optimization#1).
3. GLOO_SOCKET_IFNAME naming an interface without an address fails as gloo does.
4. The MessageQueue (sglang/srt/distributed/device_communicators/shm_broadcast.py): rank 0 binds a
   socket on `get_local_ip_auto()` (SGLANG_HOST_IP or HOST_IP, else SGLANG_LOCAL_IP_NIC's address,
   else the source address of the route towards 8.8.8.8 (a UDP connect: no packet is sent), else
   the host name's address) and publishes it; every remote reader connects there, retrying without
   a word, as ZeroMQ does; rank 0 waits until all have subscribed. When that address is not
   reachable from the peer (the LAN or Wi-Fi address instead of the QSFP one), both ranks hang
   after `CustomAllreduce is disabled because this process group spans across nodes.` and
   `Init torch distributed ends` never prints (MiaAI-Lab/Qwen3.8-Flash-Next-Dual-DGX-Sparks#3, #9).
The MessageQueue connection then carries every engine step from rank 0 and each rank's answer
(what the scheduler's broadcast and the model's all-reduce are in the real engine).
"""

import json
import os
import socket
import time

from . import nccl
from .mpi_world import STEP, CollectiveTimeout

RETRY_SECONDS = 1.0
NCCL_CONF_FILES = ("/etc/nccl.conf", os.path.expanduser("~/.nccl.conf"))
IB_FREEZE = ("NCCL_IB_USE_INLINE", "NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS")
ROUTE_PROBE = ("8.8.8.8", 80)   # SGLang's get_local_ip_by_remote: connect() on UDP selects a source, sends nothing
MAX_MESSAGE = 1 << 20


class Channel:
    """Newline-delimited JSON over one TCP connection."""

    def __init__(self, sock):
        self.sock, self.buffer = sock, b""

    def send(self, obj):
        self.sock.sendall(json.dumps(obj).encode() + b"\n")

    def receive(self, timeout=None):
        self.sock.settimeout(timeout)
        while b"\n" not in self.buffer:
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError as error:
                raise CollectiveTimeout("a rank did not answer in time") from error
            if not chunk:
                raise ConnectionError("peer rank closed the connection")
            self.buffer += chunk
            if len(self.buffer) > MAX_MESSAGE:
                raise ConnectionError("message from a peer rank too large")
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


def connect_retrying(address):
    """Connect to ADDRESS, retrying for ever without a word (a store client, a ZeroMQ socket)."""
    while True:
        try:
            sock = socket.create_connection(address, timeout=5)
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError:
            time.sleep(RETRY_SECONDS)


def nccl_settings(env, files=NCCL_CONF_FILES):
    """NCCL's effective settings: the config files' KEY=VALUE lines, then the environment over them."""
    settings = {}
    for path in files:
        try:
            with open(path) as handle:
                lines = handle.read(MAX_MESSAGE).splitlines()
        except OSError:
            continue
        for line in lines:
            key, sep, value = line.split("#", 1)[0].strip().partition("=")
            if sep and key.startswith("NCCL_"):
                settings[key.strip()] = value.strip()
    settings.update({key: value for key, value in env.items() if key.startswith("NCCL_")})
    return settings


def ib_transport(settings, devices="/dev/infiniband"):
    """True when NCCL would use its IB (RoCE) transport: an RDMA device here and IB not disabled."""
    if settings.get("NCCL_IB_DISABLE") == "1" or settings.get("NCCL_NET", "").lower() == "socket":
        return False
    try:
        return any(name.startswith("uverbs") for name in os.listdir(devices))
    except OSError:
        return False


def warmup_freezes(settings, devices="/dev/infiniband"):
    """True when PyNccl's 4-byte warm-up never completes (IB transport with inline sends and preposted receives)."""
    return ib_transport(settings, devices) and all(settings.get(key) == "1" for key in IB_FREEZE)


def local_ip_auto(env):
    """The address SGLang's get_local_ip_auto('0.0.0.0') picks (sglang/srt/utils/network.py)."""
    chosen = env.get("SGLANG_HOST_IP") or env.get("HOST_IP")
    if chosen:
        return chosen
    nic = env.get("SGLANG_LOCAL_IP_NIC")
    if nic and (address := nccl.interface_address(nic)):
        return address
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(ROUTE_PROBE)
            return probe.getsockname()[0]
    except OSError:
        pass
    try:
        address = socket.gethostbyname(socket.gethostname())
        if address not in ("127.0.0.1", "0.0.0.0"):
            return address
    except OSError:
        pass
    return "0.0.0.0"


def gloo_problem(env):
    """gloo's failure when GLOO_SOCKET_IFNAME names an interface without an IPv4 address, else None
    (the line as tests/fixtures/logs/gloo_ifname_wrong_port__1.log shows it)."""
    name = env.get("GLOO_SOCKET_IFNAME")
    if not name or nccl.interface_address(name):
        return None
    return ("RuntimeError: [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] "
            f"ifa != nullptr. Unable to find address for: {name}")


class SglangWorld:
    """The ranks of one multi-node SGLang server (one per node), tied by the store and the MessageQueue."""

    is_mpi = False

    def __init__(self, rank, size, peers, queue=None):
        self.rank, self.size = rank, size
        self.peers = peers          # rank 0: a Channel per other rank, in rank order; others: [rank 0's]
        self.queue = queue          # MessageQueue channels once set up (same shape as peers)

    @classmethod
    def rendezvous(cls, rank, size, host, port):
        """Rank 0 serves the store on PORT and waits for every other rank; the others connect to HOST:PORT."""
        if rank == 0:
            listener = socket.create_server(("", port), backlog=size, reuse_port=False)
            joined = {}
            with listener:
                while len(joined) < size - 1:
                    conn, _ = listener.accept()
                    channel = Channel(conn)
                    joined[int(channel.receive()["rank"])] = channel
            return cls(rank, size, [joined[r] for r in sorted(joined)])
        channel = Channel(connect_retrying((host, port)))
        channel.send({"rank": rank})
        return cls(rank, size, [channel])

    def bcast_object(self, obj):
        """Broadcast a JSON-able object from rank 0 over the store."""
        if self.rank == 0:
            for channel in self.peers:
                channel.send(obj)
            return obj
        return self.peers[0].receive()

    def barrier(self):
        """Every rank arrives before any leaves (over the store)."""
        if self.rank == 0:
            for channel in self.peers:
                channel.receive()
            self.bcast_object("go")
        else:
            self.peers[0].send("here")
            self.peers[0].receive()

    def open_message_queue(self, env):
        """Rank 0 binds on local_ip_auto() and publishes it; readers connect (retrying); then READY."""
        if self.rank == 0:
            listener = socket.create_server((local_ip_auto(env), 0), backlog=self.size)
            handle = self.bcast_object(list(listener.getsockname()[:2]))
            readers = {}
            with listener:
                while len(readers) < self.size - 1:
                    conn, _ = listener.accept()
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    channel = Channel(conn)
                    readers[int(channel.receive()["subscribe"])] = channel
            self.queue = [readers[r] for r in sorted(readers)]
            for channel in self.queue:
                channel.send("READY")
            return handle
        handle = self.bcast_object(None)
        channel = Channel(connect_retrying(tuple(handle)))
        channel.send({"subscribe": self.rank})
        if channel.receive() != "READY":
            raise ConnectionError("MessageQueue: unexpected first message from the writer")
        self.queue = [channel]
        return handle

    def leader_step(self, command, step, batch, draft_len, timeout):
        """Rank 0: broadcast the step and (for STEP) collect every rank's answer within TIMEOUT."""
        for channel in self.queue or []:
            channel.send([command, step, batch, draft_len])
        if command == STEP:
            deadline = time.monotonic() + timeout
            for channel in self.queue or []:
                answer = channel.receive(max(0.0, deadline - time.monotonic()))
                if answer != [STEP, step]:
                    raise RuntimeError(f"step {step}: rank answered {answer}")

    def worker_receive(self):
        """Other ranks: the next (command, step) from rank 0."""
        message = self.queue[0].receive()
        return message[0], message[1]

    def worker_step(self, step):
        """Other ranks: their part of one step."""
        self.queue[0].send([STEP, step])

    def abort(self, code):
        """End this rank at once."""
        os._exit(code)
