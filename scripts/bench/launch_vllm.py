"""`scripts/bench/launch.py --runtime vllm`: sparkpair's vLLM launch to ready against the same start done by
hand with the playbook's commands, in the same run, on the simulated pair with the real vLLM (CPU build).

By hand (the floor): `docker run -d ... --shm-size 10.24g IMAGE sleep infinity` on both nodes, then `vllm serve`
with the native multi-node flags on both (the worker `--headless`), the same serve flags sparkpair passes, until
/v1/models lists the model and one chat completion answers (polled every 0.2 s, as sparkpair's readiness).
sparkpair: `sparkpair launch qwen3-235b --runtime vllm` (preflight, config, containers, model verification on both
nodes, the same start, readiness) until it returns ready. Both start from the same state: network set up, image
loaded, models on both nodes, no container. Runs are interleaved (hand, then sparkpair), medians compared; the
last line is `vllm launch: sparkpair S s, by hand H s, ratio R`.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from launch import TESTBED, sparkpair  # scripts/bench/launch.py, beside this script
from sparkpair_testbed import vllm_serve  # the testbed's by-hand vLLM commands (tests/testbed)
from sparkpair_testbed.layout import HEAD, NODES, VLLM_TARGET_REPO

from sparkpair.inventory import read_inventory

POLL_S = 0.2


def _answers(base: str) -> bool:
    """Whether /v1/models lists the target and a one-word chat completion answers."""
    try:
        with urllib.request.urlopen(f"{base}/v1/models", timeout=3) as reply:
            if VLLM_TARGET_REPO not in reply.read(1 << 20).decode(errors="replace"):
                return False
        body = json.dumps({"model": VLLM_TARGET_REPO, "messages": [{"role": "user", "content": "ready"}],
                           "max_tokens": 8, "temperature": 0}).encode()
        request = urllib.request.Request(f"{base}/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status == 200
    except (OSError, urllib.error.URLError):
        return False


def by_hand(serve_flags: list[str], logs: Path, timeout: float = 900.0) -> float:
    """Seconds for the playbook's start done by hand: containers, then vllm serve on both nodes, to ready."""
    start = time.perf_counter()
    for node in NODES:
        vllm_serve.start_container(node, vllm_serve.container_env(node))
    serving = vllm_serve.serve(logs, vllm_serve.serve_argv(0, extra=serve_flags),
                               vllm_serve.serve_argv(1, extra=serve_flags))
    try:
        while time.perf_counter() - start < timeout:
            if _answers(f"http://{HEAD.mgmt_ip}:{vllm_serve.API_PORT}"):
                return time.perf_counter() - start
            if not serving.alive(HEAD):
                sys.exit(f"by hand: the head's vllm serve ended:\n{serving.text(HEAD)[-2000:]}")
            time.sleep(POLL_S)
        sys.exit("by hand: not ready in time")
    finally:
        vllm_serve.stop(serving)


def with_sparkpair(path: str, runtime: str = "vllm") -> float:
    """Seconds for `sparkpair launch qwen3-235b --runtime RUNTIME` to return ready (then stopped)."""
    start = time.perf_counter()
    result = sparkpair(path, "launch", "qwen3-235b", "--runtime", runtime, "--timeout", "900")
    took = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"sparkpair launch failed:\n{result.stdout}{result.stderr}")
    sparkpair(path, "stop")
    return took


def serve_flags(path: str) -> list[str]:
    """The profile's own serve flags, as sparkpair passes them (the hand start gets the same)."""
    from sparkpair.runtimes.vllm import flag_of

    profile = read_inventory(path).profile("qwen3-235b", "vllm")
    return [item for name, value in profile.serve_args.items() for item in (flag_of(name), str(value))]


def main(runs: int) -> None:
    subprocess.run([str(TESTBED), "up"], check=True, capture_output=True)
    subprocess.run([str(TESTBED), "vllm"], check=True, capture_output=True)
    path = subprocess.run([str(TESTBED), "inventory"], capture_output=True, text=True, check=True).stdout.strip()
    for step in (("setup-network", "--yes"), ("launch", "qwen3-235b", "--runtime", "vllm", "--timeout", "900"),
                 ("stop",)):  # network, both nodes' models and containers' image in place
        result = sparkpair(path, *step)
        if result.returncode != 0:
            sys.exit(f"{' '.join(step)} failed:\n{result.stdout}{result.stderr}")
    flags = serve_flags(path)
    with tempfile.TemporaryDirectory() as tmp:
        compare(runs, lambda index: by_hand(flags, Path(tmp) / f"hand-{index}"), lambda: with_sparkpair(path), "vllm")


def compare(runs: int, hand_run: Callable[[int], float], our_run: Callable[[], float], runtime: str) -> None:
    """runs of the start by hand and of sparkpair's, interleaved; prints each and `RUNTIME launch: ... ratio R`."""
    hand, ours = [], []
    for index in range(runs):
        hand.append(hand_run(index))
        ours.append(our_run())
        print(f"run {index + 1}: by hand {hand[-1]:.1f} s, sparkpair {ours[-1]:.1f} s", flush=True)
    median_ours, median_hand = statistics.median(ours), statistics.median(hand)
    print(f"{runtime} launch: sparkpair {median_ours:.1f} s, by hand {median_hand:.1f} s, "
          f"ratio {median_ours / median_hand:.2f}")
