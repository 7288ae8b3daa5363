"""Unit tests' shared fixtures: `ring_file` (tests/unit/cluster_nodes.py), and a check: a scripted node
(tests/fakenode.py) that received a command nothing scripted fails its test, even when the code under test
caught the AssertionError it raised."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cluster_nodes import ring_file  # noqa: F401 (a fixture the cluster CLI tests share)
from fakenode import UNEXPECTED, assert_no_unexpected


@pytest.fixture(autouse=True)
def _fake_nodes_saw_only_scripted_commands() -> Iterator[None]:
    UNEXPECTED.clear()
    yield
    assert_no_unexpected()
