"""`scripts/testbed triton`: the real Triton Inference Server (with the stand-in vllm backend) on the
running pair, on demand, after everything `scripts/testbed vllm` puts there (the Triton image is layered
on the vLLM image, and serves the same tiny target and Eagle3 draft).

Idempotent, each step cached: the vLLM setup (vllm_pair.py), the Triton wheelhouse and the image
sparkpair/tritonserver-vllm-cpu:TRITON_VERSION in every node's engine (triton_image.py). It writes
STATE_DIR/triton.json (what the pytest fixture `testbed_triton` reads). Plain `up` never does any of this.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

from . import triton_image, vllm_pair
from .image import local_image_id
from .layout import NODES, STATE_DIR

RECORD = STATE_DIR / "triton.json"


@dataclass
class TritonSetup:
    """What `scripts/testbed triton` guarantees on the pair (written to STATE_DIR/triton.json)."""

    triton_version: str
    image: str
    image_id: str
    image_key: str
    vllm: dict                                     # the VllmSetup the image is built on (vllm.json)
    timings: dict = field(default_factory=dict)    # step -> seconds this run took


def ensure_triton(log) -> TritonSetup:
    """The vLLM setup, then the Triton image in every node; returns (and records) the setup."""
    timings = {}
    begin = time.monotonic()
    vllm = vllm_pair.ensure_vllm(log)
    timings["vllm"] = round(time.monotonic() - begin, 1)
    begin = time.monotonic()
    house = triton_image.ensure_wheelhouse(log)
    timings["wheelhouse"] = round(time.monotonic() - begin, 1)
    begin = time.monotonic()
    key, outcome = triton_image.ensure_image(NODES, house, vllm.image_id, log)
    took = timings[f"image_{outcome}"] = round(time.monotonic() - begin, 1)
    tag = triton_image.TRITON_IMAGE_TAG
    log({"built": f"{tag} built, cached and loaded in {took}s", "saved": f"{tag} cached and loaded in {took}s",
         "loaded": f"{tag} loaded from the cache in {took}s", "present": f"{tag} already present on every node"}[outcome])
    image_id = local_image_id(NODES[0], tag)
    setup = TritonSetup(triton_version=triton_image.TRITON_VERSION, image=tag, image_id=image_id, image_key=key,
                        vllm=asdict(vllm), timings=timings)
    RECORD.write_text(json.dumps(asdict(setup), indent=2) + "\n")
    return setup


def read_record() -> dict:
    """The last setup `scripts/testbed triton` recorded ({} when none)."""
    return vllm_pair.read_record(RECORD)
