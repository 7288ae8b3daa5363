"""Snapshot links on a node: checked before any is made (a 40-hex revision, relative normalised paths without
control characters, blobs named by their hash), made through folder fds opened without following a symlink,
so a link lands inside its snapshot and nowhere else, whatever the cache or the job holds.

Part of sparkpair's node program for models (see mn_main); standard library only.
"""

import errno
import os
import stat

from mn_blobs import HEX, UNSAFE, is_blob_name, is_repo_folder

NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def path_problem(path):
    """Why path cannot name a file of a snapshot (relative, normalised, no control character), or None."""
    if not isinstance(path, str) or UNSAFE.intersection(path):
        return "holds a control character"
    if path.startswith("/") or any(part in ("", ".", "..") for part in path.split("/")):
        return "not a relative path inside the snapshot"
    return None


def open_folder(parent, name, create):
    """The fd of folder name under the folder fd parent, never through a symlink (made first when create);
    OSError when name is a symlink or not a folder."""
    if create:
        try:
            os.mkdir(name, 0o755, dir_fd=parent)
        except FileExistsError:
            pass
    return os.open(name, NOFOLLOW_DIR, dir_fd=parent)


def open_path(top, parts, create):
    """A new fd of the folder top/parts[0]/parts[1]/... (top: a folder fd), each folder opened without
    following a symlink, made where missing when create."""
    fd = os.dup(top)
    try:
        for part in parts:
            inner = open_folder(fd, part, create)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_under(hub, parts, create):
    """open_path from the hub folder (the operator's path: it may itself be a symlink)."""
    os.makedirs(hub, exist_ok=True)
    top = os.open(hub, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return open_path(top, parts, create)
    finally:
        os.close(top)


def folder_problem(error):
    """Why a folder on the way could not be opened: a symlink (or not a folder) planted there, or the OS's reason."""
    if error.errno in (errno.ELOOP, errno.ENOTDIR):
        return "a folder on its way is a symlink"
    return f"a folder on its way cannot be opened ({error.strerror})"


def spec_problems(spec):
    """[entry, problem] for what forbids linking a repo's snapshot at all: its revision, a path that would
    leave the snapshot, a blob not named by its hash."""
    revision, links = spec.get("revision"), spec.get("links")
    problems = [] if isinstance(revision, str) and len(revision) == 40 and HEX.issuperset(revision) else \
        [["revision", "not 40 hex digits"]]
    for relative, blob in (links.items() if isinstance(links, dict) else []):
        problem = path_problem(relative) or (None if isinstance(blob, str) and is_blob_name(blob)
                                             else "its blob is not named by a hash")
        if problem:
            problems.append([relative, problem])
    return problems


def link_repos(hub, repos):
    """Link each snapshot file whose blob is in place (atomically, relative, as huggingface_hub does);
    write refs/main only when every file of the repo is linked. A repo whose spec holds an unsafe entry
    (spec_problems) is not linked at all. Every folder is opened without following a symlink, so a link is
    only ever made inside its snapshot. ({repo: [files not linked]}, {repo: [[entry, problem]]})."""
    outcome, refused = {}, {}
    for repo, spec in repos.items():
        problems = spec_problems(spec) if is_repo_folder(repo) else [["repo", "not a repo folder of the hub"]]
        if problems:
            outcome[repo], refused[repo] = sorted(spec.get("links") or {}), problems
            continue
        outcome[repo], refused[repo] = link_snapshot(hub, repo, spec["revision"], spec["links"])
        if not refused[repo]:
            del refused[repo]
    return outcome, refused


def link_snapshot(hub, repo, revision, links):
    """link_repos for one checked repo: (files not linked, [[entry, problem]])."""
    try:
        blobs = open_under(hub, [repo, "blobs"], create=True)
    except OSError as error:
        return sorted(links), [["blobs", folder_problem(error)]]
    try:
        snapshot = open_under(hub, [repo, "snapshots", revision], create=True)
    except OSError as error:
        os.close(blobs)
        return sorted(links), [["snapshots/" + revision, folder_problem(error)]]
    missing, problems = [], []
    try:
        for relative, blob in sorted(links.items()):
            problem = link_one(blobs, snapshot, relative, blob)
            if problem:
                missing.append(relative)
                if problem != "its blob is missing":
                    problems.append([relative, problem])
        if not missing:
            write_ref(hub, repo, revision, problems)
    finally:
        os.close(blobs)
        os.close(snapshot)
    return missing, problems


def link_one(blobs, snapshot, relative, blob):
    """Link snapshot/relative to its blob (folder fds); None when linked, else why not."""
    try:
        if not stat.S_ISREG(os.stat(blob, dir_fd=blobs, follow_symlinks=False).st_mode):
            return "its blob is not a file"
    except FileNotFoundError:
        return "its blob is missing"
    *folders, name = relative.split("/")
    try:
        folder = open_path(snapshot, folders, create=True)
    except OSError as error:
        return folder_problem(error)
    try:
        place_link(folder, name, "../" * (len(folders) + 2) + "blobs/" + blob)
    except OSError as error:
        return f"cannot be linked ({error.strerror})"
    finally:
        os.close(folder)
    return None


def place_link(folder, name, wanted):
    """name in folder (an fd) made a symlink to wanted, atomically; left alone when it is one already."""
    try:
        if os.readlink(name, dir_fd=folder) == wanted:
            return
    except OSError:
        pass
    temp = f".sparkpair-link.{os.getpid()}.tmp"
    try:
        os.unlink(temp, dir_fd=folder)
    except FileNotFoundError:
        pass
    os.symlink(wanted, temp, dir_fd=folder)
    try:
        os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError:
        os.unlink(temp, dir_fd=folder)
        raise


def write_ref(hub, repo, revision, problems):
    """refs/main := revision, atomically, never through a symlinked refs/ or a planted temp file."""
    try:
        refs = open_under(hub, [repo, "refs"], create=True)
    except OSError as error:
        problems.append(["refs/main", folder_problem(error)])
        return
    temp = f".main.{os.getpid()}.tmp"
    try:
        try:
            os.unlink(temp, dir_fd=refs)
        except FileNotFoundError:
            pass
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=refs)
        with os.fdopen(fd, "w") as handle:
            handle.write(revision)
        os.replace(temp, "main", src_dir_fd=refs, dst_dir_fd=refs)
    finally:
        os.close(refs)
