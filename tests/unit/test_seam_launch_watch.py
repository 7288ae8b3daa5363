"""engine.launch's watchdog on scripted nodes (tests/fakenode.py): what each rank will hold comes from the
preflight's model manifests when they were complete (no second probe round while the engine starts), and is
asked only of a node whose preflight manifest was not."""

from __future__ import annotations

from pathlib import Path

from fakenode import FakeNode, ProbeRound, fake_pair, is_probe_round

from sparkpair.checks import Facts
from sparkpair.engine import launch
from sparkpair.inventory import read_inventory
from sparkpair.probes import NodeFacts, models
from sparkpair.probes.models import RepoManifest
from sparkpair.runtimes import runtime_of

SIM = read_inventory(Path(__file__).parent.parent / "fixtures" / "inventory" / "sim.yaml")
OPTIONS = launch.LaunchOptions(profile="qwen3-235b")
WEIGHTS = {"a" * 64: 600, "b" * 64: 400}
TARGET = RepoManifest("1" * 40, WEIGHTS, {"model-1.safetensors": "a" * 64, "model-2.safetensors": "b" * 64})
DRAFT = RepoManifest("2" * 40, {"d" * 64: 50}, {"model.safetensors": "d" * 64})


def test_what_each_rank_holds_comes_from_the_preflights_complete_manifests() -> None:
    inventory, profile = launch.resolve(SIM, OPTIONS)
    target, draft = (models.manifest(inventory.container.hf_cache, repo) for repo in profile.repos)
    half = RepoManifest("1" * 40, WEIGHTS, TARGET.files, incomplete=("model-2.safetensors",))
    facts = Facts(inventory, profile, {"spark-a": NodeFacts({target: TARGET, draft: DRAFT}),
                                       "spark-b": NodeFacts({target: half, draft: DRAFT})})
    head = FakeNode("spark-a")   # nothing scripted: any command to it fails the test
    worker = FakeNode("spark-b").on(is_probe_round, ProbeRound({}, others=(1, "", "not answered here")))
    run = launch._Run(fake_pair(head, worker), inventory, OPTIONS, profile, runtime_of(profile), ["spark-a", "spark-b"],
                      lambda event: None, facts=facts)
    watchdog = launch._watchdog(run)
    assert [rank.expected for rank in watchdog.ranks] == [1000 // 2 + 50, 0]   # spark-b's manifest unreadable now
    assert head.calls == [] and len(worker.calls) == 1
