"""The Triton image sparkpair/tritonserver-vllm-cpu:TRITON_VERSION: the real Triton Inference Server with
its Python backend, on top of the vLLM image (vllm_image.py), standing in for NVIDIA's
nvcr.io/nvidia/tritonserver:<yy.mm>-vllm-python-py3. What differs from NVIDIA's image is one file, the
vllm backend's model.py, which only NVIDIA's image carries: triton_image/vllm_backend/ holds the stand-in
(triton_image/NOTES.md says what it keeps of the real one's contract and where each fact comes from).

  1. the Triton wheelhouse: `pip download` with this machine's own pip configuration (no index or host
     named): NVIDIA's nvidia-pytriton wheel, which ships tritonserver TRITON_VERSION, its libraries, the
     Python backend and stubs for Python 3.8 to 3.13, and numpy NUMPY_VERSION (Triton 2.51's Python
     backend cannot unpack BYTES tensors with numpy 2). Cached as triton-wheels-KEY/;
  2. in spark-a's engine, a container of the vLLM image with no network, the wheelhouse and
     triton_image/ mounted read-only, runs install-triton.sh (/opt/tritonserver laid out as in NVIDIA's
     image, the stub for the image's Python, numpy into the vLLM venv, the stand-in backend at
     /opt/tritonserver/backends/vllm), and `docker commit` adds PATH, LD_LIBRARY_PATH and the key label;
  3. the image is cached as a DELTA (image_delta.py's steps; IMAGE names this image's parts): `docker save`
     of it with the vLLM image's layers dropped from the archive (triton-image-KEY.tar, 0.2 GB instead of
     3 GB). `docker load` of a delta needs the vLLM image's layers already in the engine (Docker loads only
     the layers an engine lacks), which `scripts/testbed triton` makes sure of first; every node then holds
     the same image ID.
KEY hashes the vLLM image ID, the install command, the commit's changes, the wheels and every file of
triton_image/ but NOTES.md.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from . import vllm_wheels
from .hostexec import CommandError
from .image_delta import DeltaImage
from .layout import CACHE_DIR, PACKAGE_DIR, STATE_DIR, VLLM_IMAGE_TAG, Node

TRITON_VERSION = "2.51.0"          # the server nvidia-pytriton 0.7.0 ships (NVIDIA's 24.10 release)
PYTRITON_VERSION = "0.7.0"
NUMPY_VERSION = "1.26.4"
TRITON_IMAGE_TAG = f"sparkpair/tritonserver-vllm-cpu:{TRITON_VERSION}"
TRITON_IMAGE_DIR = PACKAGE_DIR / "triton_image"
IMAGE = DeltaImage(tag=TRITON_IMAGE_TAG, key_label="sparkpair-testbed.triton-image-key", prefix="triton-image",
                   build_container="sparkpair-testbed-triton-build")
REQUIREMENTS = (f"nvidia-pytriton=={PYTRITON_VERSION}", f"numpy=={NUMPY_VERSION}")
CONTENTS = "triton-closure.txt"
NOT_HASHED = ("NOTES.md",)
CHANGES = ("ENV PATH=/opt/tritonserver/bin:/opt/vllm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "ENV LD_LIBRARY_PATH=/opt/tritonserver/lib", "WORKDIR /opt/tritonserver", 'CMD ["/bin/bash"]')
INSTALL = ("sh", "/build/install-triton.sh")  # run in the vLLM image (whose entrypoint is none: the commit keeps it so)


def wheelhouse_dir() -> Path:
    """Where the complete Triton wheelhouse for the current pins lives (it exists only when complete)."""
    text = json.dumps({"requirements": REQUIREMENTS, "python": vllm_wheels.PYTHON_VERSION,
                       "platforms": vllm_wheels.PLATFORMS})
    return CACHE_DIR / f"triton-wheels-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def ensure_wheelhouse(log: Callable[[str], None]) -> Path:
    """The Triton wheelhouse, downloaded when missing (needs no pair); returns its directory."""
    def fill(target: Path) -> None:
        log(f"Triton wheelhouse: pip download of {', '.join(REQUIREMENTS)} (no dependencies) for CPython "
            f"{vllm_wheels.PYTHON_VERSION} manylinux x86_64")
        vllm_wheels.pip_download(["--no-deps", *REQUIREMENTS], target)
        names = sorted(f"{name}=={version}" for name, version in map(vllm_wheels.wheel_name_version, target.glob("*.whl")))
        if len(names) != len(REQUIREMENTS):
            raise CommandError(f"pip download {' '.join(REQUIREMENTS)}: got {names}")
        (target / CONTENTS).write_text("\n".join(names) + "\n")
    return vllm_wheels.cached_directory(wheelhouse_dir(), CONTENTS, "triton-wheels-*", fill)


def input_files() -> list[tuple[str, Path]]:
    """Every file of triton_image/ that goes into the image (no NOTES.md, no __pycache__), sorted."""
    return [(str(path.relative_to(TRITON_IMAGE_DIR)), path) for path in sorted(TRITON_IMAGE_DIR.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts and path.name not in NOT_HASHED]


def image_key(house: Path, vllm_image_id: str) -> str:
    """Cache key: the vLLM image it is built on, the wheels, the input files (names, contents, modes)."""
    digest = hashlib.sha256(json.dumps({"from": vllm_image_id, "install": INSTALL, "changes": CHANGES}).encode())
    for name, size in vllm_wheels.manifest(house):
        digest.update(f"{name}\0{size}\0".encode())
    for name, path in input_files():
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0" + oct(path.stat().st_mode & 0o111).encode())
    return digest.hexdigest()[:16]


def build(house: Path, key: str, log: Callable[[str], None]) -> None:
    """The image with KEY in spark-a's engine: install-triton.sh run in a container of the vLLM image."""
    context = STATE_DIR / "triton-build"
    shutil.rmtree(context, ignore_errors=True)
    shutil.copytree(TRITON_IMAGE_DIR, context, ignore=shutil.ignore_patterns("__pycache__", *NOT_HASHED))
    begin = time.monotonic()
    log(f"installing tritonserver {TRITON_VERSION} and the stand-in vllm backend into {VLLM_IMAGE_TAG} (offline)")
    try:
        IMAGE.build(key, [(house, "/wheels"), (context, "/build")], INSTALL, CHANGES)
    finally:
        shutil.rmtree(context, ignore_errors=True)
    log(f"{TRITON_IMAGE_TAG} built in {time.monotonic() - begin:.1f}s")


def ensure_image(nodes: Sequence[Node], house: Path, vllm_image_id: str,
                 log: Callable[[str], None]) -> tuple[str, str]:
    """Every node's engine has the image for HOUSE on VLLM_IMAGE_ID (built and cached as a delta when the
    cache lacks it, loaded where missing): returns (key, 'built'|'saved'|'loaded'|'present')."""
    key = image_key(house, vllm_image_id)
    return key, IMAGE.ensure(nodes, key, lambda: build(house, key, log), log)
