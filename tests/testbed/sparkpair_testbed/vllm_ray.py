"""The Ray-enabled vLLM image sparkpair/vllm-cpu-ray:VLLM_VERSION, as an operator following
NVIDIA's vLLM playbook makes one: NVIDIA's vLLM container has no Ray and the playbook runs
`pip install ray[default]` in it before `ray start`. Here that install is offline:

  1. the Ray wheelhouse: `pip download ray[default]==VLLM_RAY_VERSION` on this machine with its
     own pip configuration (no index or host is named), for CPython 3.11 manylinux x86_64, with
     the vLLM wheelhouse's closure.txt as constraints (so Ray's requirements resolve to the
     versions the vLLM image already holds), less the wheels that closure names (the image has
     them). Cached as vllm-ray-wheels-VERSION-KEY/ (KEY: the requirement, Python, platforms and
     the vLLM closure), so `down` keeps it;
  2. in spark-a's engine, when the cache lacks the image's delta: a container of the vLLM image with
     no network and the wheelhouse mounted read-only runs `pip install --no-index --find-links` of
     the requirement, and `docker commit` makes it the Ray image (label
     sparkpair-testbed.ray-image-key=KEY; KEY: the vLLM image ID, the wheels, the requirement and
     commands);
  3. the image is cached as a DELTA (image_delta.py's steps, as for the Triton image; IMAGE names this
     image's parts): `docker save` less the vLLM image's layer files, vllm-ray-image-KEY.tar, which
     `down` keeps, loaded into each of the pair's engines whose image lacks the key label (one image ID
     on both, as a registry would give them). Measured on the 2-core machine after `down; up`: when it
     was rebuilt in every fresh pair of engines (install, commit, a full `docker save` and a load into
     spark-b), 38.4 s each time; now the first build 35.9 s (install and commit 10.9 s, delta save
     22.1 s, 261 MiB, load into spark-b), then 4.8 s from the delta after every `down; up`.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from . import vllm_wheels
from .hostexec import CommandError
from .image_delta import DeltaImage
from .layout import CACHE_DIR, VLLM_IMAGE_TAG, VLLM_RAY_IMAGE_TAG, VLLM_RAY_VERSION, Node

REQUIREMENT = f"ray[default]=={VLLM_RAY_VERSION}"   # what NVIDIA's playbook installs (it pins nothing)
CONTENTS = "ray-closure.txt"     # name==version of every wheel kept (the image has the others)
IMAGE = DeltaImage(tag=VLLM_RAY_IMAGE_TAG, key_label="sparkpair-testbed.ray-image-key", prefix="vllm-ray-image",
                   build_container="sparkpair-testbed-vllm-ray-build")
INSTALL = ["pip", "install", "-q", "--disable-pip-version-check", "--no-index", "--no-cache-dir",
           "--find-links", "/ray-wheels", REQUIREMENT]
CHECK = ["ray", "--version"]
CHANGES = ('CMD ["/bin/bash"]',)


def wheelhouse_key(vllm_house: Path) -> str:
    """Cache key of the Ray wheelhouse: the requirement, Python, platforms and the vLLM closure."""
    text = json.dumps({"requirement": REQUIREMENT, "python": vllm_wheels.PYTHON_VERSION,
                       "platforms": vllm_wheels.PLATFORMS,
                       "vllm_closure": (vllm_house / vllm_wheels.CLOSURE).read_text()})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def wheelhouse_dir(vllm_house: Path) -> Path:
    """Where the complete Ray wheelhouse for VLLM_HOUSE lives (it exists only when complete)."""
    return CACHE_DIR / f"vllm-ray-wheels-{VLLM_RAY_VERSION}-{wheelhouse_key(vllm_house)}"


def closure_names(vllm_house: Path) -> set[str]:
    """Canonical names of the distributions the vLLM image installs (from its closure.txt)."""
    lines = (vllm_house / vllm_wheels.CLOSURE).read_text().splitlines()
    return {vllm_wheels.canonical(line.split("==")[0]) for line in lines if line.strip()}


def ensure_wheelhouse(vllm_house: Path, log: Callable[[str], None]) -> Path:
    """The complete Ray wheelhouse for VLLM_HOUSE, downloaded when missing; returns its directory."""
    def fill(target: Path) -> None:
        log(f"Ray wheelhouse: pip download of {REQUIREMENT} constrained to the vLLM image's versions")
        vllm_wheels.pip_download(["-c", str(vllm_house / vllm_wheels.CLOSURE), REQUIREMENT], target)
        present = closure_names(vllm_house)
        kept = []
        for wheel in sorted(target.glob("*.whl")):
            name, version = vllm_wheels.wheel_name_version(wheel)
            if vllm_wheels.canonical(name) in present:
                wheel.unlink()
            else:
                kept.append(f"{name}=={version}")
        if not any(vllm_wheels.canonical(line.split("==")[0]) == "ray" for line in kept):
            raise CommandError(f"pip download {REQUIREMENT}: no ray wheel among {len(kept)} downloaded")
        (target / CONTENTS).write_text("\n".join(kept) + "\n")
    return vllm_wheels.cached_directory(wheelhouse_dir(vllm_house), CONTENTS, "vllm-ray-wheels-*", fill)


def image_key(ray_house: Path, vllm_image_id: str) -> str:
    """Cache key of the Ray image: the vLLM image it is built from, the wheels, the commands."""
    digest = hashlib.sha256(json.dumps({"from": vllm_image_id, "install": INSTALL, "check": CHECK}).encode())
    for name, size in vllm_wheels.manifest(ray_house):
        digest.update(f"{name}\0{size}\0".encode())
    return digest.hexdigest()[:16]


def build(ray_house: Path, key: str, log: Callable[[str], None]) -> None:
    """The Ray image with KEY in spark-a's engine: Ray installed offline in a container of the vLLM image."""
    begin = time.monotonic()
    log(f"installing {REQUIREMENT} from the wheelhouse into {VLLM_IMAGE_TAG} (offline)")
    script = " && ".join(" ".join(argv) for argv in (INSTALL, CHECK)).replace(REQUIREMENT, f"'{REQUIREMENT}'")
    IMAGE.build(key, [(ray_house, "/ray-wheels")], ["sh", "-c", script], CHANGES)
    log(f"{VLLM_RAY_IMAGE_TAG} built in {time.monotonic() - begin:.1f}s")


def ensure_image(nodes: Sequence[Node], ray_house: Path, vllm_image_id: str,
                 log: Callable[[str], None]) -> tuple[str, str]:
    """Every node of NODES has the Ray image for RAY_HOUSE on VLLM_IMAGE_ID (built and cached as a delta when
    the cache lacks it, loaded where missing): returns (key, 'built'|'saved'|'loaded'|'present')."""
    key = image_key(ray_house, vllm_image_id)
    return key, IMAGE.ensure(nodes, key, lambda: build(ray_house, key, log), log)
