"""Unit tests' shared check: a scripted node (tests/fakenode.py) that received a command nothing scripted
fails its test, even when the code under test caught the AssertionError it raised."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakenode import UNEXPECTED, assert_no_unexpected


@pytest.fixture(autouse=True)
def _fake_nodes_saw_only_scripted_commands() -> Iterator[None]:
    UNEXPECTED.clear()
    yield
    assert_no_unexpected()
