"""Shared pytest setup: paths, the --update-golden switch, and what sparkpair leaves on a node.

The simulated pair's fixtures come from the testbed's pytest plugin (sparkpair_testbed); the
testbed knows nothing of sparkpair, so sparkpair says here what a reset of a node must take
back (`testbed_reset_spec`). It lives at the top of tests/ because the pair is one per session:
the testbed's own tests (tests/testbed/tests) reset the same pair sparkpair's tests used.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkpair import paths
from sparkpair.inventory import Inventory, read_inventory
from sparkpair.network import watchdog

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
GOLDEN = ROOT / "tests" / "golden"
# A netplan file of someone else's that claims a twin (tests/integration/test_setup_network.py).
FOREIGN_NETPLAN = "/etc/netplan/40-cx7.yaml"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files from current output")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture
def example_inventory_path() -> Path:
    return ROOT / "inventory.example.yaml"


def sparkpair_reset_spec(inventory: Inventory) -> dict:
    """What sparkpair's commands (and its tests) leave on a node, as a testbed reset spec: the
    engine container, its state, node key, known_hosts (and the known_hosts.old that `ssh-keygen -R`, the
    fix setup-network names for a reinstalled node, leaves), backups and first-touch snapshot, its netplan
    file, setup-network's watchdog and its log, the node keys it authorized, and the QSFP twins it
    configured."""
    return {
        "containers": [inventory.container.name],
        "paths": [paths.STATE_DIR, paths.NODE_KEY, f"{paths.NODE_KEY}.pub", paths.KNOWN_HOSTS,
                  f"{paths.KNOWN_HOSTS}.old", paths.NETPLAN_PATH, FOREIGN_NETPLAN, paths.SYSTEM_BACKUPS,
                  paths.WATCHDOG_DIR, paths.WATCHDOG_LOG, watchdog.BOOT_DIR],
        "authorized_key_comments": [paths.node_key_comment("*")],
        "interfaces": sorted({name for node in inventory.nodes for name in node.links}),
    }


@pytest.fixture(scope="session")
def testbed_reset_spec(testbed_pair) -> dict:
    """sparkpair's reset spec for the simulated pair (the testbed plugin's `pristine` uses it)."""
    return sparkpair_reset_spec(read_inventory(testbed_pair.inventory))
