#!/usr/bin/env python3
"""`sparkpair train-draft` on the simulated pair with the real vLLM and the real ModelOpt, trained long enough
to show acceptance: the tiny random Qwen3-MoE target's own greedy answers to the bundled prompts, an Eagle3
head trained on them for STEPS steps on CPU, exported, served by vLLM beside the target, and bench on the
held-back prompts against the testbed's random Eagle3 draft (which accepts ~0).

    flock /tmp/simpair.lock .venv/bin/python scripts/bench/train_draft.py [--steps N] [--max-tokens N]

Needs `scripts/testbed up`, `scripts/testbed vllm` and `scripts/testbed modelopt` (the image
sparkpair/modelopt-cpu:0.47.0 on both nodes). Each run trains under a new name (the step count in it), so
nothing is resumed from an earlier run. The last line is `draft acceptance: random A0, trained A1 after N steps`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTBED = ROOT / "scripts" / "testbed"
IMAGE = "sparkpair/modelopt-cpu:0.47.0"
PROFILE = "qwen3-235b"


def inventory() -> str:
    """The simulated pair's inventory path (`scripts/testbed inventory`)."""
    return subprocess.run([str(TESTBED), "inventory"], capture_output=True, text=True, check=True).stdout.strip()


def sparkpair(*args: str, timeout: float = 7200) -> subprocess.CompletedProcess[str]:
    """The real CLI against the simulated pair; its progress passes through to stderr."""
    return subprocess.run([sys.executable, "-m", "sparkpair", "-i", inventory(), *args], stdout=subprocess.PIPE,
                          text=True, timeout=timeout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("train-draft-bench"))
    args = parser.parse_args()
    setup = sparkpair("setup-network", "--yes")
    if setup.returncode != 0:
        print("setup-network failed", file=sys.stderr)
        return 1
    name = f"local/qwen3-tiny-eagle3-{args.steps}steps-{int(time.time())}"
    begin = time.monotonic()
    run = sparkpair("train-draft", PROFILE, "--name", name, "--steps", str(args.steps), "--image", IMAGE,
                    "--max-tokens", str(args.max_tokens), "--requests", str(args.requests), "--out", str(args.out),
                    "--json")
    took = time.monotonic() - begin
    if run.returncode != 0:
        print(f"train-draft failed (exit {run.returncode})", file=sys.stderr)
        return 1
    result = json.loads(run.stdout)
    figures = {label.split(" (")[0]: value for label, value in result["drafts"].items()}
    current, trained = figures["current draft"], figures["trained draft"]
    for label, value in figures.items():
        print(f"{label}: acceptance {value['acceptance_rate']}, {value['tokens_per_s']} tokens/s, "
              f"mean accepted length {value['mean_accepted_length']}")
    print(f"train-draft took {took:.0f} s; files in {args.out}")
    print(f"draft acceptance: random {current['acceptance_rate'] or 0:.3f}, trained {trained['acceptance_rate'] or 0:.3f} "
          f"after {args.steps} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
