"""Unit tests' shared fixtures: `ring_file` (tests/unit/cluster_nodes.py), `needs_mpi`, and a check: a scripted node
(tests/fakenode.py) that received a command nothing scripted fails its test, even when the code under test
caught the AssertionError it raised.

The unit tests need `pip install -e '.[test]'` and nothing more: the testbed package (tests/testbed, standard
library only) is imported from the tree when it is not installed, and the few tests that run OpenMPI's mpirun
with mpi4py (the `mpi` extra and Debian's openmpi-bin, which scripts/setup installs) or `netplan generate` skip
saying so where they are missing, unless SPARKPAIR_REQUIRE_TOOLS is set (scripts/test sets it: CI never skips them)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

if importlib.util.find_spec("sparkpair_testbed") is None:   # not installed: the tree's own copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "testbed"))
from cluster_nodes import ring_file  # noqa: F401 (a fixture the cluster CLI tests share)
from fakenode import UNEXPECTED, assert_no_unexpected


@pytest.fixture
def needs_mpi() -> None:
    """Skip, with the reason, a test that runs mpirun with mpi4py where either is missing (not under scripts/test)."""
    missing = [what for what, found in (("OpenMPI's mpirun (Debian: openmpi-bin)", shutil.which("mpirun")),
                                         ("mpi4py (pip install -e '.[test,mpi]')", importlib.util.find_spec("mpi4py")))
               if not found]
    if missing and not os.environ.get("SPARKPAIR_REQUIRE_TOOLS"):
        pytest.skip(f"needs {' and '.join(missing)}; scripts/setup installs both")
    assert not missing, f"{' and '.join(missing)} missing: scripts/setup installs it"


@pytest.fixture(autouse=True)
def _fake_nodes_saw_only_scripted_commands() -> Iterator[None]:
    UNEXPECTED.clear()
    yield
    assert_no_unexpected()
