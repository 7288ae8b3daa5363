"""Repositories the stand-in hub serves from folders on this machine, and what the Hub says about them.

A *folder repo* is one repository id whose files are the regular files of one folder (flat, as the
testbed's generated tiny models are: `sparkpair_testbed.vllm_models`). Its files are the same
``synthetic_model.RepoFile`` objects the testbed plants into a node's HF cache, so blob names, and so
the hub's ETags, are the planted ones: the sha256 of the content for what the repo's .gitattributes
sends through Git LFS, the git blob sha1 for the rest. Its commit (``folder_commit``) is derived from
the repo id and the files' names and blob names, the one the planting writes to ``refs/main``.

The *catalogue* is a small JSON file ``{"repos": {"org/name": "/absolute/folder", ...}}`` that the
testbed writes once the folders exist (``scripts/testbed vllm``) and the hub re-reads when it changes.

What the Hub answers for a repository, as huggingface_hub reads it (its 2.4.0 source: ``ModelInfo``,
``RepoFile`` in hf_api.py) and as the Hub sends it (``tree_entry``, ``sibling``):
  - model info: ``id``, ``sha`` (the commit), ``siblings`` with only ``rfilename`` unless
    ``?blobs=true`` adds ``blobId``, ``size`` and, for LFS files, ``lfs: {sha256, size, pointerSize}``
    (the Hub's answer as nullata/llamaMan#69 quotes it);
  - the tree listing: one ``{"type": "file", "oid", "size", "path"}`` per file, ``oid`` the git blob
    sha1 *of what git stores* (for an LFS file its pointer file), ``size`` the real size, plus
    ``"lfs": {"oid": sha256, "size", "pointerSize"}`` for LFS files (huggingface_hub's ``RepoFile``
    reads exactly these keys).
Nothing here reads a path from a request: files are looked up by name in the folder's own listing.
"""

import hashlib
import json
import os
import re
import stat

from .synthetic_model import RepoFile

CATALOGUE_MAX_BYTES = 64 * 1024        # the catalogue names a few repos
FILE_MAX_BYTES = 256 * 1024 * 1024     # a folder file above this is not served (the tiny models are MBs)
REPO_MAX_FILES = 256
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
LFS_SPEC = "https://git-lfs.github.com/spec/v1"


class CatalogueError(Exception):
    """The catalogue or a folder it names cannot be served (the message says which and why)."""


def valid_repo_id(repo_id):
    """True for an ``org/name`` id the Hub allows (no ``..``, no control characters)."""
    return bool(REPO_ID.fullmatch(repo_id or "")) and ".." not in repo_id


def _read_capped(path, limit):
    """The bytes of the regular file PATH (not a symlink), at most LIMIT of them; CatalogueError otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as error:
        raise CatalogueError(f"{path}: {error.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise CatalogueError(f"{path}: not a regular file")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise CatalogueError(f"{path}: larger than {limit} bytes")
    return data


def folder_files(folder):
    """The RepoFiles of FOLDER's regular files (symlinks and subfolders left out), sorted by name."""
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError as error:
        raise CatalogueError(f"{folder}: {error.strerror}") from None
    files = [entry for entry in entries if entry.is_file(follow_symlinks=False)]
    if len(files) > REPO_MAX_FILES:
        raise CatalogueError(f"{folder}: more than {REPO_MAX_FILES} files")
    return [RepoFile(entry.name, content=_read_capped(entry.path, FILE_MAX_BYTES)) for entry in files]


def folder_commit(repo_id, files):
    """The 40-hex commit of a folder repo: derived from its id and its files' names and blob names (so
    changed files make a new commit, as a push does)."""
    listing = "".join(f"{f.name} {f.blob_name}\n" for f in files)
    return hashlib.sha1(f"sparkpair-testbed:{repo_id}\n{listing}".encode()).hexdigest()


def lfs_pointer(repo_file):
    """The Git LFS pointer file git stores for an LFS file (the LFS spec's three lines)."""
    return f"version {LFS_SPEC}\noid sha256:{repo_file.sha256}\nsize {repo_file.size}\n".encode()


