"""sparkpair on the simulated ring of three (docs/cluster.md): setup-network's apply verifies every link and sets
up SSH trust as a full mesh, and its host routes make every address of every node reachable from the others, so
doctor --deep's MPI jobs and the stand-in TensorRT-LLM (pipeline parallel over the three) run; a crossed ring
cable (the testbed's `crossed-ring-cable`, the plugs of one node's two QSFP ports swapped) is named by its ports,
with the fix, by setup-network and by doctor; the restore returns every node to before sparkpair. One shape
start for the module; `testbed_shape` brings back the pair after it. Run under `flock /tmp/simpair.lock`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import run_sparkpair

NODES = ("spark-a", "spark-b", "spark-c")
PORTS = ("enp1s0f0np0", "enP2p1s0f0np0", "enp1s0f1np1", "enP2p1s0f1np1")   # both QSFP ports' twins, all in use


@pytest.fixture(scope="module")
def ring_of_three(testbed_shape, tmp_path_factory):
    """The ring of three as the testbed brings it up (twins down, no address), its inventory, and the nodes'
    own SSH state cleared (spark-c is made anew with each shape: what the pair's nodes knew of it is gone)."""
    bed = testbed_shape(3, "ring")
    data = yaml.safe_load(Path(bed.inventory).read_text())
    assert data["topology"] == "ring" and [node["name"] for node in data["nodes"]] == list(NODES)
    path = tmp_path_factory.mktemp("ring3") / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    for name in NODES:
        bed.exec(name, "rm -f /home/nvidia/.ssh/known_hosts /home/nvidia/.ssh/known_hosts.old", user="nvidia")
    yield bed, path
    bed.cli("heal", check=False)


def _findings(path: Path, *args: str) -> list[dict]:
    run = run_sparkpair(path, "doctor", "--json", *args, timeout=600)
    return json.loads(run.out)["findings"]


def _addresses(bed, name: str) -> dict[str, list[str]]:
    """Each QSFP twin of node NAME and its IPv4 addresses (with prefix)."""
    return {port: bed.exec(name, f"ip -o -4 addr show dev {port} | awk '{{print $4}}'").stdout.split()
            for port in PORTS}


def test_setup_network_on_a_ring_applies_and_verifies_every_link_and_the_trust_mesh(ring_of_three) -> None:
    bed, path = ring_of_three
    run = run_sparkpair(path, "setup-network", "--yes", timeout=900)
    assert run.code == 0, run.text
    assert "link verified" in run.out + run.err and "SSH trust verified" in run.out + run.err
    inventory = yaml.safe_load(path.read_text())
    for node in inventory["nodes"]:
        assert _addresses(bed, node["name"]) == {port: [node["links"][port]] for port in PORTS}
    bad = [f for f in _findings(path, "--only", "links,path,trust") if f["status"] == "FAIL"]
    assert bad == []
    checked = {(f["check"], f["node"]) for f in _findings(path, "--only", "links.crossed,trust.ssh")
               if f["status"] == "OK"}
    assert checked == {(check, name) for check in ("links.crossed", "trust.ssh") for name in NODES}
    again = run_sparkpair(path, "setup-network", "--yes", timeout=900)
    assert again.code == 0 and "create /etc/netplan" not in again.out + again.err, again.text


def test_every_node_reaches_every_address_of_the_others_through_the_rings_host_routes(ring_of_three) -> None:
    """What MPI's daemons, NCCL and Gloo need on a ring: any address a node publishes answers from every other
    node (a neighbour's other cable's addresses through the scope-link routes setup-network wrote)."""
    bed, path = ring_of_three
    inventory = yaml.safe_load(path.read_text())
    for node in inventory["nodes"]:
        for other in inventory["nodes"]:
            if other is node:
                continue
            for address in other["links"].values():
                target = address.split("/")[0]
                answered = bed.exec(node["name"], f"ping -n -c 1 -W 2 {target}", check=False)
                assert answered.returncode == 0, f"{node['name']} -> {other['name']} {target}: {answered.stdout}"


def test_doctor_deep_runs_mpi_and_the_allreduce_across_the_three_ranks(ring_of_three) -> None:
    _, path = ring_of_three
    report = {f["check"]: f for f in _findings(path, "--deep", "--only", "deep.mpi,deep.allreduce", "--timeout", "120")}
    assert report["deep.mpi"]["status"] == "OK" and report["deep.mpi"]["node"] == "cluster", report
    assert all(f"rank {rank} {name}" in report["deep.mpi"]["detail"] for rank, name in enumerate(NODES))
    assert report["deep.allreduce"]["status"] == "OK" and "sum 6 as expected" in report["deep.allreduce"]["detail"], \
        report


def test_the_stand_in_tensorrt_llm_reaches_ready_across_the_ring_at_pp3(ring_of_three, tmp_path: Path) -> None:
    """qwen3-235b split over the three nodes by pipeline parallelism (its 4 KV heads do not divide by three)."""
    bed, path = ring_of_three
    split = tmp_path / "inventory.yaml"
    split.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()),
                                     "models": {"qwen3-235b": {"tp_size": 1, "pp_size": 3}}}))
    try:
        run = run_sparkpair(split, "launch", "--timeout", "300", timeout=1200)
        assert run.code == 0 and "ready in" in run.out, run.text
        assert "mpirun -np 3 " in run.err + run.out and "--pp_size 3" in run.err + run.out
        status = json.loads(run_sparkpair(split, "status", "--json").out)
        assert status["state"] == "serving" and sorted(status["nodes"]) == list(NODES), status
    finally:
        stop = run_sparkpair(split, "stop")
    assert stop.code == 0 and all(f"{name}: removed trtllm-multinode" in stop.out for name in NODES), stop.text


def test_a_crossed_ring_cable_is_named_by_setup_network_and_doctor_with_the_fix(ring_of_three) -> None:
    bed, path = ring_of_three
    bed.fault("crossed-ring-cable", node="spark-b")
    try:
        run = run_sparkpair(path, "setup-network", "--yes", timeout=900)
        assert run.code == 1, run.text
        assert ("spark-b: enp1s0f0np0 reaches spark-a, expected spark-c: the cables on spark-b's enp1s0f0np0 and "
                "enp1s0f1np1 are crossed (fix: swap the QSFP cables on spark-b's enp1s0f0np0 and enp1s0f1np1, or "
                "swap their addresses in nodes[1].links)") in run.err, run.text
        crossed = [f for f in _findings(path, "--only", "links.crossed") if f["status"] == "FAIL"]
        assert {f["node"] for f in crossed} >= {"spark-b"}
        # every finding, on spark-b or on a neighbour that reached it, names spark-b's ports and spark-b's fix
        assert all("swap the QSFP cables on spark-b's" in f["fix"] and "nodes[1].links" in f["fix"] for f in crossed)
    finally:
        bed.heal()
    healed = run_sparkpair(path, "setup-network", "--yes", timeout=900)
    assert healed.code == 0, healed.text


def test_restore_returns_every_node_of_the_ring_to_before_sparkpair(ring_of_three) -> None:
    bed, path = ring_of_three
    run = run_sparkpair(path, "setup-network", "--restore", "--yes", timeout=900)
    assert run.code == 0, run.text
    for name in NODES:
        assert f"{name}: restored" in run.out + run.err
        assert _addresses(bed, name) == {port: [] for port in PORTS}
        assert bed.exec(name, "test -e /etc/netplan/40-sparkpair-cx7.yaml", check=False).returncode != 0
