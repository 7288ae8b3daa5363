"""The stand-in SGLang image sparkpair/sglang-sim:SGLANG_VERSION: the engine image plus the real sglang
package, so that the stand-in parses and checks its command line with SGLang's own parser.

SGLang's kernels need CUDA, so the engine itself is simengine's (simengine/sglang_*.py, already in the
engine image); what this image adds is SGLang's Python package and what importing its launcher and
`sglang.srt.server_args` needs (torch's CPU build among them: sglang/srt/utils/common.py imports it at
module level), layered on the engine image `up` loads anyway:

  1. the wheelhouse: `pip download --no-deps` of every pin in sglang_image/requirements.txt, with this
     machine's own pip configuration (no index or host is named), CPython 3.11 manylinux x86_64;
     cached as sglang-wheels-VERSION-KEY/ (KEY: the pins, Python, platforms), so `down` keeps it;
  2. a container of the engine image with no network, the wheelhouse at /wheels and sglang_image/
     at /build (read-only) runs install-sglang.sh (the wheels with pip from its own wheel, the
     wheel's launch_server.py kept as launch_server_wheel.py and the stand-in's in its place, the
     triton placeholder), `docker commit` with the label sparkpair-testbed.sglang-image-key=KEY
     (KEY: the engine image ID, the wheels, sglang_image/'s files), `docker save` into
     sglang-image-KEY.tar beside sglang-image-KEY.id, loaded into every node whose engine lacks it,
     so both nodes hold one image ID (doctor compares them).
Built only on demand (`scripts/testbed sglang`), never by plain `up`.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import image, vllm_wheels
from .hostexec import CommandError, node_run
from .layout import CACHE_DIR, HEAD, IMAGE_TAG, PACKAGE_DIR, STATE_DIR, Node

SGLANG_VERSION = "0.5.23"
SGLANG_IMAGE_TAG = f"sparkpair/sglang-sim:{SGLANG_VERSION}"
INPUT_DIR = PACKAGE_DIR / "sglang_image"
REQUIREMENTS = INPUT_DIR / "requirements.txt"
CONTENTS = "wheels.txt"           # the wheel files of a complete wheelhouse
KEY_LABEL = "sparkpair-testbed.sglang-image-key"
BUILD_CONTAINER = "sparkpair-testbed-sglang-build"
BUILD_TIMEOUT = 1800
ENV = ("PYTHONDONTWRITEBYTECODE=1", f"SGLANG_VERSION={SGLANG_VERSION}")


def pins(requirements: Path = REQUIREMENTS) -> list[str]:
    """The `name==version` lines of REQUIREMENTS (comments and blanks dropped)."""
    lines = (line.split("#")[0].strip() for line in requirements.read_text().splitlines())
    return [line for line in lines if line]


def wheelhouse_dir() -> Path:
    """Where the complete wheelhouse for the current pins lives (it exists only when complete)."""
    text = json.dumps({"pins": pins(), "python": vllm_wheels.PYTHON_VERSION, "platforms": vllm_wheels.PLATFORMS})
    return CACHE_DIR / f"sglang-wheels-{SGLANG_VERSION}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def ensure_wheelhouse(log: Callable[[str], None]) -> Path:
    """The complete wheelhouse, downloaded (each pin alone, --no-deps) when missing; returns its directory."""
    def fill(target: Path) -> None:
        wanted = pins()
        log(f"SGLang wheelhouse: pip download --no-deps of {len(wanted)} pinned wheels (sglang {SGLANG_VERSION}, "
            "torch CPU, what its launcher imports)")
        vllm_wheels.pip_download(["--no-deps", *wanted], target)
        wheels = sorted(path.name for path in target.glob("*.whl"))
        if len(wheels) != len(wanted):
            raise CommandError(f"pip download: {len(wheels)} wheels for {len(wanted)} pins in {target}")
        (target / CONTENTS).write_text("\n".join(wheels) + "\n")
    return vllm_wheels.cached_directory(wheelhouse_dir(), CONTENTS, "sglang-wheels-*", fill)


def input_files() -> list[tuple[str, Path]]:
    """Every file of sglang_image/ (no __pycache__), as (relative name, path), sorted."""
    return [(str(path.relative_to(INPUT_DIR)), path) for path in sorted(INPUT_DIR.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts]


def image_key(house: Path, engine_image_id: str) -> str:
    """The image's key: the engine image it starts from, the wheels (names and sizes), the input files."""
    digest = hashlib.sha256(json.dumps({"from": engine_image_id, "env": ENV}).encode())
    for name, size in vllm_wheels.manifest(house):
        digest.update(f"{name}\0{size}\0".encode())
    for name, path in input_files():
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
        digest.update(b"x" if os.access(path, os.X_OK) else b"-")
    return digest.hexdigest()[:16]


