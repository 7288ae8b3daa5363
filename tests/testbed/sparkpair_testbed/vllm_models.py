"""The tiny models the vLLM image serves, made by code (no hub download) and planted into a
node's Hugging Face cache under the repo names of sparkpair's vLLM profile.

`generate` runs modelgen/make_tiny_models.py in the vLLM image on spark-a (no network; torch,
tokenizers and transformers are there) and caches its output in CACHE_DIR/vllm-models-KEY
(KEY: the script and the image), so a second machine state or `down` does not redo it.
`install` writes both repos into a node's `~/.cache/huggingface/hub` the way huggingface_hub
does and the stand-in `hf download` already does (simengine.hf_download.download_to_cache,
simengine.synthetic_model's blob names): `models--ORG--NAME/blobs/<sha256>` for the files the
repo's .gitattributes sends through Git LFS (weights, tokenizer.json), `blobs/<git blob sha1>`
for the others, `refs/main` holding the 40-hex commit, `snapshots/<commit>/<file>` relative
symlinks `../../blobs/<hash>`; everything owned by nvidia. The commit id is derived from the
content, so changed models make a new snapshot.
"""
from __future__ import annotations

import hashlib
import os
import pwd
import shutil
from dataclasses import dataclass
from pathlib import Path

from .hostexec import CommandError, node_run
from .layout import CACHE_DIR, HEAD, MODELGEN_DIR, STATE_DIR, USER, VLLM_DRAFT_REPO, VLLM_IMAGE_TAG, VLLM_TARGET_REPO, Node

SCRIPT = "make_tiny_models.py"
GENERATE_TIMEOUT = 600
# Repo id -> the folder of the generator's output it is made from.
REPOS = {VLLM_TARGET_REPO: "target", VLLM_DRAFT_REPO: "draft"}


class Progress:
    """What download_to_cache reports progress to: nothing here."""

    def advance(self) -> None:
        """One file done."""


@dataclass(frozen=True)
class Planted:
    """One repo as a node's HF cache holds it."""

    repo_id: str
    commit: str
    snapshot: Path        # the snapshot folder as the node sees it (under /home/nvidia)
    files: tuple          # file names in the snapshot


def models_key(image_key: str) -> str:
    """Cache key of the generated models: the generator script and the image it runs in."""
    digest = hashlib.sha256(image_key.encode() + b"\0")
    digest.update((MODELGEN_DIR / SCRIPT).read_bytes())
    return digest.hexdigest()[:16]


def models_dir(key: str) -> Path:
    """Where the generated models with KEY are cached (complete when it exists)."""
    return CACHE_DIR / f"vllm-models-{key}"


def generate(key: str, log) -> Path:
    """The cached models for KEY, generated in the vLLM image on spark-a when missing."""
    final = models_dir(key)
    if final.is_dir():
        return final
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    script_dir = STATE_DIR / "modelgen"
    shutil.rmtree(script_dir, ignore_errors=True)
    shutil.copytree(MODELGEN_DIR, script_dir, ignore=shutil.ignore_patterns("__pycache__"))
    log("generating the tiny Qwen3-MoE target and its Eagle3 draft in the vLLM image (fixed seed)")
    node_run(HEAD, ["docker", "run", "--rm", "--network", "none", "-v", f"{script_dir}:/modelgen:ro",
                    "-v", f"{partial}:/out", VLLM_IMAGE_TAG, "python", f"/modelgen/{SCRIPT}", "/out"],
             timeout=GENERATE_TIMEOUT)
    shutil.rmtree(script_dir, ignore_errors=True)
    for path in partial.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    partial.rename(final)
    for stale in CACHE_DIR.glob("vllm-models-*"):
        if stale != final:
            shutil.rmtree(stale, ignore_errors=True)
    return final


def repo_files(source: Path) -> list:
    """The files of one generated repo as simengine RepoFiles (blob names as the hub's cache uses): the
    stand-in hub serves the same ones (simengine.hub_repos)."""
    from simengine import hub_repos

    return hub_repos.folder_files(source)


def commit_of(repo_id: str, files: list) -> str:
    """A 40-hex commit id derived from the repo id and its files' names and blob names (the stand-in hub's
    `sha` for the repo: simengine.hub_repos.folder_commit)."""
    from simengine import hub_repos

    return hub_repos.folder_commit(repo_id, files)


