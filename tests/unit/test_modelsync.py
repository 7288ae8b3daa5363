"""ensure_models against fake nodes: a warm launch reads and verifies each cache once and moves nothing;
a corrupt file is removed and fetched or copied again (only it); what is fetched or copied is read again;
a copy that leaves files behind says which and that a rerun sends only those."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakenode import FakeNode, fake_pair

from sparkpair.engine import modelcopy, modelsync
from sparkpair.errors import SparkpairError
from sparkpair.inventory import read_inventory
from sparkpair.probes import models
from sparkpair.probes.models import RepoManifest
from sparkpair.progress import Event, collect

TARGET, DRAFT = "org/target", "org/draft"
SHARD, CONFIG = "a" * 64, "c" * 40


def manifest(revision: str = "r1", shard: int = 10) -> RepoManifest:
    return RepoManifest(revision, {SHARD: shard, CONFIG: 2}, {"model.safetensors": SHARD, "config.json": CONFIG})


MISSING = RepoManifest(None)
GOOD = models.ContentCheck({})


def corrupt(repo: str, blob: str = SHARD) -> models.ContentCheck:
    return models.ContentCheck({models.repo_dirname(repo): models.RepoContent(2, {blob: "content hashes to 0c1f"})})


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Each node's cache and verification verdicts (successive calls pop successive states), and a log."""
    state: dict[str, Any] = {"caches": {}, "verdicts": {}, "log": [], "copies": []}

    def next_of(queue: list[Any]) -> Any:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def read(connection: FakeNode, inventory: object, repos: list[str]) -> dict[str, RepoManifest]:
        state["log"].append(("read", connection.name, tuple(repos)))
        current = next_of(state["caches"][connection.name])
        return {repo: current[repo] for repo in repos}

    def verify(connection: FakeNode, inventory: object, repos: list[str], progress: object,
               remove_bad: bool) -> models.ContentCheck:
        state["log"].append(("verify", connection.name, tuple(repos), remove_bad))
        return next_of(state["verdicts"].get(connection.name, [GOOD]))

    def copy(source: FakeNode, dest: FakeNode, inventory: object, blobs: list[modelcopy.Blob], snapshots: object,
             transport: str, progress: object, cancel: object = None) -> modelcopy.CopyResult:
        state["log"].append(("copy", dest.name, tuple((blob.repo, blob.name) for blob in blobs)))
        return state["copies"].pop(0) if state["copies"] else \
            modelcopy.CopyResult(source.name, dest.name, transport, verified=[blob.name for blob in blobs])

    monkeypatch.setattr(modelsync, "read_manifests", read)
    monkeypatch.setattr(modelsync, "verify", verify)
    monkeypatch.setattr(modelsync.modelfetch, "fetch_on_head", lambda head, inv, repo, source, progress:
                        state["log"].append(("fetch", repo)))
    monkeypatch.setattr(modelsync.modelcopy, "copy", copy)
    monkeypatch.setattr(modelsync, "link", lambda connection, inv, revisions:
                        state["log"].append(("link", connection.name)))
    return state


def in_phases(log: list[Any], *sizes: int) -> list[list[Any]]:
    """log cut into phases of the given sizes, each sorted (what both nodes did at once comes in any order)."""
    assert sum(sizes) == len(log), log
    starts = [sum(sizes[:index]) for index in range(len(sizes))]
    return [sorted(log[start:start + size]) for start, size in zip(starts, sizes)]


def _ensure(path: Path, source: str = "hub", events: list[Event] | None = None) -> dict[str, str]:
    return modelsync.ensure_models(fake_pair(), read_inventory(path), [TARGET, DRAFT],
                                   ["spark-a", "spark-b"], source, collect(events if events is not None else []))


