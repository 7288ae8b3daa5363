#!/usr/bin/env python3
"""Wall time of `sparkpair setup-network --yes` on the simulated pair: cold (fresh twins, no keys)
and a no-op second run, interleaved with the floor (two parallel `ssh NODE true`, scripts/bench/floor.py);
prints the no-op's ratio to the floor (aim: at most 2.5x). Needs root and the pair (scripts/testbed up);
takes the pair's lock.

Usage: .venv/bin/python scripts/bench/setup_network.py [RUNS]
"""

from __future__ import annotations

import fcntl
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from floor import floor, timed  # scripts/bench/floor.py, beside this script

from sparkpair import paths
from sparkpair.inventory import read_inventory

ROOT = Path(__file__).resolve().parents[2]
TESTBED = ROOT / "scripts" / "testbed"


def inventory() -> str:
    return subprocess.run([str(TESTBED), "inventory"], capture_output=True, text=True, check=True).stdout.strip()


def reset_spec(path: str) -> str:
    """What `scripts/testbed reset` takes back for a cold run (JSON): the engine and everything
    setup-network made, as sparkpair.paths names it (tests/conftest.py says the same for the tests)."""
    inventory = read_inventory(path)
    return json.dumps({"containers": [inventory.container.name],
                       "paths": [paths.STATE_DIR, paths.NODE_KEY, f"{paths.NODE_KEY}.pub", paths.KNOWN_HOSTS,
                                 paths.NETPLAN_PATH, paths.SYSTEM_BACKUPS],
                       "authorized_key_comments": [paths.node_key_comment("*")],
                       "interfaces": sorted({name for node in inventory.nodes for name in node.links})})


def timed_setup(path: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sparkpair", "-i", path, "setup-network", "--yes"], cwd=ROOT,
                   check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with open("/tmp/sparkpair-pair.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run([str(TESTBED), "up"], check=True, capture_output=True)
        path = inventory()
        spec = reset_spec(path)
        parsed = read_inventory(path)
        cold, noop, floors = [], [], []
        for _ in range(runs):
            subprocess.run([str(TESTBED), "reset", "--spec-json", spec], check=True, capture_output=True)
            cold.append(timed_setup(path))
            timed_setup(path)  # the first no-op after a cold run warms what the cold run left
            for _ in range(2):
                floors.append(timed(lambda: floor(parsed)))
                noop.append(timed_setup(path))
    print(f"setup-network cold (netplan, keys, host keys, verified both ways): "
          f"median {statistics.median(cold):.2f} s over {runs} runs {[round(t, 2) for t in cold]}")
    print(f"setup-network no-op (plan, nothing to change, verified again):      "
          f"median {statistics.median(noop):.2f} s {[round(t, 2) for t in noop]}")
    print(f"floor (ssh NODE true, both at once): median {statistics.median(floors):.2f} s "
          f"{[round(t, 2) for t in floors]}")
    print(f"no-op / floor = {statistics.median(noop) / statistics.median(floors):.1f}x (aim: at most 2.5x)")


if __name__ == "__main__":
    main()