def git_blob_sha1(content):
    """git's object id of a blob: sha1 of ``blob <size>\\0`` and the content."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


class FolderRepo:
    """One repository served from a folder: its id, commit and files by name."""

    def __init__(self, repo_id, folder):
        if not valid_repo_id(repo_id):
            raise CatalogueError(f"not a hub repo id: {repo_id!r}")
        self.repo_id = repo_id
        self.files = {f.name: f for f in folder_files(folder)}
        self.commit = folder_commit(repo_id, list(self.files.values()))

    def knows_revision(self, revision):
        """True for the branch ``main`` and for the repo's own commit."""
        return revision in ("main", self.commit)

    def stored_oid(self, repo_file):
        """The git object id of what git stores for the file (its pointer file for an LFS file)."""
        return git_blob_sha1(lfs_pointer(repo_file)) if repo_file.lfs else repo_file.blob_name

    def tree_entry(self, repo_file):
        """The file as the tree listing (``/api/models/<repo>/tree/<rev>``) shows it."""
        entry = {"type": "file", "oid": self.stored_oid(repo_file), "size": repo_file.size, "path": repo_file.name}
        if repo_file.lfs:
            entry["lfs"] = {"oid": repo_file.sha256, "size": repo_file.size,
                            "pointerSize": len(lfs_pointer(repo_file))}
        return entry

    def sibling(self, repo_file, blobs):
        """The file as model info's ``siblings`` shows it (with ``?blobs=true``: its blob id, size, LFS facts)."""
        entry = {"rfilename": repo_file.name}
        if blobs:
            entry.update(blobId=self.stored_oid(repo_file), size=repo_file.size)
            if repo_file.lfs:
                entry["lfs"] = {"sha256": repo_file.sha256, "size": repo_file.size,
                                "pointerSize": len(lfs_pointer(repo_file))}
        return entry

    def info(self, blobs=False):
        """Model info (``/api/models/<repo>[/revision/<rev>]``)."""
        return {"id": self.repo_id, "modelId": self.repo_id,
                "author": self.repo_id.split("/")[0], "sha": self.commit, "private": False, "disabled": False,
                "gated": False, "siblings": [self.sibling(f, blobs) for f in self.files.values()]}

    def tree(self):
        """The recursive tree listing (flat: files only)."""
        return [self.tree_entry(f) for f in self.files.values()]


class Catalogue:
    """The folder repos named by the catalogue file, loaded again whenever the file changes."""

    def __init__(self, path):
        self.path = path
        self._stamp = None
        self._repos = {}

    def repo(self, repo_id):
        """The FolderRepo for REPO_ID, None when the catalogue does not name it (or there is none)."""
        self._refresh()
        return self._repos.get(repo_id)

    def _refresh(self):
        try:
            facts = os.stat(self.path)
        except OSError:
            self._stamp, self._repos = None, {}
            return
        stamp = (facts.st_ino, facts.st_size, facts.st_mtime_ns)
        if stamp == self._stamp:
            return
        self._repos = load(self.path)
        self._stamp = stamp


def load(path):
    """{repo id: FolderRepo} from the catalogue file PATH; CatalogueError when it or a folder is unusable."""
    try:
        named = json.loads(_read_capped(path, CATALOGUE_MAX_BYTES))["repos"]
    except (ValueError, KeyError, TypeError):
        raise CatalogueError(f"{path}: not a catalogue ({{\"repos\": {{\"org/name\": \"/folder\"}}}})") from None
    if not isinstance(named, dict) or not all(isinstance(f, str) and os.path.isabs(f) for f in named.values()):
        raise CatalogueError(f"{path}: each repo needs an absolute folder")
    return {repo_id: FolderRepo(repo_id, folder) for repo_id, folder in named.items()}


def write_catalogue(path, folders):
    """Write the catalogue naming FOLDERS ({repo id: folder}) to PATH (atomically: the hub may read it)."""
    for repo_id, folder in folders.items():
        if not valid_repo_id(repo_id) or not os.path.isabs(str(folder)):
            raise CatalogueError(f"cannot serve {repo_id!r} from {folder}")
    partial = f"{path}.partial"
    with open(partial, "w") as handle:
        json.dump({"repos": {repo_id: str(folder) for repo_id, folder in folders.items()}}, handle, indent=2)
    os.replace(partial, path)