def test_a_warm_launch_reads_and_verifies_each_cache_once_and_moves_nothing(world: dict[str, Any],
                                                                           example_inventory_path: Path) -> None:
    both = {TARGET: manifest(), DRAFT: manifest("r2")}
    world["caches"] = {"spark-a": [both], "spark-b": [both]}
    assert _ensure(example_inventory_path, "cached") == {TARGET: "r1", DRAFT: "r2"}
    assert in_phases(world["log"], 2, 2, 2) == [  # each phase on both nodes at once
        [("read", "spark-a", (TARGET, DRAFT)), ("read", "spark-b", (TARGET, DRAFT))],
        [("verify", "spark-a", (TARGET, DRAFT), False), ("verify", "spark-b", (TARGET, DRAFT), False)],
        [("link", "spark-a"), ("link", "spark-b")]]


def test_only_what_the_worker_lacks_is_copied_and_what_moved_is_read_again(world: dict[str, Any],
                                                                           example_inventory_path: Path) -> None:
    world["caches"] = {"spark-a": [{TARGET: manifest(), DRAFT: MISSING}, {DRAFT: manifest("r2")}],
                       "spark-b": [{TARGET: RepoManifest("r1", {CONFIG: 2}, {"config.json": CONFIG}),
                                    DRAFT: manifest("r2")}, {TARGET: manifest()}]}
    assert _ensure(example_inventory_path) == {TARGET: "r1", DRAFT: "r2"}
    assert in_phases(world["log"][4:], 1, 1, 1, 1, 1, 2) == [
        [("fetch", DRAFT)], [("read", "spark-a", (DRAFT,))], [("verify", "spark-a", (DRAFT,), True)],
        [("copy", "spark-b", ((TARGET, SHARD),))], [("read", "spark-b", (TARGET,))], [("link", "spark-a"), ("link", "spark-b")]]


def test_a_corrupt_file_on_the_worker_is_removed_and_only_it_copied_again(world: dict[str, Any],
                                                                         example_inventory_path: Path) -> None:
    both = {TARGET: manifest(), DRAFT: manifest("r2")}
    without = {TARGET: RepoManifest("r1", {CONFIG: 2}, {"config.json": CONFIG}), DRAFT: manifest("r2")}
    world["caches"] = {"spark-a": [both], "spark-b": [both, without, {TARGET: manifest()}]}
    world["verdicts"] = {"spark-b": [corrupt(TARGET)]}
    events: list[Event] = []
    _ensure(example_inventory_path, events=events)
    assert ("verify", "spark-b", (TARGET, DRAFT), True) in world["log"]
    assert ("copy", "spark-b", ((TARGET, SHARD),)) in world["log"]
    assert ("fetch", TARGET) not in world["log"]
    assert any(e.level == "warning" and e.node == "spark-b" and e.text.startswith(
        f"{TARGET}: model.safetensors is corrupt (content hashes to 0c1f); removed, copying it again from spark-a")
        for e in events)


def test_a_corrupt_file_on_the_head_is_downloaded_again(world: dict[str, Any], example_inventory_path: Path) -> None:
    both = {TARGET: manifest(), DRAFT: manifest("r2")}
    broken = {TARGET: RepoManifest("r1", {CONFIG: 2}, {"config.json": CONFIG, "model.safetensors": SHARD},
                                   broken=("model.safetensors",)), DRAFT: manifest("r2")}
    world["caches"] = {"spark-a": [both, broken, {TARGET: manifest()}], "spark-b": [both]}
    world["verdicts"] = {"spark-a": [corrupt(TARGET), GOOD]}
    _ensure(example_inventory_path)
    assert ("fetch", TARGET) in world["log"] and ("fetch", DRAFT) not in world["log"]
    assert not [entry for entry in world["log"] if entry[0] == "copy"]


def test_with_cached_models_a_corrupt_file_stops_the_launch_by_name(world: dict[str, Any],
                                                                   example_inventory_path: Path) -> None:
    both = {TARGET: manifest(), DRAFT: manifest("r2")}
    world["caches"] = {"spark-a": [both], "spark-b": [both]}
    world["verdicts"] = {"spark-b": [corrupt(TARGET)]}
    with pytest.raises(SparkpairError, match=r"org/target: model.safetensors is corrupt on spark-b \(content hashes "
                                             r"to 0c1f\); --model-source cached repairs nothing"):
        _ensure(example_inventory_path, "cached")


