"""An image layered on the vLLM image, built once in spark-a's engine and cached as a DELTA: what
triton_image.py and vllm_ray.py share (image_cache.py holds the other kind, whole images built from a
debootstrap base).

A DeltaImage names what differs between them (tag, key label, cache-file prefix, build container); its
methods are the one copy of the steps:

  * build(key, mounts, command, changes): in spark-a's engine, a container of the vLLM image with no
    network and MOUNTS read-only runs COMMAND, and `docker commit` with CHANGES and the key label makes
    it the image (the tag's previous image removed);
  * save(key): `docker save` of it to PREFIX-KEY.full, copied to PREFIX-KEY.partial without the vLLM
    image's layer files (strip_base_layers), renamed to PREFIX-KEY.tar; every other PREFIX-* file is
    removed. `docker load` reads only the layers an engine lacks, so the delta loads into any engine
    that holds the vLLM image, and every node ends with one image ID, as a registry would give them;
  * load(node, key): `docker load` of the delta where the engine's image lacks the key label, the label
    checked after it, the previous image under the tag removed;
  * ensure(nodes, key, build): the delta made when the cache lacks it (BUILD run first unless spark-a's
    image has the key already), then loaded where missing.
KEY is the caller's: it hashes everything that goes into the image, the vLLM image ID first.
"""
from __future__ import annotations

import json
import tarfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .hostexec import CommandError, node_run
from .image import local_image_id
from .layout import CACHE_DIR, HEAD, VLLM_IMAGE_TAG, Node

BUILD_TIMEOUT = 900


def strip_base_layers(full: Path, delta: Path, base_layers: int) -> int:
    """Copy the `docker save` archive FULL to DELTA without the layer files of its first BASE_LAYERS
    layers (the base image's); returns how many layer files were dropped."""
    with tarfile.open(full) as source:
        manifest = json.loads(source.extractfile("manifest.json").read())
        if len(manifest) != 1:
            raise CommandError(f"{full}: {len(manifest)} images in the archive, expected one")
        layers = manifest[0]["Layers"]
        if base_layers >= len(layers):
            raise CommandError(f"{full}: {len(layers)} layers, none on top of the base's {base_layers}")
        dropped = set(layers[:base_layers])
        with tarfile.open(delta, "w") as out:
            for member in source:
                if member.name not in dropped:
                    out.addfile(member, source.extractfile(member) if member.isfile() else None)
    return len(dropped)


@dataclass(frozen=True)
class DeltaImage:
    """One image on top of the vLLM image, cached as the delta PREFIX-KEY.tar."""

    tag: str                    # the image's tag on every node
    key_label: str              # the label holding its key
    prefix: str                 # cache files PREFIX-KEY.tar (the delta), .full and .partial while it is saved
    build_container: str        # name of the install container on spark-a
    base_tag: str = VLLM_IMAGE_TAG

    def delta_tar(self, key: str) -> Path:
        """Where the delta archive of the image with KEY is cached."""
        return CACHE_DIR / f"{self.prefix}-{key}.tar"

    def installed_key(self, node: Node) -> str:
        """The key label of NODE's image under the tag ('' when it has none)."""
        proc = node_run(node, ["docker", "image", "inspect", "--format",
                               f'{{{{index .Config.Labels "{self.key_label}"}}}}', self.tag], check=False)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    def base_layer_count(self, node: Node) -> int:
        """How many layers the base image has in NODE's engine."""
        out = node_run(node, ["docker", "image", "inspect", "--format", "{{len .RootFS.Layers}}", self.base_tag]).stdout
        return int(out.strip())

    def build(self, key: str, mounts: Sequence[tuple[Path, str]], command: Sequence[str],
              changes: Sequence[str]) -> None:
        """The image with KEY in spark-a's engine: COMMAND run with no network in a container of the base
        image with MOUNTS (host path, container path) read-only, committed with CHANGES and the key label."""
        node_run(HEAD, ["docker", "rm", "-f", self.build_container], check=False)
        previous = local_image_id(HEAD, self.tag)
        volumes = [item for host, inside in mounts for item in ("-v", f"{host}:{inside}:ro")]
        node_run(HEAD, ["docker", "run", "--name", self.build_container, "--network", "none", *volumes,
                        self.base_tag, *command], timeout=BUILD_TIMEOUT)
        options = [item for change in (*changes, f"LABEL {self.key_label}={key}") for item in ("--change", change)]
        node_run(HEAD, ["docker", "commit", *options, self.build_container, self.tag], timeout=BUILD_TIMEOUT)
        node_run(HEAD, ["docker", "rm", self.build_container])
        if previous and previous != local_image_id(HEAD, self.tag):
            node_run(HEAD, ["docker", "rmi", previous], check=False)

    def save(self, key: str, log: Callable[[str], None]) -> None:
        """Spark-a's image with KEY saved to the cache as a delta (every other PREFIX-* file removed)."""
        begin = time.monotonic()
        full = CACHE_DIR / f"{self.prefix}-{key}.full"
        partial = CACHE_DIR / f"{self.prefix}-{key}.partial"
        try:
            node_run(HEAD, ["docker", "save", "-o", str(full), self.tag], timeout=BUILD_TIMEOUT)
            dropped = strip_base_layers(full, partial, self.base_layer_count(HEAD))
        finally:
            full.unlink(missing_ok=True)
        partial.chmod(0o644)
        partial.rename(self.delta_tar(key))
        for stale in CACHE_DIR.glob(f"{self.prefix}-*"):
            if stale != self.delta_tar(key):
                stale.unlink()
        log(f"{self.tag} cached as a delta ({dropped} layers of {self.base_tag} left out, "
            f"{self.delta_tar(key).stat().st_size / 2**20:.0f} MiB) in {time.monotonic() - begin:.1f}s")

    def load(self, node: Node, key: str) -> bool:
        """Load the cached delta with KEY into NODE's engine unless its image has KEY already; True when loaded."""
        if self.installed_key(node) == key:
            return False
        previous = local_image_id(node, self.tag)
        node_run(node, ["docker", "load", "-q", "-i", str(self.delta_tar(key))], timeout=BUILD_TIMEOUT)
        if self.installed_key(node) != key:
            raise CommandError(f"{node.name}: {self.tag} lacks label {self.key_label}={key} after docker load")
        if previous and previous != local_image_id(node, self.tag):
            node_run(node, ["docker", "rmi", previous], check=False)
        return True

    def ensure(self, nodes: Sequence[Node], key: str, build: Callable[[], None],
               log: Callable[[str], None]) -> str:
        """Every node's engine has the image with KEY: when the cache lacks its delta, BUILD makes it in
        spark-a's engine (unless that has it already) and it is saved; then loaded where missing. Returns
        'built' (or 'saved' when spark-a had it), 'loaded' or 'present'."""
        outcome = ""
        if not self.delta_tar(key).exists():
            outcome = "saved" if self.installed_key(HEAD) == key else "built"
            if outcome == "built":
                build()
            self.save(key, log)
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:  # list: any() would cancel loads not yet started
            loaded = list(pool.map(lambda node: self.load(node, key), nodes))
        return outcome or ("loaded" if any(loaded) else "present")
