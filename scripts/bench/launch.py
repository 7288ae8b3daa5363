#!/usr/bin/env python3
"""Launch-to-ready wall time on the simulated pair, minus the stand-in engine's configured load
time: sparkpair's orchestration overhead (aim: under 5 s). Models present, image loaded, engine
stopped before each run (so containers are started each time). Needs root and the pair.

Usage: .venv/bin/python scripts/bench/launch.py [RUNS]
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
        data["container"]["env"] = {"SIM_LOAD_SECONDS": str(LOAD_SECONDS)}
        path = str(Path(tmp) / "inventory.yaml")
        Path(path).write_text(yaml.safe_dump(data))
        for step in (("setup-network", "--yes"), ("launch",), ("stop",)):  # network, models, image in place
            result = sparkpair(path, *step)
            if result.returncode != 0:
                sys.exit(f"{' '.join(step)} failed:\n{result.stderr}")
        overheads, totals = [], []
        for _ in range(runs):
            start = time.perf_counter()
            result = sparkpair(path, "launch")
            total = time.perf_counter() - start
            if result.returncode != 0:
                sys.exit(f"launch failed:\n{result.stderr}")
            totals.append(total)
            overheads.append(total - LOAD_SECONDS)
            sparkpair(path, "stop")
    print(f"launch to ready: median {statistics.median(totals):.2f} s over {runs} runs "
          f"{[round(t, 2) for t in totals]}")
    print(f"orchestration overhead (minus the stand-in's {LOAD_SECONDS:.0f} s load): "
          f"median {statistics.median(overheads):.2f} s (aim: < 5 s)")


if __name__ == "__main__":
    main()
