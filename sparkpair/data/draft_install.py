"""Put an exported checkpoint (a trained draft, or the hidden states of offline training) into a node's Hugging
Face cache as a repo; run on the node with its own python3 (`python3 - STAGING HUB REPO_FOLDER [MAX_FILES]`
with this file on stdin), standard library only, never imported by sparkpair itself (`draft.export` sends it).

STAGING holds the files (regular files only, names of letters, digits, '.', '_', '-', not starting with '.');
each goes into HUB/REPO_FOLDER/blobs/<sha256> (written to a new file opened with O_EXCL|O_NOFOLLOW, flushed,
then renamed in; a blob already there is kept), the snapshot HUB/REPO_FOLDER/snapshots/<commit>/<name> links
`../../blobs/<sha256>` as huggingface_hub makes them, and refs/main names <commit> (the sha1 of the listing:
new content, new snapshot). Every folder under HUB (the operator's own path) is opened without following a
symlink and every file is made through those folder fds, so a `blobs`, `refs` or `snapshots` planted as a
symlink is refused and nothing is written through it. Prints one JSON line:
{"commit": ..., "files": {name: [sha256, size]}}. Any refusal: one line on stderr, exit 1.
"""
import errno
import hashlib
import json
import os
import stat
import sys

NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
CHUNK = 1 << 20
MAX_FILES = 64
MAX_FILES_LIMIT = 1000000
FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
READ = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def refuse(message):
    sys.stderr.write("draft-install: " + message + "\n")
    sys.exit(1)


def safe_name(name):
    return 0 < len(name) <= 128 and set(name) <= NAME_CHARS and not name.startswith(".")


def open_folder(parent, name, shown):
    """The fd of folder NAME under the folder fd PARENT, made when missing, never through a symlink."""
    try:
        os.mkdir(name, 0o755, dir_fd=parent)
    except FileExistsError:
        pass
    try:
        return os.open(name, FOLDER, dir_fd=parent)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            refuse(shown + ": a symlink or not a folder; sparkpair writes nothing through it")
        raise


def hash_file(staging, name):
    fd = os.open(name, READ, dir_fd=staging)
    digest, size = hashlib.sha256(), 0
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            refuse(name + ": not a regular file")
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def copy_blob(staging, name, blobs, sha):
    try:
        os.stat(sha, dir_fd=blobs, follow_symlinks=False)
        return
    except FileNotFoundError:
        pass
    partial = sha + ".incomplete-" + str(os.getpid())
    out = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=blobs)
    with os.fdopen(out, "wb") as target, os.fdopen(os.open(name, READ, dir_fd=staging), "rb") as handle:
        while chunk := handle.read(CHUNK):
            target.write(chunk)
        target.flush()
        os.fsync(target.fileno())
    os.replace(partial, sha, src_dir_fd=blobs, dst_dir_fd=blobs)


def place_link(snapshot, name, wanted):
    try:
        if os.readlink(name, dir_fd=snapshot) == wanted:
            return
    except OSError:
        pass
    temp = ".sparkpair-link." + str(os.getpid())
    try:
        os.unlink(temp, dir_fd=snapshot)
    except FileNotFoundError:
        pass
    os.symlink(wanted, temp, dir_fd=snapshot)
    os.replace(temp, name, src_dir_fd=snapshot, dst_dir_fd=snapshot)


def write_ref(refs, commit):
    partial = "main.incomplete-" + str(os.getpid())
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=refs)
    with os.fdopen(fd, "w") as handle:
        handle.write(commit)
    os.replace(partial, "main", src_dir_fd=refs, dst_dir_fd=refs)


def main(staging_path, hub, folder, max_files=MAX_FILES):
    if not folder.startswith("models--") or "/" in folder or ".." in folder or not safe_name(folder):
        refuse(folder + ": not a model repo folder")
    staging = os.open(staging_path, FOLDER)
    names = sorted(os.listdir(staging))
    if not names or len(names) > max_files:
        refuse(staging_path + ": " + str(len(names)) + " files (expected 1 to " + str(max_files) + ")")
    files = {}
    for name in names:
        if not safe_name(name):
            refuse(staging_path + ": file name " + json.dumps(name) + " refused")
        files[name] = hash_file(staging, name)
    listing = "".join(name + " " + files[name][0] + "\n" for name in names)
    commit = hashlib.sha1(("sparkpair-train-draft\n" + listing).encode()).hexdigest()
    os.makedirs(hub, exist_ok=True)
    top = os.open(hub, os.O_RDONLY | os.O_DIRECTORY)
    repo = open_folder(top, folder, folder)
    blobs = open_folder(repo, "blobs", folder + "/blobs")
    refs = open_folder(repo, "refs", folder + "/refs")
    snapshots = open_folder(repo, "snapshots", folder + "/snapshots")
    snapshot = open_folder(snapshots, commit, folder + "/snapshots/" + commit)
    for name in names:
        sha, _ = files[name]
        copy_blob(staging, name, blobs, sha)
        place_link(snapshot, name, "../../blobs/" + sha)
    write_ref(refs, commit)
    print(json.dumps({"commit": commit, "files": files}))


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        refuse("usage: python3 - STAGING HUB REPO_FOLDER [MAX_FILES]")
    limit = sys.argv[4] if len(sys.argv) == 5 else str(MAX_FILES)
    if not limit.isdigit() or not 1 <= int(limit) <= MAX_FILES_LIMIT:
        refuse("MAX_FILES " + json.dumps(limit[:20]) + ": expected 1 to " + str(MAX_FILES_LIMIT))
    try:
        main(*sys.argv[1:4], max_files=int(limit))
    except OSError as error:  # a symlink (ELOOP), a vanished file, a full disk: one line, never a traceback
        refuse(str(error.filename or "") + ": " + str(error.strerror or error))
