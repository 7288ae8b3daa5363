"""`scripts/bench/launch.py --runtime triton`: sparkpair's Triton launch to ready against the same start done by
hand, in the same run, on the simulated pair with the real Triton Inference Server and the real vLLM (CPU build).

By hand (the floor): the model repository written on the head (config.pbtxt for the vllm backend, model.json with
the engine arguments sparkpair renders for the profile), the worker's container of the Triton image with
`vllm serve --headless --node-rank 1` and the same arguments as flags, then `docker run ... tritonserver
--model-control-mode explicit --load-model M` on the head (sparkpair_testbed/triton_serve.py's commands, seed
003's shape), until /v2/health/ready and /v2/models/M/ready answer and one generation answers (polled every
0.2 s, as sparkpair's readiness). sparkpair: `sparkpair launch qwen3-235b --runtime triton` (preflight, config,
containers, model verification on both nodes, the same start, readiness) until it returns ready. Both eager
(enforce_eager, as the vLLM backend's sample model.json), from the same state: network set up, image loaded,
models on both nodes, no container. Runs are interleaved (hand, then sparkpair), medians compared; the last line
is `triton launch: sparkpair S s, by hand H s, ratio R`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from launch import TESTBED, sparkpair  # scripts/bench/launch.py, beside this script
from launch_vllm import compare, with_sparkpair  # scripts/bench/launch_vllm.py: the same comparison for vLLM
from sparkpair_testbed import triton_serve, vllm_serve  # the testbed's by-hand commands (tests/testbed)
from sparkpair_testbed.layout import WORKER
from sparkpair_testbed.triton_image import TRITON_IMAGE_TAG

from sparkpair.inventory import read_inventory
from sparkpair.runtimes.triton import arg_name, flags_of

POLL_S = 0.2
EAGER = {"max_model_len": 8192, "gpu_memory_utilization": 0.85, "max_num_seqs": 4, "enforce_eager": True}


def _answers(model: str) -> bool:
    """Whether Triton and the model are ready and one generation answers."""
    if triton_serve.http("GET", "/v2/health/ready", timeout=3)[0] != 200 or \
            triton_serve.http("GET", f"/v2/models/{model}/ready", timeout=3)[0] != 200:
        return False
    status, _ = triton_serve.http("POST", f"/v2/models/{model}/generate", {
        "text_input": "ready", "parameters": {"stream": False, "temperature": 0, "max_tokens": 8}}, timeout=60)
    return status == 200


def by_hand(serve_args: dict, logs: Path, timeout: float = 900.0) -> float:
    """Seconds for the start by hand: the repository, the worker's vllm serve, Triton on the head, to ready."""
    start = time.perf_counter()
    triton_serve.write_repository({**triton_serve.engine_args(0), **{arg_name(k): v for k, v in serve_args.items()}})
    vllm_serve.start_container(WORKER, vllm_serve.container_env(WORKER), image=TRITON_IMAGE_TAG)
    worker = vllm_serve.Serving(logs={WORKER.name: logs})
    worker.procs[WORKER.name] = vllm_serve.spawn(WORKER, vllm_serve.serve_argv(1, extra=flags_of(serve_args)), logs)
    triton_serve.start_head()
    try:
        while time.perf_counter() - start < timeout:
            if _answers(triton_serve.MODEL):
                return time.perf_counter() - start
            if not triton_serve.head_running():
                sys.exit(f"by hand: Triton on the head ended:\n{triton_serve.head_log()[-2000:]}")
            time.sleep(POLL_S)
        sys.exit("by hand: not ready in time")
    finally:
        triton_serve.stop(worker)


def main(runs: int) -> None:
    subprocess.run([str(TESTBED), "up"], check=True, capture_output=True)
    subprocess.run([str(TESTBED), "triton"], check=True, capture_output=True)
    base = subprocess.run([str(TESTBED), "inventory"], capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        data = yaml.safe_load(Path(base).read_text())
        data["models"] = {"qwen3-235b": {"variants": {"triton": {"serve_args": EAGER}}}}
        path = str(Path(tmp) / "inventory.yaml")
        Path(path).write_text(yaml.safe_dump(data))
        for step in (("setup-network", "--yes"), ("launch", "qwen3-235b", "--runtime", "triton", "--timeout", "900"),
                     ("stop",)):  # network, both nodes' models and the image in place
            result = sparkpair(path, *step)
            if result.returncode != 0:
                sys.exit(f"{' '.join(step)} failed:\n{result.stdout}{result.stderr}")
        serve_args = read_inventory(path).for_runtime("triton").profile("qwen3-235b", "triton").serve_args
        assert json.dumps(serve_args, sort_keys=True) == json.dumps(EAGER, sort_keys=True), serve_args
        compare(runs, lambda index: by_hand(serve_args, Path(tmp) / f"hand-{index}.log"),
                lambda: with_sparkpair(path, "triton"), "triton")
