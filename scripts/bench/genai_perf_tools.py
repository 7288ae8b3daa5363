"""NVIDIA's GenAI-Perf (`genai-perf` GENAI_PERF_VERSION) and perf_analyzer (`perf-analyzer` PERF_ANALYZER_VERSION)
for scripts/bench/triton_genai_perf.py, installed where they can run on this machine.

perf-analyzer's wheels (2.58 to 2.60) are manylinux_2_38: its binary needs glibc 2.38 and GLIBCXX_3.4.32, and
this machine kind (Debian 12) has glibc 2.36, so pip here refuses the wheel and the binary, unpacked by hand,
stops with "version `GLIBC_2.38' not found". The tools therefore live in their own Debian trixie root
(glibc 2.41, Python 3.13), made once and cached under the testbed's cache (so `scripts/testbed down` keeps it):

  1. `debootstrap --variant=minbase trixie` with python3, libssl3t64, zlib1g, ca-certificates
     (ROOT = CACHE_DIR/genai-perf-root-KEY);
  2. the wheelhouse: `pip download` with this machine's own pip configuration (no index or host named) of
     genai-perf and perf-analyzer with their dependencies, for CPython 3.13 manylinux x86_64, plus pip;
  3. in the root (chroot, no network needed), the venv /opt/genai-perf, installed offline from the wheelhouse.
run() starts a command of the venv in the root, in a private mount namespace (unshare -m): /proc, and the
folders asked for bound in, the environment emptied but for what is given (HF_HUB_OFFLINE=1 always: the
tokenizer is a local folder, nothing is fetched from a hub). Needs root.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from sparkpair_testbed.image import MIRROR
from sparkpair_testbed.layout import CACHE_DIR

GENAI_PERF_VERSION = "0.0.16"
PERF_ANALYZER_VERSION = "2.60.0"
SUITE = "trixie"
PACKAGES = ("python3", "libssl3t64", "zlib1g", "ca-certificates")
PYTHON = "3.13"  # trixie's python3
PLATFORMS = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(41, 16, -1)) + ("manylinux2014_x86_64",)
REQUIREMENTS = (f"genai-perf=={GENAI_PERF_VERSION}", f"perf-analyzer=={PERF_ANALYZER_VERSION}")
VENV = "/opt/genai-perf"
TIMEOUT = 1800


def key() -> str:
    """What the root is made of: the suite, its packages, the pins, the target Python and platforms."""
    text = json.dumps({"suite": SUITE, "packages": PACKAGES, "requirements": REQUIREMENTS, "python": PYTHON,
                       "platforms": PLATFORMS})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def root_dir() -> Path:
    """The tools root for the current pins (complete when its venv's genai-perf exists)."""
    return CACHE_DIR / f"genai-perf-root-{key()}"


def _run(argv: list[str], what: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr.strip() or proc.stdout.strip()).splitlines()[-4:])
        sys.exit(f"{what} failed (exit {proc.returncode}): {tail}")


def _download(target: Path) -> None:
    """The wheelhouse for CPython 3.13 manylinux x86_64, with pip's own configuration."""
    platforms = [flag for platform in PLATFORMS for flag in ("--platform", platform)]
    base = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--only-binary=:all:",
            "--python-version", PYTHON, "--implementation", "cp", *platforms, "-d", str(target)]
    _run(base + list(REQUIREMENTS), f"pip download {' '.join(REQUIREMENTS)}")
    _run(base + ["--no-deps", "pip"], "pip download pip")


def ensure_tools(log=print) -> Path:
    """The tools root, made when missing (about 2.5 minutes: debootstrap, download, install); returns it."""
    root = root_dir()
    if (root / VENV.lstrip("/") / "bin" / "genai-perf").exists():
        return root
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    log(f"genai-perf tools: debootstrap {SUITE} ({', '.join(PACKAGES)}) into {partial}")
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(partial), MIRROR],
         f"debootstrap {SUITE}")
    wheels = partial / "wheels"
    wheels.mkdir()
    log(f"genai-perf tools: pip download of {', '.join(REQUIREMENTS)} for CPython {PYTHON}")
    _download(wheels)
    install = (f"python3 -m venv --without-pip {VENV} && w=$(ls /wheels/pip-*.whl) && "
               f"{VENV}/bin/python $w/pip install -q --no-index --no-deps --no-cache-dir $w && "
               f"{VENV}/bin/pip install -q --no-index --find-links /wheels --no-cache-dir {' '.join(REQUIREMENTS)} && "
               f"{VENV}/bin/perf_analyzer --version && {VENV}/bin/genai-perf --version")
    log("genai-perf tools: installing offline into the root's venv")
    _run(_chrooted(partial, ["sh", "-c", install], {}), "installing genai-perf in the tools root")
    shutil.rmtree(wheels)
    for stale in CACHE_DIR.glob("genai-perf-root-*"):
        if stale != partial:
            shutil.rmtree(stale, ignore_errors=True)
    partial.rename(root)
    return root


def _chrooted(root: Path, argv: list[str], binds: dict[str, Path]) -> list[str]:
    """ARGV run in ROOT's chroot inside a private mount namespace, BINDS (path in the root -> path here)
    bound in, /proc mounted, the environment empty but for PATH, HOME, LANG and HF_HUB_OFFLINE=1."""
    mounts = [f"mount -t proc proc {shlex.quote(str(root / 'proc'))}"]
    for inside, outside in binds.items():
        target = root / inside.lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        mounts.append(f"mount --bind {shlex.quote(str(outside))} {shlex.quote(str(target))}")
    env = ["env", "-i", f"PATH={VENV}/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8",
           "HF_HUB_OFFLINE=1"]
    script = " && ".join(mounts + [shlex.join(["chroot", str(root), *env, *argv])])
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]


def run(argv: list[str], binds: dict[str, Path], timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """ARGV (a command of the tools' venv) in the tools root with BINDS; its output captured."""
    return subprocess.run(_chrooted(ensure_tools(), argv, binds), capture_output=True, text=True, timeout=timeout)
