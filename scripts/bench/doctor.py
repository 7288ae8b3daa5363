#!/usr/bin/env python3
"""How long `sparkpair doctor` takes, against the floor and against a naive doctor.

- doctor: the real CLI as an operator runs it (`python -m sparkpair -i INVENTORY doctor`, its tables
          written to a pipe), wall time of the process; the aim is on this one.
- json:   the same with `--json` (what a script runs: no tables).
- floor:  `ssh -o BatchMode=yes NODE true` to both nodes at once, with the inventory's key and
          known_hosts: the least any tool that logs in to both nodes can take.
- naive:  every probe doctor runs, each as its own `ssh NODE COMMAND` (a new connection per
          probe), one after the other, node after node: what doctor would cost without batching.

Prints the median of each over --runs interleaved runs and the ratios doctor/floor (the aim is at most 2.5)
and naive/doctor. It holds the simulated pair's lock (/tmp/sparkpair-pair.lock, shared with the
tests and the demo) while it measures:

    .venv/bin/python scripts/bench/doctor.py
"""

from __future__ import annotations

import argparse
import fcntl
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

from floor import floor, ssh_argv, timed  # scripts/bench/floor.py, beside this script

from sparkpair.engine.collect import node_probes
from sparkpair.inventory import Inventory, read_inventory
from sparkpair.inventory.profiles import Profile
from sparkpair.probes.host import CLOCK
from sparkpair.transport import PATH_PREFIX, command_text

ROOT = Path(__file__).resolve().parents[2]

DEFAULT_INVENTORY = "/var/lib/sparkpair-testbed/inventory.yaml"


# doctor's last line: counts of each status (INFO since the playbook rows), then the time
SUMMARY = re.compile(r"^[0-9]+ FAIL, [0-9]+ WARN, [0-9]+ OK, [0-9]+ SKIP(, [0-9]+ INFO)? in [0-9.]+ s$", re.MULTILINE)


def doctor(inventory_path: str, profile: str | None, inside: list[float] | None = None) -> None:
    """The CLI: with its tables, or with --json when inside is given (its own elapsed_s, connect, probes and
    checks, is appended to inside)."""
    argv = [sys.executable, "-m", "sparkpair", "-i", inventory_path, "doctor", *([profile] if profile else []),
            *(["--json"] if inside is not None else [])]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode not in (0, 1):  # 1 is a FAIL finding, still a complete run
        raise SystemExit(f"doctor exited {proc.returncode}: {proc.stderr.strip()}")
    if inside is None:
        if not SUMMARY.search(proc.stdout):
            raise SystemExit(f"doctor printed no summary line: {proc.stdout[-500:]}")
    else:
        inside.append(json.loads(proc.stdout)["elapsed_s"])


def naive(inventory: Inventory, profile: Profile) -> None:
    """One SSH connection and command per probe, sequentially (the same probes doctor batches)."""
    for node in inventory.nodes:
        for probe in [*node_probes(inventory, node, profile), CLOCK]:
            command = PATH_PREFIX + command_text(probe.command, probe.sudo)
            subprocess.run(ssh_argv(inventory, node) + [command], capture_output=True, stdin=subprocess.DEVNULL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", default=DEFAULT_INVENTORY)
    parser.add_argument("--profile", default=None)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--naive-runs", type=int, default=1, help="runs of the naive doctor (about 20 s each)")
    args = parser.parse_args()
    inventory = read_inventory(args.inventory)
    profile = inventory.profile(args.profile)
    probes = sum(len(node_probes(inventory, node, profile)) + 1 for node in inventory.nodes)
    inside: list[float] = []
    lock = open("/tmp/sparkpair-pair.lock", "w")  # noqa: SIM115 (held until the process ends)
    fcntl.flock(lock, fcntl.LOCK_EX)
    runs: dict[str, list[float]] = {"doctor": [], "json": [], "floor": [], "naive": []}
    doctor(args.inventory, args.profile)  # warm: the nodes' page cache, this machine's bytecode
    for index in range(args.runs):  # interleaved, so that a busy moment weighs on all alike
        runs["floor"].append(timed(lambda: floor(inventory)))
        runs["doctor"].append(timed(lambda: doctor(args.inventory, args.profile)))
        runs["json"].append(timed(lambda: doctor(args.inventory, args.profile, inside)))
        if index < args.naive_runs:
            runs["naive"].append(timed(lambda: naive(inventory, profile)))
    runs = {name: times for name, times in runs.items() if times}  # --naive-runs 0: no naive figure
    medians = {name: statistics.median(times) for name, times in runs.items()}
    for name, times in runs.items():
        print(f"{name:7s} median {medians[name]:6.2f} s   runs: {' '.join(f'{t:.2f}' for t in times)}")
    print(f"doctor --json's own elapsed_s median {statistics.median(inside):.2f} s (the rest is Python start-up, "
          "imports and the exit)")
    print(f"naive = {probes} SSH connections, one per probe")
    print(f"doctor --json / floor = {medians['json'] / medians['floor']:.1f}x")
    print(f"doctor / floor = {medians['doctor'] / medians['floor']:.1f}x (aim: at most 2.5x)")
    if "naive" in medians:
        print(f"naive / doctor = {medians['naive'] / medians['doctor']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
