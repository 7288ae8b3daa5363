"""mpirun over more than two nodes (doctor --deep's jobs, and the launch's line once launch drives a cluster): one
rank per node, and a hostfile the head's mpirun reaches every worker through; the pair's exactly as before."""

from __future__ import annotations

from pathlib import Path

from cluster_nodes import RING, SWITCH

from sparkpair.checks import Facts, Status
from sparkpair.checks.playbook import check_playbook
from sparkpair.inventory import read_inventory
from sparkpair.render import recipe

ROOT = Path(__file__).resolve().parents[2]

SIM = read_inventory(Path(__file__).resolve().parents[1] / "fixtures" / "inventory" / "sim.yaml")


def test_a_pairs_hostfile_and_mpirun_line_are_what_they_always_were() -> None:
    assert recipe.hostfile_lines(SIM) == ["198.19.1.11 slots=1", "198.19.1.12 slots=1"]
    assert recipe.mpirun_argv(SIM, SIM.profile())[:3] == ["mpirun", "-np", "2"]


def test_a_ring_hostfile_names_each_worker_by_its_end_of_the_cable_from_the_head() -> None:
    # spark-b's first link is its cable to spark-c (198.19.20.1), which the head has no address in
    assert recipe.hostfile_lines(RING) == ["198.19.10.1 slots=1", "198.19.10.2 slots=1", "198.19.30.1 slots=1"]
    assert recipe.mpirun_argv(RING, RING.profile())[:3] == ["mpirun", "-np", "3"]


def test_a_switch_of_four_runs_one_rank_per_node() -> None:
    assert recipe.hostfile_lines(SWITCH) == [f"198.19.1.{11 + index} slots=1" for index in range(4)]
    assert recipe.mpirun_argv(SWITCH, SWITCH.profile())[:3] == ["mpirun", "-np", "4"]


def test_openmpis_tcp_transport_takes_one_twin_of_each_port_on_a_ring_and_every_twin_elsewhere() -> None:
    """Given all four twins on the simulated ring, mpi4py's 4 MiB allreduce stalled in 5 runs of 14; with one twin
    per port it finished in every run (docs/cluster.md). A pair and a switch keep every twin, as always."""
    ring = recipe.container_env(RING)
    assert ring["OMPI_MCA_btl_tcp_if_include"] == "enp1s0f0np0,enp1s0f1np1"
    assert ring["NCCL_SOCKET_IFNAME"] == ring["OMPI_MCA_oob_tcp_if_include"] == ",".join(RING.head.links)
    for inventory in (SWITCH, read_inventory(ROOT / "inventory.example.yaml")):
        env = recipe.container_env(inventory)
        assert env["OMPI_MCA_btl_tcp_if_include"] == ",".join(inventory.head.links)
    findings = [f for f in check_playbook(Facts(RING, RING.profile())) if "OMPI_MCA_btl_tcp_if_include" in f.detail]
    assert findings and all(f.status is Status.INFO and "OpenMPI's TCP transport takes one twin of each port"
                            in f.detail for f in findings)