def test_a_copy_that_still_differs_is_an_error(world: dict[str, Any], example_inventory_path: Path) -> None:
    both = {TARGET: manifest(), DRAFT: manifest("r2")}
    world["caches"] = {"spark-a": [both], "spark-b": [{TARGET: MISSING, DRAFT: manifest("r2")},
                                                       {TARGET: manifest(shard=5)}]}
    with pytest.raises(SparkpairError, match=r"org/target still differs from spark-a after copying: blob aaaaaaaaaaaa: "
                                             r"10 bytes vs 5 bytes"):
        _ensure(example_inventory_path)


def test_a_copy_cut_short_keeps_its_whole_files_and_says_a_rerun_sends_the_rest(world: dict[str, Any],
                                                                               example_inventory_path: Path) -> None:
    both = {TARGET: manifest(), DRAFT: manifest("r2")}
    world["caches"] = {"spark-a": [both], "spark-b": [{TARGET: MISSING, DRAFT: manifest("r2")}]}
    world["copies"] = [modelcopy.CopyResult("spark-a", "spark-b", "tcp", verified=[CONFIG], missing=[SHARD],
                                            errors=["enP2p1s0f1np1: timed out"])]
    with pytest.raises(SparkpairError, match=r"copying org/target to spark-b stopped: enP2p1s0f1np1: timed out; 1 files "
                                             r"arrived whole and verified and stay, a rerun of sparkpair launch sends "
                                             r"the rest"):
        _ensure(example_inventory_path)


def test_a_stream_that_gave_up_while_the_others_delivered_everything_is_a_warning(
        world: dict[str, Any], example_inventory_path: Path) -> None:
    """A twin's streams that failed mid-copy (its chunks carried by the other twin) do not fail a copy whose every
    file arrived verified and linked: the launch goes on with a warning naming the twin."""
    both = {TARGET: manifest(), DRAFT: manifest("r2")}
    world["caches"] = {"spark-a": [both], "spark-b": [{TARGET: MISSING, DRAFT: manifest("r2")}, {TARGET: manifest()}]}
    world["copies"] = [modelcopy.CopyResult("spark-a", "spark-b", "tcp", verified=[SHARD, CONFIG],
                                            errors=["enp1s0f1np1: timed out"])]
    events: list[Event] = []
    assert _ensure(example_inventory_path, events=events) == {TARGET: "r1", DRAFT: "r2"}
    warnings = [event.text for event in events if event.level == "warning"]
    assert warnings == ["a stream of the copy from spark-a gave up (enp1s0f1np1: timed out); the other streams "
                        "carried its chunks: every file arrived and was verified"]


def test_a_file_that_arrived_corrupt_is_sent_once_more(world: dict[str, Any], example_inventory_path: Path) -> None:
    both = {TARGET: manifest(), DRAFT: manifest("r2")}
    world["caches"] = {"spark-a": [both], "spark-b": [{TARGET: MISSING, DRAFT: manifest("r2")}, {TARGET: manifest()}]}
    world["copies"] = [modelcopy.CopyResult("spark-a", "spark-b", "tcp", verified=[CONFIG], bad=[SHARD])]
    _ensure(example_inventory_path)
    copies = [entry for entry in world["log"] if entry[0] == "copy"]
    assert copies == [("copy", "spark-b", ((TARGET, SHARD), (TARGET, CONFIG))), ("copy", "spark-b", ((TARGET, SHARD),))]


def test_a_fetch_that_leaves_the_repo_incomplete_is_an_error(world: dict[str, Any],
                                                             example_inventory_path: Path) -> None:
    world["caches"] = {"spark-a": [{TARGET: MISSING, DRAFT: manifest("r2")}, {TARGET: MISSING}],
                       "spark-b": [{TARGET: MISSING, DRAFT: manifest("r2")}]}
    with pytest.raises(SparkpairError, match="org/target is still incomplete after fetching"):
        _ensure(example_inventory_path)
    assert not [entry for entry in world["log"] if entry[0] == "copy"]
