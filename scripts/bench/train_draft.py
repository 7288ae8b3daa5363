#!/usr/bin/env python3
"""`sparkpair train-draft` on the simulated pair with the real vLLM and the real ModelOpt, trained long enough
to show acceptance: the tiny random Qwen3-MoE target's own greedy answers to the bundled prompts, an Eagle3
head trained on them for STEPS steps on CPU (online: the target in memory beside the draft; offline: the
target's hidden states computed by vLLM at TP=2 across both nodes, then only the draft trains), exported,
served by vLLM beside the target, and bench on the held-back prompts against the testbed's random Eagle3
draft (which accepts ~0).

    flock /tmp/sparkpair-pair.lock .venv/bin/python scripts/bench/train_draft.py [--mode online|offline]
        [--steps N] [--max-tokens N] [--nodes K] [--draft-vocab N]

Needs the simulated pair (`scripts/testbed up`); it sets up the rest itself (`scripts/testbed vllm` and
`scripts/testbed modelopt`: the images and the tiny models, idempotent). Each run trains under a new name (the
mode and step count in it), so nothing is resumed from an earlier run. The last line is
`draft acceptance (MODE): random A0, trained A1 after N steps`.
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


def testbed(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    """`scripts/testbed ARGS`, its progress passed through to stderr."""
    return subprocess.run([str(TESTBED), *args], stdout=subprocess.PIPE, text=True, timeout=timeout)


def inventory() -> str:
    """The simulated pair's inventory path (`scripts/testbed inventory`)."""
    return testbed("inventory").stdout.strip()


def sparkpair(*args: str, timeout: float = 7200) -> subprocess.CompletedProcess[str]:
    """The real CLI against the simulated pair; its progress passes through to stderr."""
    return subprocess.run([sys.executable, "-m", "sparkpair", "-i", inventory(), *args], stdout=subprocess.PIPE,
                          text=True, timeout=timeout)


def set_up() -> str | None:
    """The pair up, the real vLLM and ModelOpt on it; None, or the one line saying what to run first."""
    if testbed("status").returncode != 0:
        return "the simulated pair is not up: run `scripts/testbed up` first"
    for part in ("vllm", "modelopt"):
        if testbed(part).returncode != 0:
            return f"`scripts/testbed {part}` failed (its lines above say why); run it alone to see"
    if sparkpair("setup-network", "--yes").returncode != 0:
        return "`sparkpair setup-network --yes` failed on the simulated pair (its lines above say why)"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=("online", "offline"), default="online")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--draft-vocab", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("train-draft-bench"))
    args = parser.parse_args()
    problem = set_up()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    name = f"local/qwen3-tiny-eagle3-{args.mode}-{args.steps}steps-{int(time.time())}"
    begin = time.monotonic()
    run = sparkpair("train-draft", PROFILE, "--name", name, "--mode", args.mode, "--steps", str(args.steps),
                    "--image", IMAGE, "--max-tokens", str(args.max_tokens), "--max-length", str(args.max_length),
                    "--requests", str(args.requests), "--nodes", str(args.nodes), "--draft-vocab",
                    str(args.draft_vocab), "--out", str(args.out), "--json")
    took = time.monotonic() - begin
    if run.returncode != 0:
        print(f"train-draft failed (exit {run.returncode})", file=sys.stderr)
        return 1
    result = json.loads(run.stdout)
    figures = {label.split(" (")[0]: value for label, value in result["drafts"].items()}
    current, trained = figures["current draft"], figures["trained draft"]
    for line in result.get("plan", []):
        print(f"plan: {line}")
    for label, value in figures.items():
        print(f"{label}: acceptance {value['acceptance_rate']}, {value['tokens_per_s']} tokens/s, "
              f"mean accepted length {value['mean_accepted_length']}")
    print(f"train-draft took {took:.0f} s; files in {args.out}")
    print(f"draft acceptance ({args.mode}): random {current['acceptance_rate'] or 0:.3f}, trained "
          f"{trained['acceptance_rate'] or 0:.3f} after {args.steps} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
