"""The order the testbed's plugin gives a session: the pair's tests first, then the tests on a larger shape, then a
test that takes the pair down; within each group the collected order."""
from __future__ import annotations

import pytest
from sparkpair_testbed.plugin import pytest_collection_modifyitems


class Collected:
    """What the plugin reads of a collected test: its name, fixtures and markers."""

    def __init__(self, name: str, fixtures: tuple = ("testbed",), markers: tuple = ()) -> None:
        self.name, self.fixturenames, self.markers = name, fixtures, list(markers)

    def get_closest_marker(self, name: str):
        return next((mark for mark in self.markers if mark.name == name), None)

    def add_marker(self, mark) -> None:
        self.markers.append(mark)


def test_the_down_test_runs_last_after_the_pair_tests_and_the_larger_shapes() -> None:
    items = [Collected("shape_a", ("testbed_shape",)), Collected("down", markers=(pytest.mark.takes_the_pair_down.mark,)),
             Collected("triton"), Collected("shape_b", ("testbed", "testbed_shape")), Collected("vllm")]
    pytest_collection_modifyitems(items)
    assert [item.name for item in items] == ["triton", "vllm", "shape_a", "shape_b", "down"]
