"""The engine image sparkpair/trtllm-sim:1.3.0rc12, built locally and cached.

No registry is reachable, so the image is made from scratch:
  1. a Debian bookworm root filesystem from debootstrap, with every package the
     image needs (cached as base-KEY.tar; KEY hashes the package list);
  2. `docker import` of it into spark-a's engine, then `docker build` of
     image/Dockerfile, which adds the stand-in engine (engine/, with
     simengine and its own allow-list), without network;
  3. `docker save` into image-KEY.tar (KEY hashes every input file), loaded
     into each node's engine when that engine does not have it yet.
Caches live in /var/cache/sparkpair-testbed and survive `down`.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .hostexec import CommandError, node_run, run
from .layout import CACHE_DIR, ENGINE_DIR, HEAD, IMAGE_BASE_TAG, IMAGE_DIR, IMAGE_TAG, STATE_DIR, Node

SUITE = "bookworm"
MIRROR = os.environ.get("SPARKPAIR_TESTBED_MIRROR", "http://deb.debian.org/debian")
INSTALLED_KEY = STATE_DIR / "image.key"
TRIM = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
        "usr/share/info", "usr/share/locale")


def image_packages(listing: Path = IMAGE_DIR / "packages.txt") -> list:
    """The Debian packages LISTING names (default: the engine image's, image/packages.txt)."""
    lines = listing.read_text().splitlines()
    return sorted(line.split("#")[0].strip() for line in lines if line.split("#")[0].strip())


def base_key(packages: list | None = None) -> str:
    """Cache key of a base root filesystem with PACKAGES (default: the engine image's)."""
    text = json.dumps({"suite": SUITE, "packages": image_packages() if packages is None else packages})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def simengine_dir() -> Path:
    """Where the simengine package is: engine/simengine in a checkout (editable install), its
    own directory when the testbed was installed from a wheel."""
    spec = importlib.util.find_spec("simengine")
    if spec and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return ENGINE_DIR / "simengine"


def input_files() -> list:
    """Every file that goes into the image build, as (name in the build context, path): the
    Dockerfile and its script, the engine's tools and installer, and simengine (with its own
    allow-list)."""
    files = {}
    for root, prefix in ((IMAGE_DIR, ""), (ENGINE_DIR, "engine/"), (simengine_dir(), "engine/simengine/")):
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files.setdefault(prefix + str(path.relative_to(root)), path)
    return list(files.items())


def key_of(files) -> str:
    """Cache key of an image built from FILES: base key plus every name, content and mode."""
    digest = hashlib.sha256(base_key().encode())
    for name, path in files:
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
        digest.update(b"x" if os.access(path, os.X_OK) else b"-")
    return digest.hexdigest()[:16]


def image_key() -> str:
    """Cache key of the image the current source files make."""
    return key_of(input_files())


def image_tar(key: str) -> Path:
    """Where the saved image with KEY is cached."""
    return CACHE_DIR / f"image-{key}.tar"


def image_id_file(key: str) -> Path:
    """Sidecar of image_tar(KEY) holding the image ID."""
    return CACHE_DIR / f"image-{key}.id"


def build_base(target: Path, packages: list | None = None) -> None:
    """debootstrap a base root filesystem with PACKAGES (default: the engine image's), tar it to TARGET."""
    packages = image_packages() if packages is None else packages
    rootfs = CACHE_DIR / "rootfs.tmp"
    shutil.rmtree(rootfs, ignore_errors=True)
    run(["debootstrap", "--variant=minbase", f"--include={','.join(packages)}",
         SUITE, str(rootfs), MIRROR], timeout=900)
    for name in TRIM:
        for entry in (rootfs / name).glob("*"):
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    partial = target.with_suffix(".partial")
    run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(partial), "."])
    partial.rename(target)
    shutil.rmtree(rootfs)


def build_context() -> tuple:
    """A docker build context (Dockerfile, engine) and the key of what it holds.

    The key is computed from the copies, so files edited during a build cannot
    make the cache entry claim content it does not have."""
    context = STATE_DIR / "image-build"
    shutil.rmtree(context, ignore_errors=True)
    names = []
    for name, path in input_files():
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, context / name)
        names.append(name)
    return context, key_of([(name, context / name) for name in names])


def build_image(log) -> str:
    """Build the image in spark-a's engine, save it to the cache; returns its key."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    base = CACHE_DIR / f"base-{base_key()}.tar"
    if not base.exists():
        log("debootstrap the image base (Debian bookworm, cached afterwards)")
        build_base(base)
    context, key = build_context()
    node_run(HEAD, ["docker", "import", str(base), IMAGE_BASE_TAG], timeout=600)
    node_run(HEAD, ["docker", "build", "-q", "--network", "none", "--label",
                    f"sparkpair-testbed.image-key={key}", "-t", IMAGE_TAG, str(context)], timeout=600)
    partial = CACHE_DIR / f"image-{key}.partial"
    node_run(HEAD, ["docker", "save", "-o", str(partial), IMAGE_TAG], timeout=600)
    node_run(HEAD, ["docker", "rmi", IMAGE_BASE_TAG], check=False)
    partial.chmod(0o644)
    image_id_file(key).write_text(local_image_id(HEAD) + "\n")
    partial.rename(image_tar(key))
    shutil.rmtree(context, ignore_errors=True)
    for stale in CACHE_DIR.glob("image-*"):
        if stale.stem != f"image-{key}":
            stale.unlink()
    return key


def local_image_id(node: Node, tag: str = IMAGE_TAG) -> str:
    """ID of TAG in NODE's engine, or '' when it has no such image."""
    proc = node_run(node, ["docker", "image", "inspect", "--format", "{{.Id}}", tag], check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def cached_key() -> str:
    """Key of the cached image for the current sources ('' when not built yet)."""
    key = image_key()
    return key if image_tar(key).exists() and image_id_file(key).exists() else ""


def installed_key() -> str:
    """Key of the image `up` put into the nodes ('' before that).  Faults restore this one,
    even when the sources changed since (the next `up` rebuilds)."""
    return INSTALLED_KEY.read_text().strip() if INSTALLED_KEY.exists() else ""


def expected_image_id(key: str | None = None) -> str:
    """ID of the cached image with KEY (default: the one `up` installed); '' when none."""
    key = installed_key() if key is None else key
    path = image_id_file(key) if key else None
    return path.read_text().strip() if path and path.exists() else ""


def load_image(node: Node, key: str | None = None) -> bool:
    """Load the cached image KEY (default: the installed one) into NODE's engine unless it
    already has it; True when loaded."""
    key = installed_key() if key is None else key
    if not key or not image_tar(key).exists():
        raise CommandError(f"no cached {IMAGE_TAG} to load (run scripts/testbed up)")
    wanted = expected_image_id(key)
    if local_image_id(node) == wanted:
        return False
    node_run(node, ["docker", "load", "-q", "-i", str(image_tar(key))], timeout=600)
    if local_image_id(node) != wanted:
        raise CommandError(f"{node.name}: {IMAGE_TAG} does not match the cache after docker load")
    return True


def ensure_image(nodes, log) -> str:
    """Make sure every node's engine has the current image; says 'built', 'loaded' or 'present'."""
    key = cached_key()
    built = not key
    if built:
        key = build_image(log)
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        loaded = any(pool.map(lambda node: load_image(node, key), nodes))
    INSTALLED_KEY.write_text(key + "\n")
    return "built" if built else "loaded" if loaded else "present"
