"""One node image built offline from a cached debootstrap base and a wheelhouse, saved to CACHE_DIR
and loaded into each node's engine: what vllm_image.py and modelopt_image.py share.

A CachedImage names everything that differs between them (cache-file prefix, input directory,
tags, build container, install command); its methods are the one copy of the logic:

  * key(house): sha256 of the base's package key, the wheels (names and sizes) and every file of
    the input directory (names, contents, executable bits), first 16 hex digits;
  * build(base, house, log): `docker import` of BASE into spark-a's engine, a container of it with
    no network, HOUSE at /wheels and the input directory at /build (both read-only) runs the install
    command, `docker commit`, `docker build` of the input directory's Dockerfile (label
    sparkpair-testbed.image-key=KEY), `docker save` into PREFIX-KEY.partial, renamed to
    PREFIX-KEY.tar beside PREFIX-KEY.id (the image ID); every other PREFIX-* file is removed;
  * load(node, key): `docker load` of the tar where the engine's image ID differs from the cache's;
  * ensure(nodes, house, build): built when the cache lacks the key, then loaded where missing.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import vllm_wheels
from .hostexec import CommandError, node_run
from .image import base_key, image_packages, local_image_id
from .layout import CACHE_DIR, HEAD, STATE_DIR, Node

BUILD_TIMEOUT = 1800
STEP_TIMEOUT = 600  # docker import of the base and docker build of the Dockerfile's few lines


@dataclass(frozen=True)
class CachedImage:
    """One cached node image: where its inputs and cache files are and what its build runs."""

    prefix: str                 # cache files PREFIX-KEY.tar / .id / .partial, build context PREFIX-build
    input_dir: Path             # Dockerfile and install script: the build context, hashed into the key
    packages_file: Path         # the Debian package list of the base the image starts from
    tag: str                    # the image's tag on every node
    base_tag: str               # the imported base, removed after the build
    stage_tag: str              # the committed install container, removed after the build
    build_container: str        # name of the install container
    install: tuple[str, ...]    # argv run in the install container (context at /build, wheels at /wheels)
    installs: str               # what the install command installs, for the log
    setup_command: str          # what builds the image, for the error when its cache is missing

    def packages(self) -> list[str]:
        """The Debian packages of the image's base."""
        return list(image_packages(self.packages_file))

    def base_tar(self) -> Path:
        """Where the debootstrap base the image starts from is cached."""
        return CACHE_DIR / f"base-{base_key(self.packages())}.tar"

    def input_files(self) -> list[tuple[str, Path]]:
        """Every file of the input directory (no __pycache__), as (relative name, path), sorted."""
        return [(str(path.relative_to(self.input_dir)), path) for path in sorted(self.input_dir.rglob("*"))
                if path.is_file() and "__pycache__" not in path.parts]

    def key(self, house: Path) -> str:
        """Cache key of the image built from HOUSE: base packages, wheels (names and sizes), input files
        (names, contents, modes)."""
        digest = hashlib.sha256(base_key(self.packages()).encode())
        for name, size in vllm_wheels.manifest(house):
            digest.update(f"{name}\0{size}\0".encode())
        for name, path in self.input_files():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
            digest.update(b"x" if os.access(path, os.X_OK) else b"-")
        return digest.hexdigest()[:16]

    def tar(self, key: str) -> Path:
        """Where the saved image with KEY is cached."""
        return CACHE_DIR / f"{self.prefix}-{key}.tar"

    def id_file(self, key: str) -> Path:
        """Sidecar of tar(KEY) holding the image ID."""
        return CACHE_DIR / f"{self.prefix}-{key}.id"

    def cached_key(self, house: Path) -> str:
        """Key of the cached image for HOUSE and the current inputs, '' when it is not built yet."""
        key = self.key(house)
        return key if self.tar(key).exists() and self.id_file(key).exists() else ""

    def expected_id(self, key: str) -> str:
        """ID of the cached image with KEY ('' when none)."""
        path = self.id_file(key)
        return path.read_text().strip() if path.exists() else ""

    def build(self, base: Path, house: Path, log: Callable[[str], None]) -> str:
        """Build the image in spark-a's engine from BASE and HOUSE and save it to the cache (the
        previous build under the tag and every other cache file of the prefix removed); returns its key."""
        key = self.key(house)
        context = STATE_DIR / f"{self.prefix}-build"
        shutil.rmtree(context, ignore_errors=True)
        shutil.copytree(self.input_dir, context, ignore=shutil.ignore_patterns("__pycache__"))
        node_run(HEAD, ["docker", "rm", "-f", self.build_container], check=False)
        previous = local_image_id(HEAD, self.tag)
        begin = time.monotonic()
        node_run(HEAD, ["docker", "import", str(base), self.base_tag], timeout=STEP_TIMEOUT)
        log(f"installing {self.installs} from the wheelhouse into the image (offline)")
        node_run(HEAD, ["docker", "run", "--name", self.build_container, "--network", "none",
                        "-v", f"{house}:/wheels:ro", "-v", f"{context}:/build:ro",
                        self.base_tag, *self.install], timeout=BUILD_TIMEOUT)
        log(f"{self.installs} installed in {time.monotonic() - begin:.1f}s (import and install)")
        begin = time.monotonic()
        node_run(HEAD, ["docker", "commit", self.build_container, self.stage_tag], timeout=BUILD_TIMEOUT)
        node_run(HEAD, ["docker", "rm", self.build_container])
        node_run(HEAD, ["docker", "build", "-q", "--network", "none", "--label",
                        f"sparkpair-testbed.image-key={key}", "-t", self.tag, str(context)], timeout=STEP_TIMEOUT)
        log(f"image committed in {time.monotonic() - begin:.1f}s")
        begin = time.monotonic()
        partial = CACHE_DIR / f"{self.prefix}-{key}.partial"
        node_run(HEAD, ["docker", "save", "-o", str(partial), self.tag], timeout=BUILD_TIMEOUT)
        log(f"image saved to the cache in {time.monotonic() - begin:.1f}s")
        node_run(HEAD, ["docker", "rmi", self.stage_tag, self.base_tag], check=False)
        if previous and previous != local_image_id(HEAD, self.tag):
            node_run(HEAD, ["docker", "rmi", previous], check=False)
        partial.chmod(0o644)
        self.id_file(key).write_text(local_image_id(HEAD, self.tag) + "\n")
        partial.rename(self.tar(key))
        shutil.rmtree(context, ignore_errors=True)
        for stale in CACHE_DIR.glob(f"{self.prefix}-*"):
            if stale.name not in (self.tar(key).name, self.id_file(key).name):
                stale.unlink()
        return key

    def load(self, node: Node, key: str) -> bool:
        """Load the cached image KEY into NODE's engine unless it has it already; True when loaded."""
        if not self.tar(key).exists():
            raise CommandError(f"no cached {self.tag} to load (run {self.setup_command})")
        wanted = self.expected_id(key)
        previous = local_image_id(node, self.tag)
        if previous == wanted:
            return False
        node_run(node, ["docker", "load", "-q", "-i", str(self.tar(key))], timeout=BUILD_TIMEOUT)
        if local_image_id(node, self.tag) != wanted:
            raise CommandError(f"{node.name}: {self.tag} does not match the cache after docker load")
        if previous:  # an older build under the tag (gigabytes a node); kept only while a container uses it
            node_run(node, ["docker", "rmi", previous], check=False)
        return True

    def ensure(self, nodes: Sequence[Node], house: Path, build: Callable[[], str]) -> tuple[str, str]:
        """Every node's engine has the image for HOUSE, BUILD (which returns the key) run first when the
        cache lacks it: returns (key, 'built'|'loaded'|'present')."""
        key = self.cached_key(house)
        built = not key
        if built:
            key = build()
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            loaded = any(pool.map(lambda node: self.load(node, key), nodes))
        return key, "built" if built else "loaded" if loaded else "present"
