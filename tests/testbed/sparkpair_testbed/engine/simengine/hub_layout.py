"""The Hugging Face hub cache layout, as huggingface_hub lays it out on disk.

``<cache>/models--org--name/{blobs/<etag>, refs/<branch>, snapshots/<commit>/<file>}``,
where snapshot files are relative symlinks into ``blobs``. Shared by ``hf download``
(which writes it) and ``trtllm-serve`` (which resolves a model id in it on every rank).
"""

import os
import re
from pathlib import Path

COMMIT_PATTERN = re.compile(r"^[0-9a-f]{40}$")
TRUTHY = {"1", "on", "yes", "true"}


def hf_home(env=None):
    """``$HF_HOME``, else ``$XDG_CACHE_HOME/huggingface``, else ``~/.cache/huggingface``."""
    env = os.environ if env is None else env
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser()
    xdg = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg).expanduser() / "huggingface"


def hub_cache_dir(env=None):
    """The hub cache: ``$HF_HUB_CACHE`` (or the legacy ``$HUGGINGFACE_HUB_CACHE``), else ``HF_HOME/hub``."""
    env = os.environ if env is None else env
    explicit = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    return hf_home(env) / "hub"


def is_offline(env=None):
    """True when ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set to a truthy value."""
    env = os.environ if env is None else env
    value = env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().lower() in TRUTHY


def repo_folder_name(repo_id, repo_type="model"):
    """``nvidia/Qwen3-235B-A22B-FP4`` -> ``models--nvidia--Qwen3-235B-A22B-FP4``."""
    return "--".join([f"{repo_type}s"] + repo_id.split("/"))


def repo_dir(cache_dir, repo_id, repo_type="model"):
    """The folder holding one repository in the cache."""
    return Path(cache_dir) / repo_folder_name(repo_id, repo_type)


def is_commit_hash(revision):
    """True for a full 40-hex-digit commit id."""
    return bool(revision) and bool(COMMIT_PATTERN.match(revision))


def ref_path(cache_dir, repo_id, revision="main"):
    """Where the commit a branch or tag points at is recorded."""
    return repo_dir(cache_dir, repo_id) / "refs" / revision


def resolve_commit(cache_dir, repo_id, revision="main"):
    """The commit a revision refers to in the cache, or None when it is not recorded."""
    revision = revision or "main"
    if is_commit_hash(revision):
        return revision
    path = ref_path(cache_dir, repo_id, revision)
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def snapshot_dir(cache_dir, repo_id, commit):
    """The snapshot folder for one commit."""
    return repo_dir(cache_dir, repo_id) / "snapshots" / commit


def find_cached_file(cache_dir, repo_id, filename, revision="main"):
    """Resolve ``filename`` of ``repo_id`` in the cache.

    Returns ``(path, None)`` when the file is present (its symlink resolves), else
    ``(None, missing)`` where ``missing`` is the first path that is absent.
    """
    revision = revision or "main"
    folder = repo_dir(cache_dir, repo_id)
    if not folder.is_dir():
        return None, folder
    commit = resolve_commit(cache_dir, repo_id, revision)
    if commit is None:
        return None, ref_path(cache_dir, repo_id, revision)
    candidate = snapshot_dir(cache_dir, repo_id, commit) / filename
    if candidate.is_file():
        return candidate, None
    return None, candidate


def looks_like_local_path(name):
    """True when a model argument is meant as a filesystem path rather than a hub id."""
    return name.startswith(("/", "./", "../", "~")) or name in (".", "..") or os.path.isdir(name)
