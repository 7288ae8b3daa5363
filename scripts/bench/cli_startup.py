#!/usr/bin/env python3
"""How long `sparkpair --help` takes, and which heavy libraries it imports (aim: at most 0.15 s, none).

Usage: .venv/bin/python scripts/bench/cli_startup.py [RUNS]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("fabric", "paramiko", "docker", "pydantic", "jinja2", "rich", "yaml")


def time_help(runs: int) -> list[float]:
    """Wall seconds of `python -m sparkpair --help`, once per run."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "sparkpair", "--help"], cwd=ROOT, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def heavy_imports() -> list[str]:
    code = ("import sys; from sparkpair.cli import main; main(['--help']);"
            f"print('HEAVY:' + ','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True).stdout
    marker = [line for line in out.splitlines() if line.startswith("HEAVY:")]
    return [m for m in marker[-1].removeprefix("HEAVY:").split(",") if m] if marker else ["(unknown)"]


def baseline(runs: int) -> float:
    """Median wall seconds of a bare `python -c pass` (the interpreter's own start-up)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    times = time_help(runs)
    print(f"sparkpair --help: median {statistics.median(times) * 1000:.0f} ms, "
          f"max {max(times) * 1000:.0f} ms over {runs} runs (aim: at most 150 ms)")
    print(f"python -c pass:   median {baseline(runs) * 1000:.0f} ms (the interpreter alone)")
    heavy = heavy_imports()
    print(f"heavy libraries imported by --help: {', '.join(heavy) if heavy else 'none'}")


if __name__ == "__main__":
    main()
