"""ensure_models' round trips against fake nodes: a warm launch reads each cache once; what is fetched
or copied is verified by manifest afterwards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkpair import modelsync
from sparkpair.errors import SparkpairError
from sparkpair.inventory import read_inventory
from sparkpair.probes.models import RepoManifest

TARGET, DRAFT = "org/target", "org/draft"


def manifest(revision: str = "r1", size: int = 10) -> RepoManifest:
    return RepoManifest(revision, {"blob": size}, {"config.json": "blob"})


MISSING = RepoManifest(None)


class Node:
    def __init__(self, name: str) -> None:
        self.name = name


class FakePair:
    def __init__(self) -> None:
        self.nodes = {"spark-a": Node("spark-a"), "spark-b": Node("spark-b")}

    def each(self, action: Any, names: list[str]) -> dict[str, Any]:
        return {name: action(self.nodes[name]) for name in names}


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Each node's cache (successive reads pop successive states) and a log of what was done."""
    state: dict[str, Any] = {"caches": {}, "log": []}

    def read(connection: Node, inventory: object, repos: list[str]) -> dict[str, RepoManifest]:
        state["log"].append(("read", connection.name, tuple(repos)))
        cache = state["caches"][connection.name]
        current = cache.pop(0) if len(cache) > 1 else cache[0]
        return {repo: current[repo] for repo in repos}

    monkeypatch.setattr(modelsync, "read_manifests", read)
    monkeypatch.setattr(modelsync, "fetch_on_head", lambda head, inv, repo, source, progress:
                        state["log"].append(("fetch", repo)))
    monkeypatch.setattr(modelsync, "copy_to", lambda head, inv, repo, progress: state["log"].append(("copy", repo)))
    monkeypatch.setattr(modelsync, "link", lambda connection, inv, revisions:
                        state["log"].append(("link", connection.name)))
    return state


def _ensure(world: dict[str, Any], path: Path, source: str = "hub") -> dict[str, str]:
    return modelsync.ensure_models(FakePair(), read_inventory(path), [TARGET, DRAFT],  # type: ignore[arg-type]
                                   ["spark-a", "spark-b"], source, lambda node, text: None)


def test_a_warm_launch_reads_each_cache_once_and_transfers_nothing(world: dict[str, Any],
                                                                   example_inventory_path: Path) -> None:
    both = {TARGET: manifest(), DRAFT: manifest("r2")}
    world["caches"] = {"spark-a": [both], "spark-b": [both]}
    assert _ensure(world, example_inventory_path, "cached") == {TARGET: "r1", DRAFT: "r2"}
    assert world["log"] == [("read", "spark-a", (TARGET, DRAFT)), ("read", "spark-b", (TARGET, DRAFT)),
                            ("link", "spark-a"), ("link", "spark-b")]


def test_what_is_fetched_or_copied_is_read_again_and_only_that(world: dict[str, Any],
                                                              example_inventory_path: Path) -> None:
    world["caches"] = {"spark-a": [{TARGET: manifest(), DRAFT: MISSING}, {DRAFT: manifest("r2")}],
                       "spark-b": [{TARGET: manifest(size=5), DRAFT: manifest("r2")}, {TARGET: manifest()}]}
    assert _ensure(world, example_inventory_path) == {TARGET: "r1", DRAFT: "r2"}
    assert world["log"] == [("read", "spark-a", (TARGET, DRAFT)), ("fetch", DRAFT), ("read", "spark-a", (DRAFT,)),
                            ("read", "spark-b", (TARGET, DRAFT)), ("copy", TARGET), ("read", "spark-b", (TARGET,)),
                            ("link", "spark-a"), ("link", "spark-b")]


def test_a_copy_that_still_differs_is_an_error(world: dict[str, Any], example_inventory_path: Path) -> None:
    both = {TARGET: manifest(), DRAFT: manifest("r2")}
    world["caches"] = {"spark-a": [both], "spark-b": [{TARGET: MISSING, DRAFT: manifest("r2")},
                                                       {TARGET: manifest(size=5)}]}
    with pytest.raises(SparkpairError, match=r"org/target still differs from spark-a after copying: blob blob: "
                                             r"10 bytes vs 5 bytes"):
        _ensure(world, example_inventory_path)


def test_a_fetch_that_leaves_the_repo_incomplete_is_an_error(world: dict[str, Any],
                                                             example_inventory_path: Path) -> None:
    world["caches"] = {"spark-a": [{TARGET: MISSING, DRAFT: manifest("r2")}, {TARGET: MISSING}], "spark-b": [{}]}
    with pytest.raises(SparkpairError, match="org/target is still incomplete after fetching"):
        _ensure(world, example_inventory_path)
    assert ("read", "spark-b", (TARGET, DRAFT)) not in world["log"]
