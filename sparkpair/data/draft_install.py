"""Put an exported checkpoint (a trained draft, or the hidden states of offline training) into a node's Hugging
Face cache as a repo; run on the node with its own python3 (`python3 - STAGING HUB REPO_FOLDER [MAX_FILES]
[--names MAP] [--move]` with this file on stdin), standard library only, never imported by sparkpair itself
(`draft.export` sends it).

STAGING holds the files (regular files only, names of letters, digits, '.', '_', '-', not starting with '.';
with --names, only the files the JSON object in MAP names, each under the name it maps to). Each is copied into
HUB/REPO_FOLDER/blobs/<sha256> while it is hashed (a new file opened with O_EXCL|O_NOFOLLOW, flushed, then
renamed to the hash of the bytes written: what is installed is what was hashed, whatever happens to the source
meanwhile; a blob already there is kept), and with --move the source is removed once its blob is in place. The
snapshot HUB/REPO_FOLDER/snapshots/<commit>/<name> links `../../blobs/<sha256>` as huggingface_hub makes them,
and refs/main names <commit> (the sha1 of the listing: new content, new snapshot). Every folder under HUB (the
operator's own path) is opened without following a symlink and every file is made through those folder fds, so
a `blobs`, `refs` or `snapshots` planted as a symlink is refused and nothing is written through it. Prints one
JSON line: {"commit": ..., "files": {name: [sha256, size]}}. Any refusal: one line on stderr, exit 1.
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


def copy_blob(staging, source, blobs):
    """SOURCE (in the folder fd STAGING) copied into BLOBS under the sha256 of the bytes copied: (sha, size)."""
    fd = os.open(source, READ, dir_fd=staging)
    digest, size = hashlib.sha256(), 0
    partial = "incomplete-" + str(os.getpid())
    try:
        os.unlink(partial, dir_fd=blobs)
    except FileNotFoundError:
        pass
    out = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=blobs)
    with os.fdopen(fd, "rb") as handle, os.fdopen(out, "wb") as target:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            os.unlink(partial, dir_fd=blobs)
            refuse(source + ": not a regular file")
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
            target.write(chunk)
        target.flush()
        os.fsync(target.fileno())
    sha = digest.hexdigest()
    try:
        os.stat(sha, dir_fd=blobs, follow_symlinks=False)
        os.unlink(partial, dir_fd=blobs)   # the same content is there already
    except FileNotFoundError:
        os.replace(partial, sha, src_dir_fd=blobs, dst_dir_fd=blobs)
    return sha, size


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


def chosen_files(staging, staging_path, names_path, max_files):
    """{installed name: source name}: every file of STAGING, or those the MAP file names."""
    if names_path is None:
        chosen = {name: name for name in sorted(os.listdir(staging))}
    else:
        with open(names_path, "rb") as handle:
            raw = handle.read(64 << 20)
        try:
            mapping = json.loads(raw)
        except ValueError:
            refuse(names_path + ": not JSON")
        if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
            refuse(names_path + ": expected an object of file names")
        chosen = {target: source for source, target in mapping.items()}
    if not chosen or len(chosen) > max_files:
        refuse(staging_path + ": " + str(len(chosen)) + " files (expected 1 to " + str(max_files) + ")")
    for name, source in chosen.items():
        if not safe_name(name) or not safe_name(source):
            refuse(staging_path + ": file name " + json.dumps(source if safe_name(name) else name) + " refused")
        if not stat.S_ISREG(os.stat(source, dir_fd=staging, follow_symlinks=False).st_mode):
            refuse(source + ": not a regular file")   # before anything is written (the copy checks again)
    return chosen


def main(staging_path, hub, folder, max_files=MAX_FILES, names_path=None, move=False):
    if not folder.startswith("models--") or "/" in folder or ".." in folder or not safe_name(folder):
        refuse(folder + ": not a model repo folder")
    staging = os.open(staging_path, FOLDER)
    chosen = chosen_files(staging, staging_path, names_path, max_files)
    os.makedirs(hub, exist_ok=True)
    top = os.open(hub, os.O_RDONLY | os.O_DIRECTORY)
    repo = open_folder(top, folder, folder)
    blobs = open_folder(repo, "blobs", folder + "/blobs")
    refs = open_folder(repo, "refs", folder + "/refs")
    snapshots = open_folder(repo, "snapshots", folder + "/snapshots")
    files = {}
    for name in sorted(chosen):
        files[name] = copy_blob(staging, chosen[name], blobs)
        if move:
            os.unlink(chosen[name], dir_fd=staging)
    listing = "".join(name + " " + files[name][0] + "\n" for name in sorted(files))
    commit = hashlib.sha1(("sparkpair-train-draft\n" + listing).encode()).hexdigest()
    snapshot = open_folder(snapshots, commit, folder + "/snapshots/" + commit)
    for name, (sha, _) in files.items():
        place_link(snapshot, name, "../../blobs/" + sha)
    write_ref(refs, commit)
    print(json.dumps({"commit": commit, "files": files}))


if __name__ == "__main__":
    args = sys.argv[1:]
    move = "--move" in args
    args = [arg for arg in args if arg != "--move"]
    names = None
    if "--names" in args:
        at = args.index("--names")
        if at + 1 >= len(args):
            refuse("--names needs a file")
        names = args[at + 1]
        del args[at:at + 2]
    if len(args) not in (3, 4):
        refuse("usage: python3 - STAGING HUB REPO_FOLDER [MAX_FILES] [--names MAP] [--move]")
    limit = args[3] if len(args) == 4 else str(MAX_FILES)
    if not limit.isdigit() or not 1 <= int(limit) <= MAX_FILES_LIMIT:
        refuse("MAX_FILES " + json.dumps(limit[:20]) + ": expected 1 to " + str(MAX_FILES_LIMIT))
    try:
        main(*args[:3], max_files=int(limit), names_path=names, move=move)
    except OSError as error:  # a symlink (ELOOP), a vanished file, a full disk: one line, never a traceback
        refuse(str(error.filename or "") + ": " + str(error.strerror or error))
