"""Blobs of the HF cache on a node: hashing in parallel against their names, the node's cache of verified
blobs, snapshot links (checking them; mn_links makes them), and the bytes under blobs/ while a download runs.

Part of sparkpair's node program for models (see mn_main); standard library only.
"""

import errno
import fcntl
import hashlib
import json
import os
import stat
import sys
import threading
import time
from collections import deque

HEX = frozenset("0123456789abcdef")


def is_blob_name(name):
    """A blob's name is its hash: 40 (git blob sha1) or 64 (sha256) lowercase hex digits. (No `re`: the
    verify command starts on every doctor run, and importing re costs it about 8 ms.)"""
    return isinstance(name, str) and len(name) in (40, 64) and HEX.issuperset(name)


# Characters no snapshot path, repo folder or revision holds: control characters (C0, DEL, C1), line and
# direction marks, and the surrogates a name that is not UTF-8 decodes to (sparkpair.probes.models.UNSAFE_CHARS).
UNSAFE = frozenset([chr(c) for c in range(0x20)] + [chr(c) for c in range(0x7F, 0xA0)] +
                   ["\u061c", "\u200e", "\u200f"] + [chr(c) for c in range(0x2028, 0x202F)] +
                   [chr(c) for c in range(0x2066, 0x206A)] + [chr(c) for c in range(0xDC80, 0xDD00)])


def is_repo_folder(name):
    """A repo's folder in the hub: models--org--name, one path component, nothing unsafe in it."""
    return isinstance(name, str) and name.startswith("models--") and "/" not in name and \
        name not in (".", "..") and not UNSAFE.intersection(name)


READ = 8 << 20
_print_lock = threading.Lock()


def emit(kind, value):
    with _print_lock:
        sys.stdout.write(kind + " " + json.dumps(value, sort_keys=True) + "\n")
        sys.stdout.flush()


def blob_digest(path, name):
    """The digest a blob's name must equal: sha256 (64 hex, LFS), else the git blob sha1 (40 hex)."""
    with open(path, "rb", buffering=0) as handle:
        return fd_digest(handle.fileno(), name)


def fd_digest(fd, name):
    """blob_digest of the file open as fd (read from its start)."""
    size = os.fstat(fd).st_size
    digest = hashlib.sha256() if len(name) == 64 else hashlib.sha1(b"blob %d\0" % size)
    offset = 0
    while True:
        data = os.pread(fd, READ, offset)
        if not data:
            return digest.hexdigest()
        digest.update(data)
        offset += len(data)


