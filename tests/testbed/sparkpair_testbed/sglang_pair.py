"""`scripts/testbed sglang`: the stand-in SGLang on the running pair, on demand.

Idempotent, each step cached: the wheelhouse (sglang_image.py; pip download on this machine), the
image sparkpair/sglang-sim:SGLANG_VERSION in every node's engine, and a target and an Eagle3 draft
in the HEAD node's HF cache (owned by nvidia), made by simengine's `hf download` (deterministic
synthetic repos: a Qwen3-MoE config for the target, `LlamaForCausalLMEagle3` for the draft, a few
MiB of safetensors each): the stand-in reads their config.json and their bytes, never their
values. Copying them to the worker is the runtime's job. Writes STATE_DIR/sglang.json (what the
pytest fixture `testbed_sglang` reads). Plain `up` never does any of this.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import sglang_image
from .layout import HEAD, NODES, STATE_DIR, USER
from .vllm_models import chown_tree, hub_dir, node_view
from .vllm_pair import require_pair

RECORD = STATE_DIR / "sglang.json"
TARGET_REPO = "Qwen/Qwen3-235B-A22B-FP8"
DRAFT_REPO = "lmsys/Qwen3-235B-A22B-EAGLE3"


@dataclass
class SglangSetup:
    """What `scripts/testbed sglang` guarantees on the pair (STATE_DIR/sglang.json)."""

    sglang_version: str
    image: str
    image_id: str
    image_key: str
    head: str
    target_repo: str
    draft_repo: str
    snapshots: dict                 # repo id -> snapshot folder as the head node sees it
    timings: dict = field(default_factory=dict)


def plant_models() -> dict:
    """TARGET_REPO and DRAFT_REPO in the head's nvidia HF cache (simengine's `hf download`, idempotent)."""
    from simengine import hf_cli  # the testbed's own stand-in hub client (engine/simengine)

    cache = hub_dir(HEAD)
    cache.mkdir(parents=True, exist_ok=True)
    snapshots = {}
    for repo in (TARGET_REPO, DRAFT_REPO):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            status = hf_cli.main(["download", repo, "--cache-dir", str(cache), "--quiet"])
        if status:
            raise RuntimeError(f"hf download {repo} into {cache}: exit {status}")
        path = out.getvalue().strip().splitlines()[-1]
        snapshots[repo] = str(node_view(HEAD, Path(path)))
    account = pwd.getpwnam(USER)
    for repo in (TARGET_REPO, DRAFT_REPO):
        chown_tree(cache / ("models--" + repo.replace("/", "--")), account.pw_uid, account.pw_gid)
    if (cache / ".locks").exists():   # hf download's lock files: the user's cache, as vllm_models leaves it
        chown_tree(cache / ".locks", account.pw_uid, account.pw_gid)
    os.chown(cache, account.pw_uid, account.pw_gid)
    return snapshots


def ensure_sglang(log) -> SglangSetup:
    """The wheelhouse, the image on every node, the models on the head; returns (and records) the setup."""
    timings = {}
    begin = time.monotonic()
    house = sglang_image.ensure_wheelhouse(log)
    timings["wheelhouse"] = round(time.monotonic() - begin, 1)
    require_pair()
    begin = time.monotonic()
    key, outcome = sglang_image.ensure_image(NODES, house, log)
    took = timings[f"image_{outcome}"] = round(time.monotonic() - begin, 1)
    log({"built": f"{sglang_image.SGLANG_IMAGE_TAG} built, cached and loaded in {took}s",
         "loaded": f"{sglang_image.SGLANG_IMAGE_TAG} loaded from the cache in {took}s",
         "present": f"{sglang_image.SGLANG_IMAGE_TAG} already present on every node"}[outcome])
    begin = time.monotonic()
    snapshots = plant_models()
    timings["models"] = round(time.monotonic() - begin, 1)
    setup = SglangSetup(sglang_version=sglang_image.SGLANG_VERSION, image=sglang_image.SGLANG_IMAGE_TAG,
                        image_id=sglang_image.expected_image_id(key), image_key=key, head=HEAD.name,
                        target_repo=TARGET_REPO, draft_repo=DRAFT_REPO, snapshots=snapshots, timings=timings)
    RECORD.write_text(json.dumps(asdict(setup), indent=2) + "\n")
    return setup
