#!/usr/bin/env python3
"""How long `sparkpair diagnose` takes on 8 MiB of hostile shapes, against a floor measured in the same run.

- diagnose: `python -m sparkpair diagnose FILE` as an operator runs it, wall and CPU time of the process.
- floor:    `python -c` reading the same file and cutting it into lines (`read().splitlines()`): the least
            any Python tool that looks at every line can take.

Shapes (each 8 MiB, one stage line first so that no input is "empty"): empty lines and `a` lines (issue 33:
138 s and 65 s before, the aim is under 2 s), distinct short lines, a failure line repeated, a stage word
on every line, and real log lines (the corpus, cycled). Prints the median of --runs runs of each and the
ratio diagnose/floor. Needs no node and no lock:

    .venv/bin/python scripts/bench/diagnose.py [--runs 3]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EIGHT_MIB = 8 * 1024 * 1024


def shapes() -> dict[str, bytes]:
    real = b"".join(path.read_bytes() for path in sorted((ROOT / "tests" / "fixtures" / "logs").glob("*.log")))
    numbered = b"".join(b"%d\n" % number for number in range(EIGHT_MIB // 7))
    warm = b"".join(b"warm%d\n" % number for number in range(EIGHT_MIB // 10))
    bodies = {"empty lines": b"\n" * EIGHT_MIB, "a lines": b"a\n" * (EIGHT_MIB // 2), "distinct short lines": numbered,
              "a failure line repeated": b"Host key verification failed.\n" * (EIGHT_MIB // 30),
              "a stage word on every line": warm, "real logs cycled": real * (EIGHT_MIB // len(real))}
    return {name: (b"mpi_rank: 0\n" + body)[:EIGHT_MIB] for name, body in bodies.items()}


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for name, data in shapes().items():
            path = Path(folder) / "input.log"
            path.write_bytes(data)
            runs = [timed([sys.executable, "-m", "sparkpair", "diagnose", str(path)]) for _ in range(args.runs)]
            floors = [timed([sys.executable, "-c", f"open({str(path)!r}, 'rb').read().splitlines()"])[0]
                      for _ in range(args.runs)]
            wall = statistics.median(run[0] for run in runs)
            cpu = statistics.median(run[1] for run in runs)
            floor = statistics.median(floors)
            print(f"{name:28s} diagnose {wall:5.2f} s wall, {cpu:5.2f} s CPU; floor {floor:5.2f} s; "
                  f"ratio {wall / floor:4.1f}")


if __name__ == "__main__":
    main()
