"""Put an exported draft checkpoint into a node's Hugging Face cache as a repo; run on the node with its
own python3 (`python3 - STAGING HUB REPO_FOLDER` with this file on stdin), standard library only, never
imported by sparkpair itself (`draft.export` sends it).

STAGING holds the checkpoint's files (regular files only, names of letters, digits, '.', '_', '-', not
starting with '.'); each goes into HUB/REPO_FOLDER/blobs/<sha256> (written to a new file opened with
O_EXCL|O_NOFOLLOW, flushed, then renamed in; a blob already there is kept), the snapshot
HUB/REPO_FOLDER/snapshots/<commit>/<name> links `../../blobs/<sha256>` as huggingface_hub makes them,
and refs/main names <commit> (the sha1 of the listing: new content, new snapshot). Prints one JSON line:
{"commit": ..., "files": {name: [sha256, size]}}. Any refusal: one line on stderr, exit 1.
"""
import hashlib
import json
import os
import stat
import sys

NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
CHUNK = 1 << 20
MAX_FILES = 64


def refuse(message):
    sys.stderr.write("draft-install: " + message + "\n")
    sys.exit(1)


def safe_name(name):
    return 0 < len(name) <= 128 and set(name) <= NAME_CHARS and not name.startswith(".")


def hash_file(path):
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    digest, size = hashlib.sha256(), 0
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            refuse(path + ": not a regular file")
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def copy_blob(source, blob):
    if os.path.lexists(blob):
        return
    partial = blob + ".incomplete-" + str(os.getpid())
    out = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(out, "wb") as target, os.fdopen(os.open(source, os.O_RDONLY | os.O_NOFOLLOW), "rb") as handle:
        while chunk := handle.read(CHUNK):
            target.write(chunk)
        target.flush()
        os.fsync(target.fileno())
    os.rename(partial, blob)


def main(staging, hub, folder):
    if not folder.startswith("models--") or "/" in folder or ".." in folder:
        refuse(folder + ": not a model repo folder")
    names = sorted(os.listdir(staging))
    if not names or len(names) > MAX_FILES:
        refuse(staging + ": " + str(len(names)) + " files (expected 1 to " + str(MAX_FILES) + ")")
    files = {}
    for name in names:
        if not safe_name(name):
            refuse(staging + ": file name " + json.dumps(name) + " refused")
        files[name] = hash_file(os.path.join(staging, name))
    listing = "".join(name + " " + files[name][0] + "\n" for name in names)
    commit = hashlib.sha1(("sparkpair-train-draft\n" + listing).encode()).hexdigest()
    repo = os.path.join(hub, folder)
    for sub in ("blobs", "refs", os.path.join("snapshots", commit)):
        os.makedirs(os.path.join(repo, sub), exist_ok=True)
    for name in names:
        sha, _ = files[name]
        copy_blob(os.path.join(staging, name), os.path.join(repo, "blobs", sha))
        link = os.path.join(repo, "snapshots", commit, name)
        wanted = os.path.join("..", "..", "blobs", sha)
        if os.path.islink(link) and os.readlink(link) == wanted:
            continue
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(wanted, link)
    ref = os.path.join(repo, "refs", "main")
    partial = ref + ".incomplete-" + str(os.getpid())
    with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644), "w") as handle:
        handle.write(commit)
    os.rename(partial, ref)
    print(json.dumps({"commit": commit, "files": files}))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        refuse("usage: python3 - STAGING HUB REPO_FOLDER")
    try:
        main(*sys.argv[1:])
    except OSError as error:  # a symlink (ELOOP), a vanished file, a full disk: one line, never a traceback
        refuse(str(error.filename or "") + ": " + str(error.strerror or error))
