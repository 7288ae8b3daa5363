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
  3. the image is cached as a DELTA: `docker save` of it with the vLLM image's layers dropped from the
     archive (triton-image-KEY.tar, 0.2 GB instead of 3 GB). `docker load` of a delta needs the vLLM
     image's layers already in the engine (Docker loads only the layers an engine lacks), which
     `scripts/testbed triton` makes sure of first; every node then holds the same image ID.
KEY hashes the vLLM image ID, the install command, the commit's changes, the wheels and every file of
triton_image/ but NOTES.md.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import vllm_wheels
from .hostexec import CommandError, node_run
from .image import local_image_id
from .layout import CACHE_DIR, HEAD, PACKAGE_DIR, STATE_DIR, VLLM_IMAGE_TAG, Node

TRITON_VERSION = "2.51.0"          # the server nvidia-pytriton 0.7.0 ships (NVIDIA's 24.10 release)
PYTRITON_VERSION = "0.7.0"
NUMPY_VERSION = "1.26.4"
TRITON_IMAGE_TAG = f"sparkpair/tritonserver-vllm-cpu:{TRITON_VERSION}"
TRITON_IMAGE_DIR = PACKAGE_DIR / "triton_image"
KEY_LABEL = "sparkpair-testbed.triton-image-key"
BUILD_CONTAINER = "sparkpair-testbed-triton-build"
REQUIREMENTS = (f"nvidia-pytriton=={PYTRITON_VERSION}", f"numpy=={NUMPY_VERSION}")
CONTENTS = "triton-closure.txt"
NOT_HASHED = ("NOTES.md",)
CHANGES = ("ENV PATH=/opt/tritonserver/bin:/opt/vllm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "ENV LD_LIBRARY_PATH=/opt/tritonserver/lib", "WORKDIR /opt/tritonserver", 'CMD ["/bin/bash"]')
INSTALL = ("sh", "/build/install-triton.sh")  # run in the vLLM image (whose entrypoint is none: the commit keeps it so)
BUILD_TIMEOUT = 900


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


def delta_tar(key: str) -> Path:
    """Where the delta archive of the image with KEY is cached."""
    return CACHE_DIR / f"triton-image-{key}.tar"


def installed_key(node: Node) -> str:
    """The key label of NODE's Triton image ('' when it has none)."""
    proc = node_run(node, ["docker", "image", "inspect", "--format", f'{{{{index .Config.Labels "{KEY_LABEL}"}}}}',
                           TRITON_IMAGE_TAG], check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def base_layer_count(node: Node) -> int:
    """How many layers the vLLM image has in NODE's engine."""
    out = node_run(node, ["docker", "image", "inspect", "--format", "{{len .RootFS.Layers}}", VLLM_IMAGE_TAG]).stdout
    return int(out.strip())


def strip_base_layers(full: Path, delta: Path, base_layers: int) -> int:
    """Copy the `docker save` archive FULL to DELTA without the layer files of its first BASE_LAYERS
    layers (the vLLM image's); returns how many layer files were dropped."""
    with tarfile.open(full) as source:
        manifest = json.loads(source.extractfile("manifest.json").read())
        if len(manifest) != 1:
            raise CommandError(f"{full}: {len(manifest)} images in the archive, expected one")
        dropped = set(manifest[0]["Layers"][:base_layers])
        with tarfile.open(delta, "w") as out:
            for member in source:
                if member.name not in dropped:
                    out.addfile(member, source.extractfile(member) if member.isfile() else None)
    return len(dropped)


def build(house: Path, key: str, log: Callable[[str], None]) -> None:
    """The image with KEY in spark-a's engine, then its delta archive in the cache (others removed)."""
    context = STATE_DIR / "triton-build"
    shutil.rmtree(context, ignore_errors=True)
    shutil.copytree(TRITON_IMAGE_DIR, context, ignore=shutil.ignore_patterns("__pycache__", *NOT_HASHED))
    node_run(HEAD, ["docker", "rm", "-f", BUILD_CONTAINER], check=False)
    previous = local_image_id(HEAD, TRITON_IMAGE_TAG)
    begin = time.monotonic()
    log(f"installing tritonserver {TRITON_VERSION} and the stand-in vllm backend into {VLLM_IMAGE_TAG} (offline)")
    node_run(HEAD, ["docker", "run", "--name", BUILD_CONTAINER, "--network", "none", "-v", f"{house}:/wheels:ro",
                    "-v", f"{context}:/build:ro", VLLM_IMAGE_TAG, *INSTALL],
             timeout=BUILD_TIMEOUT)
    changes = [item for change in (*CHANGES, f"LABEL {KEY_LABEL}={key}") for item in ("--change", change)]
    node_run(HEAD, ["docker", "commit", *changes, BUILD_CONTAINER, TRITON_IMAGE_TAG], timeout=BUILD_TIMEOUT)
    node_run(HEAD, ["docker", "rm", BUILD_CONTAINER])
    shutil.rmtree(context, ignore_errors=True)
    if previous and previous != local_image_id(HEAD, TRITON_IMAGE_TAG):
        node_run(HEAD, ["docker", "rmi", previous], check=False)
    log(f"{TRITON_IMAGE_TAG} built in {time.monotonic() - begin:.1f}s")
    begin = time.monotonic()
    full = CACHE_DIR / f"triton-image-{key}.full"
    partial = CACHE_DIR / f"triton-image-{key}.partial"
    try:
        node_run(HEAD, ["docker", "save", "-o", str(full), TRITON_IMAGE_TAG], timeout=BUILD_TIMEOUT)
        dropped = strip_base_layers(full, partial, base_layer_count(HEAD))
    finally:
        full.unlink(missing_ok=True)
    partial.chmod(0o644)
    partial.rename(delta_tar(key))
    for stale in CACHE_DIR.glob("triton-image-*"):
        if stale != delta_tar(key):
            stale.unlink()
    log(f"cached as a delta ({dropped} vLLM layers left out, {delta_tar(key).stat().st_size / 2**20:.0f} MiB) "
        f"in {time.monotonic() - begin:.1f}s")


def load(node: Node, key: str) -> bool:
    """Load the cached delta with KEY into NODE's engine unless its image has KEY already; True when loaded."""
    if installed_key(node) == key:
        return False
    previous = local_image_id(node, TRITON_IMAGE_TAG)
    node_run(node, ["docker", "load", "-q", "-i", str(delta_tar(key))], timeout=BUILD_TIMEOUT)
    if installed_key(node) != key:
        raise CommandError(f"{node.name}: {TRITON_IMAGE_TAG} lacks label {KEY_LABEL}={key} after docker load")
    if previous and previous != local_image_id(node, TRITON_IMAGE_TAG):
        node_run(node, ["docker", "rmi", previous], check=False)
    return True


def ensure_image(nodes: Sequence[Node], house: Path, vllm_image_id: str,
                 log: Callable[[str], None]) -> tuple[str, str]:
    """Every node's engine has the image for HOUSE on VLLM_IMAGE_ID (built when the cache lacks it, loaded
    where missing): returns (key, 'built'|'loaded'|'present')."""
    key = image_key(house, vllm_image_id)
    built = not delta_tar(key).exists()
    if built:
        build(house, key, log)
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        loaded = any(pool.map(lambda node: load(node, key), nodes))
    return key, "built" if built else "loaded" if loaded else "present"
