"""The receiving side of a copy: listen on the twins' addresses, accept only the peer that proves the
one-time secret, write chunks into partial files, verify each whole file before it goes into blobs/,
and link the snapshots once their blobs are in place.

Part of sparkpair's node program for models (see mn_main); standard library only.
"""

import concurrent.futures
import errno
import os
import socket
import struct
import sys
import threading
import time

from mn_blobs import VerifiedCache, blob_digest, emit, link_repos, remove
from mn_wire import ACK, BYE, HEADER, kernel_timeouts, make_pipe, read_exact, receive_into, server_handshake

PART = ".sparkpair-part"            # a blob being received; never linked, removed when a copy ends


class Receiver:
    """The files of a copy arriving in chunks over any number of streams; whole files verified, kept."""

    def __init__(self, job):
        self.job, self.secret = job, bytes.fromhex(job["secret"])
        self.hub = os.path.expanduser(job["hub"])
        self.files = {f["id"]: f for f in job["files"]}
        self.got = {f["id"]: {} for f in job["files"]}  # offset -> length of the chunks written whole
        self.lock = threading.Lock()
        self.cache = VerifiedCache(job.get("cache"))
        self.stopping = threading.Event()
        self.sockets, self.refused = [], []
        self.verdicts = {}
        cores = os.cpu_count() or 2
        self.during = job.get("verify_during", cores >= 8)
        # hashing while chunks arrive takes half the cores; after the transfer, every core is free for it
        self.pool = concurrent.futures.ThreadPoolExecutor(max(1, cores // 2 if self.during else cores))
        self.pending = []
        for entry in self.files.values():
            path = self.part(entry)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as handle:
                try:
                    os.posix_fallocate(handle.fileno(), 0, entry["size"])
                except (AttributeError, OSError) as error:
                    if getattr(error, "errno", None) == errno.ENOSPC:
                        raise
                    handle.truncate(entry["size"])

    def blob(self, entry):
        return os.path.join(self.hub, entry["repo"], "blobs", entry["blob"])

    def part(self, entry):
        return self.blob(entry) + PART

    def listen(self):
        bound = []
        for address, port in self.job["listen"]:
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((address, port))
            server.listen(64)
            self.sockets.append(server)
            bound.append([address, server.getsockname()[1]])
            threading.Thread(target=self.accept, args=(server,), daemon=True).start()
        emit("listening", {"addresses": bound})

    def accept(self, server):
        while not self.stopping.is_set():
            try:
                connection, (address, _) = server.accept()
            except OSError:
                return
            if address not in self.job["peers"]:
                self.refused.append(f"{address} (not the peer)")
                connection.close()
                continue
            threading.Thread(target=self.serve, args=(connection, address), daemon=True).start()

    def serve(self, connection, address):
        kernel_timeouts(connection)
        self.sockets.append(connection)
        pipe = make_pipe()
        try:
            server_handshake(connection, self.secret)
            while not self.stopping.is_set():
                ident, offset, length = HEADER.unpack(read_exact(connection.recv, HEADER.size))
                if ident == BYE:
                    return
                entry = self.files.get(ident)
                if entry is None or offset + length > entry["size"]:
                    raise ValueError("a chunk outside the job")
                fd = os.open(self.part(entry), os.O_WRONLY)
                try:
                    receive_into(connection, fd, offset, length, pipe)
                finally:
                    os.close(fd)
                self.arrived(entry, offset, length)  # before the ack: once acked, the sender may say `end`
                connection.sendall(ACK.pack(ident, offset))
        except PermissionError as error:
            self.refused.append(f"{address} ({error})")
        except (OSError, ValueError, ConnectionError, struct.error):
            pass  # the sender sends this chunk again, on this stream or another
        finally:
            connection.close()
            for end in pipe or ():
                os.close(end)

    def arrived(self, entry, offset, length):
        with self.lock:
            chunks = self.got[entry["id"]]
            fresh = offset not in chunks
            chunks[offset] = length
            whole = fresh and sum(chunks.values()) == entry["size"]
        if whole:
            if self.during:
                self.pending.append(self.pool.submit(self.settle, entry))
            else:
                self.pending.append(entry)

    def settle(self, entry):
        """Verify a whole file; good: renamed into blobs/ and cached; bad: removed."""
        part, blob = self.part(entry), self.blob(entry)
        try:
            good = blob_digest(part, entry["blob"]) == entry["blob"]
        except OSError:
            good = False
        if good:
            os.replace(part, blob)
            self.cache.add(blob)
        else:
            remove(part)
        self.verdicts[entry["id"]] = good
        return good

    def finish(self, link):
        """Verify what arrived whole, drop partial files; with link, link the snapshots and refs."""
        self.stopping.set()
        for server in list(self.sockets):
            try:
                server.close()
            except OSError:
                pass
        started = time.monotonic()
        waiting = [item for item in self.pending if not isinstance(item, dict)]
        concurrent.futures.wait(waiting)
        later = [item for item in self.pending if isinstance(item, dict)]
        list(self.pool.map(self.settle, sorted(later, key=lambda entry: -entry["size"])))
        seconds = time.monotonic() - started
        for entry in self.files.values():
            if entry["id"] not in self.verdicts:
                remove(self.part(entry))
        self.cache.save()
        linked = link_repos(self.hub, self.job.get("repos", {})) if link else {}
        bad = [self.files[i]["blob"] for i, good in self.verdicts.items() if not good]
        kept = [self.files[i]["blob"] for i, good in self.verdicts.items() if good]
        missing = [entry["blob"] for entry in self.files.values() if entry["id"] not in self.verdicts]
        emit("result", {"verified": kept, "bad": bad, "missing": missing, "refused": self.refused,
                        "verify_seconds": round(seconds, 3), "linked": linked})


def receive(job):
    receiver = Receiver(job)
    receiver.listen()
    line = sys.stdin.readline()  # "end" once the sender is done; end of input: the operator is gone
    receiver.finish(link=line.strip() == "end")
