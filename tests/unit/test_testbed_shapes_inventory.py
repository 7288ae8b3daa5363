"""The simulated cluster's inventories (sparkpair_testbed.inventory for each shape of shape.py) are valid
sparkpair inventories whose expected links are exactly the cables the testbed wires: a ring of three as
NVIDIA's Connect Three Sparks, a switch of four, and the pair as always."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from sparkpair_testbed import inventory, shape

from sparkpair.inventory import Inventory
from sparkpair.inventory.load import parse_inventory


def rendered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wanted: shape.Shape) -> Inventory:
    """The testbed's inventory for WANTED, parsed and validated by sparkpair."""
    monkeypatch.setattr(shape, "SHAPE_FILE", tmp_path / "shape.json")
    shape.record(wanted)
    return parse_inventory(yaml.safe_load(inventory.render()), "testbed inventory")


def wired(wanted: shape.Shape) -> set[frozenset[tuple[str, str]]]:
    """The (node, interface) ends the testbed's bridges join, one set per bridge of two or more ends."""
    names = {node.letter: node.name for node in shape.nodes_of(wanted)}
    return {frozenset((names[peer[0]], peer[2:]) for peer in peers) for peers in shape.cable_plan(wanted).values()}


@pytest.mark.parametrize("wanted", [shape.Shape(3, "ring"), shape.Shape(4, "switch"), shape.Shape(3, "switch")],
                         ids=str)
def test_a_larger_shapes_inventory_expects_exactly_the_cables_the_testbed_wires(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wanted: shape.Shape) -> None:
    parsed = rendered(tmp_path, monkeypatch, wanted)
    assert parsed.topology == wanted.topology and len(parsed.nodes) == wanted.count
    links = {frozenset({(link.node_a, link.port_a), (link.node_b, link.port_b)}) for link in parsed.links()}
    if wanted.topology == "ring":
        assert links == wired(wanted) and len(links) == 6
    else:  # through a switch every two nodes' same twin meet on that twin's bridge
        for bridge in wired(wanted):
            assert {frozenset({first, second}) for first in bridge for second in bridge if first < second} <= links
        assert len(links) == 2 * wanted.count * (wanted.count - 1) // 2


def test_the_pairs_inventory_is_still_a_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = rendered(tmp_path, monkeypatch, shape.PAIR)
    assert parsed.topology == "pair" and [node.name for node in parsed.nodes] == ["spark-a", "spark-b"]
    assert [(link.port_a, str(link.subnet)) for link in parsed.links()] == [
        ("enp1s0f1np1", "198.19.1.0/24"), ("enP2p1s0f1np1", "198.19.2.0/24")]
