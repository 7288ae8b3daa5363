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

from mn_blobs import VerifiedCache, emit, fd_digest, identity, is_blob_name, is_repo_folder
from mn_links import link_repos, open_under
from mn_wire import ACK, BYE, HANDSHAKE_TIMEOUT, HEADER, kernel_timeouts, make_pipe, read_exact, receive_into, server_handshake

PART = ".sparkpair-part"            # a blob being received; never linked, removed when a copy ends
MAX_CONNECTIONS = 32                # streams served at once; more wait (in the listen backlog) for a slot
MAX_REFUSED = 20                    # refusals kept for the result: a flood of them is not
CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class Receiver:
    """The files of a copy arriving in chunks over any number of streams; whole files verified, kept.

    Each partial file is made afresh in its repo's blobs/ (opened as a folder fd, never through a symlink):
    whatever stood at its name is removed, then O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600; every later open is
    O_NOFOLLOW and must find the same inode. At most max_connections streams are served at once, and each
    must prove the one-time secret within handshake_timeout."""

    def __init__(self, job):
        self.job, self.secret = job, bytes.fromhex(job["secret"])
        self.hub = os.path.expanduser(job["hub"])
        self.files = {f["id"]: f for f in job["files"]}
        for entry in self.files.values():
            if not is_repo_folder(entry["repo"]) or not is_blob_name(entry["blob"]) or entry["size"] < 0:
                raise ValueError(f"file {entry['id']} of the job is not a blob of a repo in the hub")
        self.got = {f["id"]: {} for f in job["files"]}  # offset -> length of the chunks written whole
        self.lock = threading.Lock()
        self.cache = VerifiedCache(job.get("cache"))
        self.stopping = threading.Event()
        self.servers, self.sockets, self.refused = [], set(), []
        self.slots = threading.BoundedSemaphore(job.get("max_connections") or MAX_CONNECTIONS)
        self.handshake_timeout = job.get("handshake_timeout") or HANDSHAKE_TIMEOUT
        self.verdicts = {}
        cores = os.cpu_count() or 2
        self.during = job.get("verify_during", cores >= 8)
        # hashing while chunks arrive takes half the cores; after the transfer, every core is free for it
        self.pool = concurrent.futures.ThreadPoolExecutor(max(1, cores // 2 if self.during else cores))
        self.pending = []
        mask = os.umask(0o022)
        os.umask(mask)
        self.blob_mode = 0o666 & ~mask      # a verified blob is readable as huggingface_hub would leave it
        self.folders = {repo: open_under(self.hub, [repo, "blobs"], create=True)
                        for repo in sorted({entry["repo"] for entry in self.files.values()})}
        self.inodes = {entry["id"]: self.make_part(entry) for entry in self.files.values()}

    def make_part(self, entry):
        """Make the partial file afresh (see the class); its (device, inode)."""
        folder, name = self.folders[entry["repo"]], entry["blob"] + PART
        try:
            os.unlink(name, dir_fd=folder)
        except FileNotFoundError:
            pass
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | CLOEXEC, 0o600, dir_fd=folder)
        try:
            try:
                os.posix_fallocate(fd, 0, entry["size"])
            except (AttributeError, OSError) as error:
                if getattr(error, "errno", None) == errno.ENOSPC:
                    raise
                os.ftruncate(fd, entry["size"])
            info = os.fstat(fd)
        finally:
            os.close(fd)
        return info.st_dev, info.st_ino

    def open_part(self, entry, flags):
        """An fd of the partial file this receiver made; OSError when its name is a symlink or another file now."""
        fd = os.open(entry["blob"] + PART, flags | os.O_NOFOLLOW | CLOEXEC, dir_fd=self.folders[entry["repo"]])
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != self.inodes[entry["id"]]:
            os.close(fd)
            raise OSError(errno.ESTALE, "the partial file was replaced")
        return fd

    def remove_part(self, entry):
        try:
            os.unlink(entry["blob"] + PART, dir_fd=self.folders[entry["repo"]])
        except FileNotFoundError:
            pass

    def blob(self, entry):
        return os.path.join(self.hub, entry["repo"], "blobs", entry["blob"])

    def listen(self):
        bound = []
        for address, port in self.job["listen"]:
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((address, port))
            server.listen(64)
            self.servers.append(server)
            bound.append([address, server.getsockname()[1]])
            threading.Thread(target=self.accept, args=(server,), daemon=True).start()
        emit("listening", {"addresses": bound})

    def accept(self, server):
        """Accept the peers' connections; each waits for a free slot before it is served (the next ones wait
        in the listen backlog meanwhile); others are refused."""
        while not self.stopping.is_set():
            try:
                connection, (address, _) = server.accept()
            except OSError:
                return
            if address not in self.job["peers"]:
                self.refuse(f"{address} (not the peer)")
                connection.close()
                continue
            while not self.slots.acquire(timeout=0.5):
                if self.stopping.is_set():
                    connection.close()
                    return
            with self.lock:
                self.sockets.add(connection)
            threading.Thread(target=self.serve, args=(connection, address), daemon=True).start()

    def refuse(self, reason):
        with self.lock:
            if len(self.refused) < MAX_REFUSED:
                self.refused.append(reason)

    def serve(self, connection, address):
        pipe = None
        try:
            server_handshake(connection, self.secret, self.handshake_timeout)
            kernel_timeouts(connection)
            pipe = make_pipe()
            while not self.stopping.is_set():
                ident, offset, length = HEADER.unpack(read_exact(connection.recv, HEADER.size))
                if ident == BYE:
                    return
                entry = self.files.get(ident)
                if entry is None or offset + length > entry["size"]:
                    raise ValueError("a chunk outside the job")
                fd = self.open_part(entry, os.O_WRONLY)
                try:
                    receive_into(connection, fd, offset, length, pipe)
                finally:
                    os.close(fd)
                self.arrived(entry, offset, length)  # before the ack: once acked, the sender may say `end`
                connection.sendall(ACK.pack(ident, offset))
        except PermissionError as error:
            self.refuse(f"{address} ({error})")
        except (OSError, ValueError, ConnectionError, struct.error):
            pass  # the sender sends this chunk again, on this stream or another
        finally:
            with self.lock:
                self.sockets.discard(connection)
            connection.close()
            for end in pipe or ():
                os.close(end)
            self.slots.release()

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
        """Verify a whole file; good: renamed into blobs/ and cached; bad: removed. What lands in blobs/ must be
        the file that was hashed (its device and inode, unwritten since): a part file swapped or written while it
        was verified is taken out again, never kept or recorded."""
        folder, name = self.folders[entry["repo"]], entry["blob"]
        found = None
        try:
            fd = self.open_part(entry, os.O_RDONLY)
            try:
                before = os.fstat(fd)
                good = fd_digest(fd, name) == name and identity(os.fstat(fd)) == identity(before)
                if good:
                    os.fchmod(fd, self.blob_mode)
                    os.replace(name + PART, name, src_dir_fd=folder, dst_dir_fd=folder)
                    landed, now = os.stat(name, dir_fd=folder, follow_symlinks=False), os.fstat(fd)
                    if (landed.st_dev, landed.st_ino, now.st_size, now.st_mtime_ns) == \
                            (now.st_dev, now.st_ino, before.st_size, before.st_mtime_ns):
                        found = identity(now)
                    else:
                        os.unlink(name, dir_fd=folder)  # not the file hashed: it does not stay under the blob's name
            finally:
                os.close(fd)
        except OSError:
            found = None
        if found is not None:
            self.cache.add(self.blob(entry), found)
        else:
            self.remove_part(entry)
        self.verdicts[entry["id"]] = found is not None
        return found is not None

    def finish(self, link):
        """Verify what arrived whole, drop partial files; with link, link the snapshots and refs."""
        self.stopping.set()
        with self.lock:
            sockets = list(self.sockets)
        for server in self.servers + sockets:
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
                self.remove_part(entry)
        self.cache.save()
        linked, refused_links = link_repos(self.hub, self.job.get("repos", {})) if link else ({}, {})
        bad = [self.files[i]["blob"] for i, good in self.verdicts.items() if not good]
        kept = [self.files[i]["blob"] for i, good in self.verdicts.items() if good]
        missing = [entry["blob"] for entry in self.files.values() if entry["id"] not in self.verdicts]
        emit("result", {"verified": kept, "bad": bad, "missing": missing, "refused": self.refused,
                        "verify_seconds": round(seconds, 3), "linked": linked, "refused_links": refused_links})


def receive(job):
    receiver = Receiver(job)
    receiver.listen()
    line = sys.stdin.readline()  # "end" once the sender is done; end of input: the operator is gone
    receiver.finish(link=line.strip() == "end")