def identity(info):
    """What a verified blob is recorded as: [device, inode, size, mtime_ns, ctime_ns] of the file that was read
    (an os.stat_result taken from its descriptor). Another file at the path, or any write to it (ctime moves
    even when mtime is put back), is another identity."""
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def open_blob(path):
    """A read-only descriptor of the regular file at path, never through a symlink and never waiting on a FIFO
    or a device; OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return fd


def hash_blob(path, name):
    """(verdict, identity) of the blob at path hashed through one descriptor: verdict None (good) or a reason;
    identity that of the file read, or None when it changed while it was read (verdict "unverified")."""
    fd = open_blob(path)
    try:
        before = os.fstat(fd)
        found = fd_digest(fd, name)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if identity(before) != identity(after):
        return "unverified", None
    return (None if found == name else f"content hashes to {found[:12]}"), identity(after)


class VerifiedCache:
    """Per node: blob path -> the identity (`identity`) of the file found good there, recorded from the
    descriptor that was hashed, as each file finished."""

    def __init__(self, path):
        self.path = os.path.expanduser(path) if path else ""
        self.entries = self._read()
        self.dropped = set()
        self.lock = threading.Lock()

    def _read(self):
        try:
            with open(self.path) as handle:
                data = json.load(handle)
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError, RecursionError):
            return {}

    def holds(self, path):
        """Whether the file at path (not followed if a link) is the very file found good there."""
        try:
            return self.entries.get(path) == identity(os.lstat(path))
        except OSError:
            return False

    def add(self, path, found):
        """Record path as good: found is the identity of the file that was hashed (from its descriptor)."""
        with self.lock:
            self.entries[path] = found
            self.dropped.discard(path)

    def drop(self, path):
        with self.lock:
            self.entries.pop(path, None)
            self.dropped.add(path)

    def save(self):
        """Merge into the file under a lock (another run may have written it meanwhile), atomically."""
        if not self.path:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            on_disk = self._read()
            merged = dict(on_disk)
            merged.update(self.entries)
            for path in self.dropped:
                merged.pop(path, None)
            merged = {path: value for path, value in merged.items() if os.path.exists(path)}
            if merged == on_disk:
                return  # nothing new: the file is left as it is (the probe's listing holds its stat)
            temp = f"{self.path}.{os.getpid()}.tmp"
            with open(temp, "w") as handle:
                json.dump(merged, handle, sort_keys=True)
            os.replace(temp, self.path)


def hash_files(items, workers, on_bytes=None, deadline=None, cache=None):
    """{path: (name, verdict)} for [(path, name)] hashed in parallel, largest first; verdict None (good),
    a reason, or "unverified" when the deadline came first or the file changed while it was read. Each good
    file is recorded in cache as it finishes, by the identity of what was read."""
    sizes = {path: os.path.getsize(path) for path, _ in items}
    items = sorted(items, key=lambda item: -sizes[item[0]])
    results, lock = {}, threading.Lock()
    queue = deque(items)

    def work():
        while True:
            with lock:
                if not queue:
                    return
                path, name = queue.popleft()
            if deadline is not None and time.monotonic() > deadline:
                results[path] = (name, "unverified")
                continue
            try:
                verdict, found = hash_blob(path, name)
            except OSError as error:
                verdict, found = f"unreadable ({error.strerror})", None
            if verdict is None and cache is not None:
                cache.add(path, found)
            results[path] = (name, verdict)
            if on_bytes is not None:
                on_bytes(sizes[path])

    threads = [threading.Thread(target=work, daemon=True) for _ in range(max(1, min(workers, len(items))))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def snapshot_links(repo_dir):
    """(snapshot path, blob name or None, problem) for every entry under snapshots/."""
    found = []
    top = os.path.join(repo_dir, "snapshots")
    for base, _, files in os.walk(top):
        for name in files:
            path = os.path.join(base, name)
            relative = os.path.relpath(path, top)
            target = os.readlink(path) if os.path.islink(path) else None
            resolved = os.path.normpath(os.path.join(base, target)) if target else ""
            blob = os.path.basename(resolved)
            if target is None or os.path.dirname(resolved) != os.path.join(repo_dir, "blobs") or not is_blob_name(blob):
                found.append((relative, None, "not a link to a blob"))
            else:
                found.append((relative, blob, None if os.path.isfile(resolved) else "its blob is missing"))
    return found


def verify(options):
    """Verify the repos' blobs and links; print the verdicts (and progress when asked)."""
    started = time.monotonic()
    hub, cache = os.path.expanduser(options["hub"]), VerifiedCache(options.get("cache"))
    budget = options.get("budget")
    deadline = started + budget if budget else None
    todo, report = [], {}
    for repo in options["repos"]:
        repo_dir = os.path.join(hub, repo)
        blobs_dir = os.path.join(repo_dir, "blobs")
        names = [n for n in (os.listdir(blobs_dir) if os.path.isdir(blobs_dir) else []) if is_blob_name(n)]
        report[repo] = {"blobs": len(names), "bad": {}, "unverified": [], "links": []}
        for name in names:
            path = os.path.join(blobs_dir, name)
            if not cache.holds(path):
                todo.append((path, name))
    total, done = sum(os.path.getsize(path) for path, _ in todo), [0]
    lock = threading.Lock()
    if options.get("progress"):
        emit("progress", {"done": 0, "total": total})

    def counted(size):
        with lock:
            done[0] += size
            if options.get("progress"):
                emit("progress", {"done": done[0], "total": total})

    results = hash_files(todo, options.get("workers") or os.cpu_count() or 2, counted, deadline, cache)
    for path, (name, verdict) in results.items():
        repo = os.path.basename(os.path.dirname(os.path.dirname(path)))
        if verdict is None:
            continue
        if verdict == "unverified":
            report[repo]["unverified"].append(name)
        else:
            report[repo]["bad"][name] = verdict
            cache.drop(path)
    for repo in options["repos"]:
        repo_dir = os.path.join(hub, repo)
        for relative, blob, problem in snapshot_links(repo_dir):
            if problem is None and blob in report[repo]["bad"]:
                problem = "its blob is corrupt"
            if problem:
                report[repo]["links"].append([relative, problem])
        if options.get("remove_bad"):  # the snapshot links stay, dangling: the repo reads as incomplete until refetched
            for name in report[repo]["bad"]:
                remove(os.path.join(repo_dir, "blobs", name))
    cache.save()
    blobs = sum(r["blobs"] for r in report.values())
    emit("result", {"repos": report, "hashed_bytes": done[0] if todo else 0, "cached": blobs - len(todo),
                    "seconds": round(time.monotonic() - started, 3)})
    keep_result(options.get("result"), os.environ.get("SPARKPAIR_VERIFY_KEY"), report, blobs)


def keep_result(path, key, report, blobs):
    """Remember a clean verdict under key (the listing of the repos and of the cache file, taken by the probe
    before this run): the probe prints it again without starting Python for as long as its listing is the same.
    It is remembered as the next run would print it (everything vouched for by the cache); an unclean verdict
    is forgotten."""
    if not path or not key:
        return
    path = os.path.expanduser(path)
    if any(r["bad"] or r["unverified"] or r["links"] for r in report.values()):
        remove(path)
        return
    line = "result " + json.dumps({"repos": report, "hashed_bytes": 0, "cached": blobs, "seconds": 0.0}, sort_keys=True)
    temp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temp, "w") as handle:
            handle.write(key + "\n" + line + "\n")
        os.replace(temp, path)
    except OSError:
        remove(temp)


def remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def watch(options):
    """Print the bytes under the blob directories every interval, and once more when told to stop
    (SIGTERM), until the parent shell is gone."""
    import signal

    def measure():
        total = 0
        for directory in options["dirs"]:
            try:
                total += sum(entry.stat().st_size for entry in os.scandir(os.path.expanduser(directory))
                             if entry.is_file(follow_symlinks=False))
            except OSError:
                pass
        emit("progress", {"bytes": total})

    def last(signum, frame):
        measure()
        sys.exit(0)

    signal.signal(signal.SIGTERM, last)
    parent = os.getppid()
    while os.getppid() == parent:
        measure()
        time.sleep(options.get("interval", 1.0))
