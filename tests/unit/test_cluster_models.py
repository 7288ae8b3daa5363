"""Models on every node of a ring or a switch: the copies fan out in rounds, each node receiving from a node one
cable away that holds the verified copy, over the twins that link the two; the pair's copy as it always was
(tests/unit/test_modelsync.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cluster_nodes import RING, SWITCH
from fakenode import FakeNode, fake_pair
from test_modelsync import DRAFT, MISSING, TARGET, manifest
from test_modelsync import world as modelsync_world
from test_topology import F0, F0B, F1, F1B

from sparkpair.engine import modelcopy, modelsync
from sparkpair.inventory import Inventory, read_inventory
from sparkpair.progress import collect

world = modelsync_world  # the fixture: each node's cache and verdicts, read and verify faked
SIM = read_inventory(Path(__file__).resolve().parents[1] / "fixtures" / "inventory" / "sim.yaml")
BOTH = {TARGET: manifest(), DRAFT: manifest("r2")}
NONE = {TARGET: MISSING, DRAFT: MISSING}


def test_the_twins_a_copy_runs_over_are_the_links_between_the_two_nodes() -> None:
    assert modelcopy.twins(SIM, "spark-a", "spark-b") == [("enp1s0f1np1", "198.19.1.11", "198.19.1.12"),
                                                           ("enP2p1s0f1np1", "198.19.2.11", "198.19.2.12")]
    assert modelcopy.twins(RING, "spark-a", "spark-b") == [(F0, "198.19.10.1", "198.19.10.2"),
                                                           (F0B, "198.19.11.1", "198.19.11.2")]
    assert modelcopy.twins(RING, "spark-c", "spark-a") == [(F0, "198.19.30.1", "198.19.30.2"),
                                                           (F0B, "198.19.31.1", "198.19.31.2")]
    assert modelcopy.twins(SWITCH, "spark-d", "spark-b") == [(F1, "198.19.1.14", "198.19.1.12"),
                                                             (F1B, "198.19.2.14", "198.19.2.12")]


def synced(world: dict[str, Any], monkeypatch: pytest.MonkeyPatch, inventory: Inventory,
           caches: dict[str, list[dict[str, Any]]]) -> list[tuple[str, str]]:
    """sync over every node of inventory from these caches; (source, destination) of each copy, in order."""
    copies: list[tuple[str, str]] = []

    def copy(source: FakeNode, dest: FakeNode, inventory: object, blobs: list[modelcopy.Blob], snapshots: object,
             transport: str, progress: object, cancel: object = None) -> modelcopy.CopyResult:
        copies.append((source.name, dest.name))
        return modelcopy.CopyResult(source.name, dest.name, transport, verified=[blob.name for blob in blobs])

    monkeypatch.setattr(modelcopy, "copy", copy)
    world["caches"] = caches
    names = [node.name for node in inventory.nodes]
    pair = fake_pair(*(FakeNode(name) for name in names))
    assert modelsync.ensure_models(pair, inventory, [TARGET, DRAFT], names, "hub", collect([])) == \
        {TARGET: "r1", DRAFT: "r2"}
    assert sorted(entry[1] for entry in world["log"] if entry[0] == "link") == names  # linked on every node
    return copies


def test_through_a_switch_every_holder_sends_at_once(world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    caches = {"spark-a": [BOTH], "spark-b": [BOTH], "spark-c": [NONE, BOTH], "spark-d": [NONE, BOTH]}
    copies = synced(world, monkeypatch, SWITCH, caches)
    assert sorted(copies) == [("spark-a", "spark-c"), ("spark-b", "spark-d")]  # one round, two senders


def test_in_a_ring_a_node_that_received_can_send_on(world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    caches = {"spark-a": [BOTH], "spark-b": [NONE, BOTH], "spark-c": [NONE, BOTH]}
    copies = synced(world, monkeypatch, RING, caches)
    assert copies[0] == ("spark-a", "spark-b") and copies[1][1] == "spark-c" and len(copies) == 2


def test_a_node_that_holds_the_models_already_gets_nothing(world: dict[str, Any],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    caches = {"spark-a": [BOTH], "spark-b": [BOTH], "spark-c": [BOTH]}
    assert synced(world, monkeypatch, RING, caches) == []
