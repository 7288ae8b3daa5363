"""The sending side of a copy: the files' chunks, largest file first, taken by every stream of every twin;
a failed stream's chunk goes back to the others.

Part of sparkpair's node program for models (see mn_main); standard library only.
"""

import os
import struct
import sys
import threading
import time
from collections import deque

from mn_blobs import emit, is_blob_name, is_repo_folder
from mn_wire import Stream


class Sender:
    """Chunks of the job's files, largest file first, taken by every stream of every twin."""

    def __init__(self, job):
        self.job, self.secret = job, bytes.fromhex(job["secret"])
        self.hub = os.path.expanduser(job["hub"])
        size = job.get("chunk") or (32 << 20)
        self.queue = deque((f["id"], offset, min(size, f["size"] - offset))
                           for f in sorted(job["files"], key=lambda f: -f["size"])
                           for offset in range(0, max(f["size"], 1), size))
        self.files = {f["id"]: f for f in job["files"]}
        for entry in self.files.values():
            if not is_repo_folder(entry["repo"]) or not is_blob_name(entry["blob"]):
                raise ValueError(f"file {entry['id']} of the job is not a blob of a repo in the hub")
        self.flying, self.lock, self.changed = 0, threading.Lock(), threading.Condition(threading.Lock())
        self.sent = {target["name"]: 0 for target in job["targets"]}
        self.by_repo = {}
        self.errors, self.aborted = [], threading.Event()
        self.first = self.last = None

    def take(self):
        """The next chunk, or None when nothing is left that this stream could still take."""
        with self.changed:
            while not self.queue and self.flying and not self.aborted.is_set():
                self.changed.wait(1.0)
            if not self.queue or self.aborted.is_set():
                return None
            self.flying += 1
            return self.queue.popleft()

    def settle(self, chunk, done, target):
        with self.changed:
            self.flying -= 1
            if done:
                entry = self.files[chunk[0]]
                self.sent[target] += chunk[2]
                self.by_repo[entry["repo"]] = self.by_repo.get(entry["repo"], 0) + chunk[2]
                self.last = time.monotonic()
            else:
                self.queue.appendleft(chunk)
            self.changed.notify_all()

    def stream(self, target):
        failures, stream, handles = 0, None, {}
        while not self.aborted.is_set():
            chunk = self.take()
            if chunk is None:
                break
            try:
                if stream is None:
                    stream = Stream(target, self.secret)
                    self.first = self.first or time.monotonic()
                entry = self.files[chunk[0]]
                if entry["id"] not in handles:
                    handles[entry["id"]] = self.open_blob(entry)
                stream.send_chunk(handles[entry["id"]], *chunk)
                self.settle(chunk, True, target["name"])
                failures = 0
            except PermissionError as error:
                self.settle(chunk, False, target["name"])
                self.errors.append(f"{target['name']}: {error}")
                break
            except (OSError, ConnectionError, struct.error, ValueError) as error:
                self.settle(chunk, False, target["name"])
                failures += 1
                if stream is not None:
                    stream.close(False)
                    stream = None
                if failures >= 3:
                    self.errors.append(f"{target['name']}: {error or type(error).__name__}")
                    break
                time.sleep(0.5 * failures)
        if stream is not None:
            stream.close(True)
        for handle in handles.values():
            handle.close()

    def open_blob(self, entry):
        """The blob to send, opened without following a symlink planted at its name."""
        path = os.path.join(self.hub, entry["repo"], "blobs", entry["blob"])
        return os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)), "rb")

    def report(self):
        while not self.aborted.wait(0.5):
            emit("progress", {"sent": dict(self.sent), "repos": dict(self.by_repo)})

    def run(self):
        started = time.monotonic()
        threading.Thread(target=self.report, daemon=True).start()
        threading.Thread(target=self.watch_input, daemon=True).start()
        threads = [threading.Thread(target=self.stream, args=(target,), daemon=True)
                   for target in self.job["targets"] for _ in range(self.job.get("streams", 4))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        left = len(self.queue)
        emit("progress", {"sent": dict(self.sent), "repos": dict(self.by_repo)})
        self.aborted.set()
        first, last = self.first or started, self.last or started
        emit("result", {"ok": left == 0 and self.flying == 0, "sent": self.sent, "chunks_left": left,
                        "seconds": round(max(0.0, last - first), 4), "errors": self.errors[:8],
                        "streams": len(threads)})

    def watch_input(self):
        sys.stdin.read()  # the operator closes the channel: stop at once
        self.aborted.set()
        with self.changed:
            self.changed.notify_all()