def tar(key: str) -> Path:
    """Where the saved image with KEY is cached."""
    return CACHE_DIR / f"sglang-image-{key}.tar"


def id_file(key: str) -> Path:
    """Sidecar of tar(KEY) holding the image ID."""
    return CACHE_DIR / f"sglang-image-{key}.id"


def build(house: Path, key: str, log: Callable[[str], None]) -> None:
    """Build the image in spark-a's engine from the engine image and HOUSE; save it to the cache."""
    context = STATE_DIR / "sglang-build"
    shutil.rmtree(context, ignore_errors=True)
    shutil.copytree(INPUT_DIR, context, ignore=shutil.ignore_patterns("__pycache__"))
    node_run(HEAD, ["docker", "rm", "-f", BUILD_CONTAINER], check=False)
    previous = image.local_image_id(HEAD, SGLANG_IMAGE_TAG)
    begin = time.monotonic()
    log(f"installing sglang {SGLANG_VERSION} into {IMAGE_TAG} (offline)")
    node_run(HEAD, ["docker", "run", "--name", BUILD_CONTAINER, "--network", "none", "-v", f"{house}:/wheels:ro",
                    "-v", f"{context}:/build:ro", IMAGE_TAG, "sh", "/build/install-sglang.sh"], timeout=BUILD_TIMEOUT)
    changes = [item for env in ENV for item in ("--change", f"ENV {env}")]
    node_run(HEAD, ["docker", "commit", *changes, "--change", f"LABEL {KEY_LABEL}={key}", "--change",
                    'CMD ["/bin/bash"]', BUILD_CONTAINER, SGLANG_IMAGE_TAG], timeout=BUILD_TIMEOUT)
    node_run(HEAD, ["docker", "rm", BUILD_CONTAINER])
    log(f"{SGLANG_IMAGE_TAG} built in {time.monotonic() - begin:.1f}s")
    partial = CACHE_DIR / f"sglang-image-{key}.partial"
    node_run(HEAD, ["docker", "save", "-o", str(partial), SGLANG_IMAGE_TAG], timeout=BUILD_TIMEOUT)
    partial.chmod(0o644)
    id_file(key).write_text(image.local_image_id(HEAD, SGLANG_IMAGE_TAG) + "\n")
    partial.rename(tar(key))
    shutil.rmtree(context, ignore_errors=True)
    if previous and previous != image.local_image_id(HEAD, SGLANG_IMAGE_TAG):
        node_run(HEAD, ["docker", "rmi", previous], check=False)
    for stale in CACHE_DIR.glob("sglang-image-*"):
        if stale.name not in (tar(key).name, id_file(key).name):
            stale.unlink()


def load(node: Node, key: str) -> bool:
    """Load the cached image KEY into NODE's engine unless it holds it; True when loaded."""
    wanted = id_file(key).read_text().strip()
    previous = image.local_image_id(node, SGLANG_IMAGE_TAG)
    if previous == wanted:
        return False
    node_run(node, ["docker", "load", "-q", "-i", str(tar(key))], timeout=BUILD_TIMEOUT)
    if image.local_image_id(node, SGLANG_IMAGE_TAG) != wanted:
        raise CommandError(f"{node.name}: {SGLANG_IMAGE_TAG} does not match the cache after docker load")
    if previous:
        node_run(node, ["docker", "rmi", previous], check=False)
    return True


def ensure_image(nodes: Sequence[Node], house: Path, log: Callable[[str], None]) -> tuple[str, str]:
    """Every node's engine holds the image for HOUSE and the installed engine image: (key, outcome)."""
    engine_id = image.expected_image_id()
    if not engine_id or image.local_image_id(HEAD, IMAGE_TAG) != engine_id:
        raise CommandError(f"{HEAD.name} lacks {IMAGE_TAG} (scripts/testbed up first)")
    key = image_key(house, engine_id)
    built = not (tar(key).exists() and id_file(key).exists())
    if built:
        build(house, key, log)
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        loaded = any(pool.map(lambda node: load(node, key), nodes))
    return key, "built" if built else "loaded" if loaded else "present"


def expected_image_id(key: str) -> str:
    """ID of the cached image with KEY ('' when none)."""
    return id_file(key).read_text().strip() if id_file(key).exists() else ""
