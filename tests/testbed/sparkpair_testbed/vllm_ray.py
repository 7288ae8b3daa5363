"""The Ray-enabled vLLM image sparkpair/vllm-cpu-ray:VLLM_VERSION, as an operator following
NVIDIA's vLLM playbook makes one: NVIDIA's vLLM container has no Ray and the playbook runs
`pip install ray[default]` in it before `ray start`. Here that install is offline:

  1. the Ray wheelhouse: `pip download ray[default]==VLLM_RAY_VERSION` on this machine with its
     own pip configuration (no index or host is named), for CPython 3.11 manylinux x86_64, with
     the vLLM wheelhouse's closure.txt as constraints (so Ray's requirements resolve to the
     versions the vLLM image already holds), less the wheels that closure names (the image has
     them). Cached as vllm-ray-wheels-VERSION-KEY/ (KEY: the requirement, Python, platforms and
     the vLLM closure), so `down` keeps it;
  2. in each node's engine whose image lacks the current key: a container of the vLLM image with
     no network and the wheelhouse mounted read-only runs `pip install --no-index --find-links`
     of the requirement, and `docker commit` makes it the Ray image (label
     sparkpair-testbed.ray-image-key=KEY; KEY: the vLLM image ID, the wheels, the requirement).
     Built in each engine rather than saved and loaded: `docker save` of it would carry the
     whole 2.9 GB vLLM image, the build itself takes seconds.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import vllm_wheels
from .hostexec import CommandError, node_run
from .image import local_image_id
from .layout import CACHE_DIR, VLLM_IMAGE_TAG, VLLM_RAY_IMAGE_TAG, VLLM_RAY_VERSION, Node

REQUIREMENT = f"ray[default]=={VLLM_RAY_VERSION}"   # what NVIDIA's playbook installs (it pins nothing)
CONTENTS = "ray-closure.txt"     # name==version of every wheel kept (the image has the others)
KEY_LABEL = "sparkpair-testbed.ray-image-key"
BUILD_CONTAINER = "sparkpair-testbed-vllm-ray-build"
BUILD_TIMEOUT = 900
INSTALL = ["pip", "install", "-q", "--disable-pip-version-check", "--no-index", "--no-cache-dir",
           "--find-links", "/ray-wheels", REQUIREMENT]
CHECK = ["ray", "--version"]


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


def installed_key(node: Node) -> str:
    """The key label of NODE's Ray image ('' when it has none)."""
    proc = node_run(node, ["docker", "image", "inspect", "--format", f'{{{{index .Config.Labels "{KEY_LABEL}"}}}}',
                           VLLM_RAY_IMAGE_TAG], check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def build(node: Node, ray_house: Path, key: str) -> None:
    """The Ray image with KEY in NODE's engine: Ray installed offline in a container of the vLLM
    image, committed (the tag's previous image removed)."""
    node_run(node, ["docker", "rm", "-f", BUILD_CONTAINER], check=False)
    previous = local_image_id(node, VLLM_RAY_IMAGE_TAG)
    script = " && ".join(" ".join(argv) for argv in (INSTALL, CHECK)).replace(REQUIREMENT, f"'{REQUIREMENT}'")
    node_run(node, ["docker", "run", "--name", BUILD_CONTAINER, "--network", "none",
                    "-v", f"{ray_house}:/ray-wheels:ro", VLLM_IMAGE_TAG, "sh", "-c", script], timeout=BUILD_TIMEOUT)
    node_run(node, ["docker", "commit", "--change", f"LABEL {KEY_LABEL}={key}",
                    "--change", 'CMD ["/bin/bash"]', BUILD_CONTAINER, VLLM_RAY_IMAGE_TAG], timeout=BUILD_TIMEOUT)
    node_run(node, ["docker", "rm", BUILD_CONTAINER])
    if previous and previous != local_image_id(node, VLLM_RAY_IMAGE_TAG):
        node_run(node, ["docker", "rmi", previous], check=False)
    if installed_key(node) != key:
        raise CommandError(f"{node.name}: {VLLM_RAY_IMAGE_TAG} lacks label {KEY_LABEL}={key} after the build")


def ensure_image(nodes: Sequence[Node], ray_house: Path, vllm_image_id: str) -> tuple[str, str]:
    """Every node's engine has the same Ray image (one image ID under the tag, as a registry would give every
    node: doctor's docker.image-match compares them) for RAY_HOUSE and VLLM_IMAGE_ID: built on the first node
    when no node has it, then saved once and loaded where missing. Returns (key, 'built'|'present')."""
    key = image_key(ray_house, vllm_image_id)
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        keys = list(pool.map(installed_key, nodes))
    holders = [node for node, found in zip(nodes, keys) if found == key]
    if holders:  # one image ID: nodes that built their own (another ID under the same key) take the first's
        first = local_image_id(holders[0], VLLM_RAY_IMAGE_TAG)
        holders = [node for node in holders if local_image_id(node, VLLM_RAY_IMAGE_TAG) == first]
    missing = [node for node in nodes if node not in holders]
    if not missing:
        return key, "present"
    source = holders[0] if holders else nodes[0]
    if not holders:
        build(source, ray_house, key)
        missing = [node for node in missing if node is not source]
    tar = CACHE_DIR / f"vllm-ray-image-{key}.tar"
    if missing:
        node_run(source, ["docker", "save", "-o", str(tar), VLLM_RAY_IMAGE_TAG], timeout=BUILD_TIMEOUT)
        try:
            for node in missing:
                node_run(node, ["docker", "load", "-q", "-i", str(tar)], timeout=BUILD_TIMEOUT)
                if installed_key(node) != key:
                    raise CommandError(f"{node.name}: {VLLM_RAY_IMAGE_TAG} lacks label {KEY_LABEL}={key} after the load")
        finally:
            tar.unlink(missing_ok=True)
    return key, "built"