def catalogue(source: Path) -> dict:
    """{repo id: folder} of the generated models in SOURCE: what the stand-in hub serves (hub.py)."""
    return {repo_id: source / folder for repo_id, folder in REPOS.items()}


def hub_dir(node: Node) -> Path:
    """NODE's nvidia HF hub cache, as this machine sees it (the node's /home/nvidia)."""
    return node.dir / "home" / ".cache" / "huggingface" / "hub"


def node_view(node: Node, path: Path) -> Path:
    """PATH (under node.dir/home) as the node sees it (under /home/nvidia)."""
    return Path("/home") / USER / path.relative_to(node.dir / "home")


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Give ROOT and everything below it (symlinks themselves, not their targets) to UID:GID."""
    os.chown(root, uid, gid, follow_symlinks=False)
    for path in root.rglob("*"):
        os.chown(path, uid, gid, follow_symlinks=False)


def plant_repo(cache: Path, repo_id: str, source: Path, owner: str) -> tuple:
    """Write the repo in SOURCE into the hub cache CACHE as REPO_ID, owned by OWNER (idempotent:
    blobs in place are kept); returns (commit, snapshot folder, file names)."""
    from simengine import hf_download, hub_layout, hub_repos

    if not hub_repos.valid_repo_id(repo_id):
        raise CommandError(f"not a hub repo id: {repo_id!r}")
    files = repo_files(source)
    commit = commit_of(repo_id, files)
    cache.mkdir(parents=True, exist_ok=True)
    snapshot = hf_download.download_to_cache(repo_id, commit, cache, files, hf_download.FailureBudget({}), {},
                                             Progress())
    ref = hub_layout.ref_path(cache, repo_id, "main")
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(commit)
    account = pwd.getpwnam(owner)
    chown_tree(cache / hub_layout.repo_folder_name(repo_id), account.pw_uid, account.pw_gid)
    chown_tree(cache / ".locks", account.pw_uid, account.pw_gid)
    os.chown(cache, account.pw_uid, account.pw_gid)
    return commit, snapshot, tuple(f.name for f in files)


def cache_holds(cache: Path, repo_id: str, source: Path) -> bool:
    """True when the hub cache CACHE holds REPO_ID as plant_repo() writes it from SOURCE (refs/main
    and every snapshot file resolving to a blob of the right size)."""
    from simengine import hub_layout

    files = repo_files(source)
    commit = commit_of(repo_id, files)
    if hub_layout.resolve_commit(cache, repo_id) != commit:
        return False
    snapshot = hub_layout.snapshot_dir(cache, repo_id, commit)
    return all((snapshot / f.name).is_file() and (snapshot / f.name).stat().st_size == f.size for f in files)


def plant(node: Node, repo_id: str, source: Path, owner: str = USER) -> Planted:
    """REPO_ID from SOURCE in NODE's HF cache (see plant_repo); what the node has."""
    cache = hub_dir(node)
    if not cache.parent.parent.is_dir():
        raise CommandError(f"{node.name}: no {node_view(node, cache.parent.parent)} (is the pair up?)")
    commit, snapshot, names = plant_repo(cache, repo_id, source, owner)
    return Planted(repo_id, commit, node_view(node, snapshot), names)


def planted(node: Node, repo_id: str, source: Path) -> bool:
    """True when NODE's HF cache holds REPO_ID as plant() writes it from SOURCE."""
    return cache_holds(hub_dir(node), repo_id, source)


def install(node: Node, source: Path, owner: str = USER) -> dict:
    """Both repos from the generated models in SOURCE in NODE's HF cache: {repo id: Planted}."""
    return {repo_id: plant(node, repo_id, source / folder, owner) for repo_id, folder in REPOS.items()}


def installed(node: Node, source: Path) -> bool:
    """True when NODE's HF cache holds both repos as install() writes them."""
    return all(planted(node, repo_id, source / folder) for repo_id, folder in REPOS.items())


def check_generated(source: Path) -> None:
    """Fail unless SOURCE holds both generated repos with a config.json each."""
    for folder in REPOS.values():
        if not (source / folder / "config.json").is_file():
            raise CommandError(f"{source / folder}: no config.json (remove {source} to generate again)")

