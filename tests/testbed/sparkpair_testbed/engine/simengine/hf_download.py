"""What `hf download` does: write a synthetic repo into the hub cache or a local directory.

Mirrors huggingface_hub's on-disk behaviour: blobs are written to ``<blob>.incomplete``
and renamed when complete (so an interrupted download resumes), snapshot entries are
relative symlinks, ``refs/<branch>`` records the commit, a file lock guards each blob,
``--local-dir`` keeps per-file metadata under ``.cache/huggingface/download``.
"""

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path

from . import hub_layout, synthetic_model

GATED_PREFIXES = ("meta-llama/",)
REQUEST_ID = "Root=1-00000000-simengine"


class HubError(Exception):
    """An error `hf` prints (as given) before exiting with status 1."""


def endpoint(env):
    """The hub URL shown in messages (``HF_ENDPOINT`` or https://huggingface.co)."""
    return (env.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def file_url(env, repo_id, commit, filename):
    """The resolve URL of one file, as huggingface_hub prints it in errors."""
    return f"{endpoint(env)}/{repo_id}/resolve/{commit}/{filename}"


def _csv(value):
    return {item.strip() for item in (value or "").split(",") if item.strip()}


def is_gated(repo_id, env):
    """Gated repos: every ``meta-llama/`` repo plus those listed in ``SIM_HF_GATED``."""
    return repo_id.startswith(GATED_PREFIXES) or repo_id in _csv(env.get("SIM_HF_GATED"))


def resolve_token(cli_token, env):
    """The token huggingface_hub would use: --token, HF_TOKEN, HF_TOKEN_PATH, HF_HOME/token."""
    if cli_token:
        return cli_token
    if env.get("HF_TOKEN"):
        return env["HF_TOKEN"]
    token_path = Path(env.get("HF_TOKEN_PATH") or hub_layout.hf_home(env) / "token").expanduser()
    try:
        return token_path.read_text().strip() or None
    except OSError:
        return None


def check_access(repo_id, commit, token, env):
    """Refuse repos that do not exist (``SIM_HF_MISSING``) and gated repos without a token."""
    if repo_id in _csv(env.get("SIM_HF_MISSING")):
        raise HubError(
            f"huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. (Request ID: {REQUEST_ID})\n\n"
            f"Repository Not Found for url: {endpoint(env)}/api/models/{repo_id}/revision/main.\n"
            "Please make sure you specified the correct `repo_id` and `repo_type`.\n"
            "If you are trying to access a private or gated repo, make sure you are authenticated.")
    if is_gated(repo_id, env) and not token:
        raise HubError(
            f"huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: {REQUEST_ID})\n\n"
            f"Cannot access gated repo for url {file_url(env, repo_id, commit, 'config.json')}.\n"
            f"Access to model {repo_id} is restricted. You must have access to it and be "
            "authenticated to access it. Please log in.")


def select_files(all_files, filenames, env, repo_id, commit):
    """The files to fetch: all, or the named ones (unknown names fail like the hub's 404)."""
    if not filenames:
        return list(all_files)
    by_name = {f.name: f for f in all_files}
    for name in filenames:
        if name not in by_name:
            raise HubError(
                f"huggingface_hub.errors.EntryNotFoundError: 404 Client Error. (Request ID: {REQUEST_ID})\n\n"
                f"Entry Not Found for url: {file_url(env, repo_id, commit, name)}.")
    return [by_name[name] for name in filenames]


class FailureBudget:
    """``SIM_HF_FAIL_AFTER=N``: the download breaks after N files have been written in this run."""

    def __init__(self, env):
        value = env.get("SIM_HF_FAIL_AFTER")
        self.remaining = int(value) if value not in (None, "") else None
        self.bytes_per_second = float(env.get("SIM_HF_BYTES_PER_SEC") or 0)

    def exhausted(self):
        """True when the next file must fail half-way."""
        return self.remaining is not None and self.remaining <= 0

    def spend(self):
        """Count one completely written file."""
        if self.remaining is not None:
            self.remaining -= 1

    def throttle(self, byte_count):
        """Sleep as a link of ``SIM_HF_BYTES_PER_SEC`` would take for ``byte_count`` bytes."""
        if self.bytes_per_second > 0:
            time.sleep(byte_count / self.bytes_per_second)


@contextmanager
def file_lock(lock_path):
    """An exclusive advisory lock, like huggingface_hub's FileLock."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


THROTTLE_SLICE = 256 * 1024  # a throttled download writes (and so shows its progress) in slices this big


def _pieces_from(repo_file, start, stop):
    """The content bytes [start, stop) in pieces of at most THROTTLE_SLICE."""
    position = start
    for piece in repo_file.chunks(start):
        piece = piece[:max(0, stop - position)]
        for offset in range(0, len(piece), THROTTLE_SLICE):
            yield piece[offset:offset + THROTTLE_SLICE]
        position += len(piece)
        if position >= stop:
            return


def write_resumable(final_path, incomplete_path, repo_file, budget, url):
    """Write ``repo_file`` to ``final_path`` through ``incomplete_path``, resuming a partial one
    (from its size, as an HTTP range request does).

    When the failure budget is spent, writes half the remaining bytes and raises a network-style
    HubError, leaving the partial file behind.
    """
    size = repo_file.size
    start = incomplete_path.stat().st_size if incomplete_path.exists() else 0
    if start > size:
        start = 0
        incomplete_path.unlink()
    with open(incomplete_path, "ab") as handle:
        if budget.exhausted():
            cut = start + max(1, (size - start) // 2)
            for piece in _pieces_from(repo_file, start, cut):
                handle.write(piece)
            raise HubError(
                f"requests.exceptions.ChunkedEncodingError: ('Connection broken: IncompleteRead("
                f"{cut} bytes read, {size - cut} more expected)')\n"
                f"Error while downloading from {url}: the connection was interrupted "
                f"(simulated by SIM_HF_FAIL_AFTER). Run the same command again to resume.")
        for piece in _pieces_from(repo_file, start, size):
            budget.throttle(len(piece))
            handle.write(piece)
            handle.flush()
    os.replace(incomplete_path, final_path)
    budget.spend()


def _relative_symlink(link_path, target_path):
    """Point ``link_path`` at ``target_path`` with a relative link, replacing a wrong one atomically."""
    relative = os.path.relpath(target_path, link_path.parent)
    if link_path.is_symlink() and os.readlink(link_path) == relative:
        return
    temporary = link_path.with_name(f".{link_path.name}.{os.getpid()}.tmp")
    if temporary.is_symlink() or temporary.exists():
        temporary.unlink()
    os.symlink(relative, temporary)
    os.replace(temporary, link_path)


def download_to_cache(repo_id, revision, cache_dir, files, budget, env, progress):
    """Fetch ``files`` into the hub cache (blobs named by their etag); return the snapshot folder."""
    commit = synthetic_model.commit_for(repo_id, revision)
    repo = hub_layout.repo_dir(cache_dir, repo_id)
    blobs, snapshot = repo / "blobs", hub_layout.snapshot_dir(cache_dir, repo_id, commit)
    blobs.mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    if not hub_layout.is_commit_hash(revision or "main"):
        ref = hub_layout.ref_path(cache_dir, repo_id, revision or "main")
        ref.parent.mkdir(parents=True, exist_ok=True)
        if not ref.exists() or ref.read_text() != commit:
            ref.write_text(commit)
    locks = Path(cache_dir) / ".locks" / hub_layout.repo_folder_name(repo_id)
    for repo_file in files:
        blob = blobs / repo_file.blob_name
        with file_lock(locks / f"{repo_file.blob_name}.lock"):
            if not (blob.exists() and blob.stat().st_size == repo_file.size):
                incomplete = blob.with_name(blob.name + ".incomplete")
                url = file_url(env, repo_id, commit, repo_file.name)
                write_resumable(blob, incomplete, repo_file, budget, url)
            link = snapshot / repo_file.name
            link.parent.mkdir(parents=True, exist_ok=True)
            _relative_symlink(link, blob)
        progress.advance()
    return snapshot


def _local_metadata_dir(local_dir):
    return Path(local_dir) / ".cache" / "huggingface" / "download"


def _local_file_is_current(target, metadata, repo_file):
    if not target.is_file() or target.stat().st_size != repo_file.size:
        return False
    try:
        if metadata.read_text().splitlines()[1] == repo_file.blob_name:
            return True
    except (OSError, IndexError):
        pass
    return target.read_bytes() == repo_file.content


def download_to_local_dir(repo_id, revision, local_dir, files, budget, env, progress):
    """Fetch ``files`` as plain files into ``local_dir``; return its real path."""
    commit = synthetic_model.commit_for(repo_id, revision)
    meta_dir = _local_metadata_dir(local_dir)
    meta_dir.mkdir(parents=True, exist_ok=True)
    gitignore = Path(local_dir) / ".cache" / "huggingface" / ".gitignore"
    if not gitignore.exists():
        gitignore.write_text("*")
    for repo_file in files:
        target, metadata = Path(local_dir) / repo_file.name, meta_dir / f"{repo_file.name}.metadata"
        with file_lock(meta_dir / f"{repo_file.name}.lock"):
            if not _local_file_is_current(target, metadata, repo_file):
                incomplete = meta_dir / f"{repo_file.name}.{repo_file.blob_name}.incomplete"
                url = file_url(env, repo_id, commit, repo_file.name)
                write_resumable(target, incomplete, repo_file, budget, url)
            metadata.write_text(f"{commit}\n{repo_file.blob_name}\n{time.time()}\n")
        progress.advance()
    return Path(os.path.realpath(local_dir))


def offline_error():
    """huggingface_hub's message when offline mode forbids the download."""
    return HubError(
        "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot "
        "folder for the specified revision on the local disk and outgoing traffic has been disabled. "
        "To enable repo look-ups and downloads online, set 'HF_HUB_OFFLINE=0' as environment variable.")


def offline_snapshot(repo_id, revision, cache_dir, files):
    """In offline mode: the snapshot folder if every wanted file is cached, else LocalEntryNotFoundError."""
    commit = hub_layout.resolve_commit(cache_dir, repo_id, revision or "main")
    if commit is None:
        raise offline_error()
    snapshot = hub_layout.snapshot_dir(cache_dir, repo_id, commit)
    if all((snapshot / f.name).is_file() for f in files):
        return snapshot
    raise offline_error()


def offline_local_dir(local_dir, files):
    """In offline mode with --local-dir: the folder if every wanted file is there."""
    if all((Path(local_dir) / f.name).is_file() for f in files):
        return Path(os.path.realpath(local_dir))
    raise offline_error()
