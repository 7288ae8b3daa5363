"""sparkpair's fixtures on the simulated pair (the pair's own fixtures come from the testbed's
pytest plugin, sparkpair_testbed.plugin: `testbed`, `healed`, `pristine`; what a reset takes
back is sparkpair's reset spec, in tests/conftest.py).

`sparkpair` runs the real CLI against the pair's inventory; `networked` is the pair after a
successful `sparkpair setup-network`, `stopped` a networked pair with no engine running.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from sparkpair import paths

ROOT = Path(__file__).resolve().parents[2]
NETWORKED = "sparkpair setup-network"  # in testbed.since_reset once it succeeded


def pytest_collection_modifyitems(items):
    """Every test under tests/integration is an integration test."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@dataclass
class Run:
    """A finished sparkpair process."""

    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def run_sparkpair(inventory: Path, *args, env: dict | None = None, timeout: float = 600,
                  input_text: str | None = None) -> Run:
    """Run the real CLI (`python -m sparkpair -i INVENTORY ARGS`) as the operator would (input_text: its stdin)."""
    environment = {**os.environ, **(env or {})}
    environment.pop("SPARKPAIR_INVENTORY", None)
    proc = subprocess.run([sys.executable, "-m", "sparkpair", "-i", str(inventory), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=environment, input=input_text)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def has_netplan(bed, node) -> bool:
    """Whether NODE holds sparkpair's netplan file."""
    return bed.exec(node, f"test -e {paths.NETPLAN_PATH}", check=False).returncode == 0


def ensure_networked(bed) -> None:
    """Run `sparkpair setup-network` unless it succeeded since the last reset (`pristine`)."""
    if NETWORKED not in bed.since_reset:
        run = run_sparkpair(bed.inventory, "setup-network", "--yes")
        if run.code != 0:
            pytest.fail(f"setup-network failed:\n{run.text}")
        bed.since_reset.add(NETWORKED)


def with_forged_host_key(bed, tmp_path: Path, address: str) -> Path:
    """The pair's inventory with a known_hosts that holds a freshly made, wrong key for address."""
    data = yaml.safe_load(Path(bed.inventory).read_text())
    real = Path(data["cluster"]["known_hosts"]).read_text().splitlines()
    forged = bed.exec("spark-a", "rm -f /tmp/forged-hk* && ssh-keygen -q -t ed25519 -N '' -f /tmp/forged-hk && "
                                 "cat /tmp/forged-hk.pub && rm -f /tmp/forged-hk*").stdout.split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text("\n".join(line for line in real if not line.startswith(f"{address} "))
                     + f"\n{address} {' '.join(forged)}\n")
    data["cluster"]["known_hosts"] = str(known)
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def sparkpair(testbed):
    """sparkpair(*args, env=None) -> Run against the simulated pair's inventory."""
    return lambda *args, **kw: run_sparkpair(testbed.inventory, *args, **kw)


@pytest.fixture
def networked(testbed):
    """The pair after a successful `sparkpair setup-network`: run again only after `pristine` undid it."""
    ensure_networked(testbed)
    return testbed


@pytest.fixture
def stopped(networked):
    """A networked pair with no engine running before and after the test (whatever inventory it used)."""
    run_sparkpair(networked.inventory, "stop")
    yield networked
    run_sparkpair(networked.inventory, "stop")
