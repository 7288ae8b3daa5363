"""`scripts/testbed modelopt`: NVIDIA ModelOpt's training image on the running pair, on demand
(after `scripts/testbed vllm`, whose torch wheel and Debian base it shares).

Idempotent, each step cached: the wheelhouse (modelopt_wheels.py, pip download on this machine,
needs no pair), then the image sparkpair/modelopt-cpu:MODELOPT_VERSION in both nodes' engines
(modelopt_image.py: built in spark-a's engine when the cache lacks it, loaded where missing). It
writes STATE_DIR/modelopt.json (what the pytest fixture `testbed_modelopt` reads).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from . import modelopt_image, modelopt_wheels, vllm_pair, vllm_wheels
from .layout import MODELOPT_IMAGE_TAG, MODELOPT_VERSION, NODES, STATE_DIR

RECORD = STATE_DIR / "modelopt.json"


def ensure_wheelhouse(log) -> Path:
    """Both wheelhouses this image needs (the vLLM one holds its torch); returns ModelOpt's."""
    return modelopt_wheels.ensure_wheelhouse(vllm_wheels.ensure_wheelhouse(log), log)


def ensure_modelopt(house: Path, log) -> dict:
    """The image in both nodes' engines; returns (and records) what is there."""
    vllm_pair.require_pair()
    begin = time.monotonic()
    key, outcome = modelopt_image.ensure_image(NODES, house, log)
    took = round(time.monotonic() - begin, 1)
    log({"built": f"{MODELOPT_IMAGE_TAG} built, cached and loaded in {took}s",
         "loaded": f"{MODELOPT_IMAGE_TAG} loaded from the cache in {took}s",
         "present": f"{MODELOPT_IMAGE_TAG} already present on both nodes"}[outcome])
    setup = {"modelopt_version": MODELOPT_VERSION, "image": MODELOPT_IMAGE_TAG,
             "image_id": modelopt_image.expected_image_id(key), "image_key": key, "timings": {f"image_{outcome}": took}}
    RECORD.write_text(json.dumps(setup, indent=2) + "\n")
    return setup


def read_record() -> dict:
    """The last setup `scripts/testbed modelopt` recorded ({} when none)."""
    return vllm_pair.read_record(RECORD)
