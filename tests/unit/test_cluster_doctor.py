"""doctor over a ring of three and a switch of four, through scripted nodes (tests/unit/cluster_nodes.py): one
probe round per node, all at once; every node's RoCE ports and GID table, every expected link, a crossed ring
cable by its ports, and the models compared across every node. The pair's doctor is tests/unit/test_checks.py's."""

from __future__ import annotations

import base64

import pytest
from cluster_nodes import RING, SWITCH, Answers, cluster_of
from fakenode import FakeNode

from sparkpair.checks import Finding, Status
from sparkpair.checks.links import link_ends
from sparkpair.engine.doctor import doctor
from sparkpair.inventory import Inventory
from sparkpair.probes import host, models

UNANSWERED = (1, "", "not scripted in this test")  # every probe but the links' and RoCE's


def clocked(nodes: dict[str, FakeNode]) -> None:
    for fake in nodes.values():
        fake.on(host.CLOCK.command.text, "1764119000.000000000\n")


def rows(findings: list[Finding], check: str) -> list[tuple[str, Status, str]]:
    return [(f.node, f.status, f.detail) for f in findings if f.check == check]


@pytest.mark.parametrize("inventory", [RING, SWITCH], ids=["ring", "switch"])
def test_doctor_judges_every_node_and_every_link_from_one_round_per_node(inventory: Inventory) -> None:
    pair, nodes = cluster_of(inventory, configured=True, others=UNANSWERED)
    clocked(nodes)
    findings = doctor(pair, inventory, inventory.profile(), {"links", "path"}, timeout=10)
    for fake in nodes.values():
        assert len([call for call in fake.calls if call.text != host.CLOCK.command.text]) == 1
    names = [node.name for node in inventory.nodes]
    roce = rows(findings, "links.roce")
    for node in inventory.nodes:
        ports = [detail for name, status, detail in roce if name == node.name and status is Status.OK]
        assert len(ports) == len(node.links), roce  # each twin's RoCE port and its GID
        assert all("RoCE v2 GID ::ffff:" in detail for detail in ports)
    assert ("cluster", Status.OK, "the twins' IPv4 RoCE v2 GID is at index " +
            " and ".join(f"3 on {name}" for name in names)) in roce
    mtu = {(name, detail.split(":")[0]) for name, status, detail in rows(findings, "path.mtu") if status is Status.OK}
    assert mtu == {(link_node, f"{end.port} -> {end.address}") for link_node in names
                   for end in link_ends(inventory, inventory.node(link_node))}
    crossed = rows(findings, "links.crossed")
    assert all(status is Status.OK for _, status, _ in crossed)
    assert {name for name, _, _ in crossed} == (set(names) if inventory.topology == "ring" else set())


def listing(blob: str, size: int, revision: str = "c" * 40) -> str:
    """A complete repo in a node's HF cache: one blob, config.json linked to it, refs/main (models.manifest)."""
    text = (f"f\0{size}\0blobs/{blob}\0\0l\0{52}\0snapshots/{revision}/config.json\0../../blobs/{blob}\0"
            f"ref\0{revision}\0end\0")
    return base64.encodebytes(text.encode()).decode()


def models_on(inventory: Inventory, odd: str | None) -> dict[str, Answers]:
    """Node -> its manifests: every node holds the profile's repos; odd (a node name) holds another blob."""
    profile = inventory.profile()
    return {node.name: {models.manifest(inventory.container.hf_cache, repo): listing(("e" if node.name == odd else "a")
                                                                                     * 64, 1000)
                        for repo in profile.repos} for node in inventory.nodes}


@pytest.mark.parametrize("odd", [None, "spark-c", "spark-b"])
def test_models_are_compared_across_every_node_and_each_one_that_differs_is_named(odd: str | None) -> None:
    pair, nodes = cluster_of(RING, configured=True, others=UNANSWERED, extra=models_on(RING, odd))
    clocked(nodes)
    found = [row for row in rows(doctor(pair, RING, RING.profile(), {"models.match"}, timeout=10), "models.match")
             if row[0] == "cluster"]  # the manifests compared (each node's content verification is its own row)
    repos = RING.profile().repos
    if odd is None:
        assert found == [("cluster", Status.OK, f"{repo}: same revision, blobs and sizes on all 3 nodes")
                         for repo in repos]
        return
    assert [(name, status) for name, status, _ in found] == [("cluster", Status.FAIL)] * len(repos)
    assert all(detail.startswith(f"{repo} differs between spark-a and {odd}: ") for (_, _, detail), repo
               in zip(found, repos, strict=True))
