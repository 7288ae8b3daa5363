#!/usr/bin/env python3
"""Launch-to-ready wall time on the simulated pair, minus the stand-in engine's configured load
time: sparkpair's orchestration overhead (aim: under 3 s), interleaved with the floor (two parallel
`ssh NODE true`, scripts/bench/floor.py) and printed as a ratio to it too. Models present, image loaded,
engine stopped before each run (so containers are started each time). Needs root and the pair.

Usage: .venv/bin/python scripts/bench/launch.py [RUNS]
       .venv/bin/python scripts/bench/launch.py --runtime vllm [RUNS]   (scripts/bench/launch_vllm.py: the real
       vLLM, sparkpair's launch against the playbook's start by hand; prints `vllm launch: ... ratio R`)
       .venv/bin/python scripts/bench/launch.py --runtime triton [RUNS]   (scripts/bench/launch_triton.py: the
       real Triton with the real vLLM, against seed 003's start by hand; prints `triton launch: ... ratio R`)
"""

from __future__ import annotations

import fcntl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from floor import floor, timed  # scripts/bench/floor.py, beside this script

from sparkpair.inventory import read_inventory

ROOT = Path(__file__).resolve().parents[2]
TESTBED = ROOT / "scripts" / "testbed"
LOAD_SECONDS = 2.0


def sparkpair(path: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkpair", "-i", path, *args], cwd=ROOT, capture_output=True,
                          text=True)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with open("/tmp/sparkpair-pair.lock", "w") as lock, tempfile.TemporaryDirectory() as tmp:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run([str(TESTBED), "up"], check=True, capture_output=True)
        base = subprocess.run([str(TESTBED), "inventory"], capture_output=True, text=True, check=True).stdout.strip()
        data = yaml.safe_load(Path(base).read_text())
        data["container"].setdefault("env", {})["SIM_LOAD_SECONDS"] = str(LOAD_SECONDS)
        path = str(Path(tmp) / "inventory.yaml")
        Path(path).write_text(yaml.safe_dump(data))
        for step in (("setup-network", "--yes"), ("launch",), ("stop",)):  # network, models, image in place
            result = sparkpair(path, *step)
            if result.returncode != 0:
                sys.exit(f"{' '.join(step)} failed:\n{result.stderr}")
        overheads, totals, floors = [], [], []
        parsed = read_inventory(path)
        for _ in range(runs):
            floors.append(timed(lambda: floor(parsed)))
            start = time.perf_counter()
            result = sparkpair(path, "launch")
            total = time.perf_counter() - start
            if result.returncode != 0:
                sys.exit(f"launch failed:\n{result.stdout}{result.stderr}")
            totals.append(total)
            overheads.append(total - LOAD_SECONDS)
            sparkpair(path, "stop")
    print(f"launch to ready: median {statistics.median(totals):.2f} s over {runs} runs "
          f"{[round(t, 2) for t in totals]}")
    print(f"orchestration overhead (minus the stand-in's {LOAD_SECONDS:.0f} s load): "
          f"median {statistics.median(overheads):.2f} s (aim: < 3 s)")
    print(f"floor (ssh NODE true, both at once): median {statistics.median(floors):.2f} s; "
          f"overhead / floor = {statistics.median(overheads) / statistics.median(floors):.1f}x")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--runtime"]:
        if sys.argv[2:3] not in (["vllm"], ["triton"]):
            sys.exit("usage: launch.py --runtime vllm|triton [RUNS] (TensorRT-LLM's stand-in: launch.py [RUNS])")
        import launch_triton  # scripts/bench/launch_triton.py and launch_vllm.py, beside this script
        import launch_vllm

        (launch_vllm if sys.argv[2] == "vllm" else launch_triton).main(int(sys.argv[3]) if len(sys.argv) > 3 else 2)
    else:
        main()
