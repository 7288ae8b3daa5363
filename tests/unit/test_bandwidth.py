"""deep.bandwidth: NCCL's bus bandwidth judged against what one QSFP cable gives a GB10 pair, on real all_gather_perf
runs and NCCL INFO lines (tests/fixtures/rdma, sources in SOURCES.md), naming the likely cause of a shortfall from
the facts doctor has (one half of the port, a small MTU, an old NCCL) with its fix; deep.nccl keeps the transport.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import test_checks
from test_checks import SIM, healthy

from sparkpair.checks import Facts, Status, deep
from sparkpair.checks.nccltests import parse_nccl_run
from sparkpair.inventory.load import parse_inventory
from sparkpair.probes import host, net, rdma

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rdma"
REAL_HOSTS = {"spark-a": "spark-fb97", "spark-b": "spark-4440"}   # the hosts of the real runs below
HEALTHY = (FIXTURES / "nccl-debug-info-net-ib__1.txt").read_text() + (FIXTURES / "all_gather_perf__1.txt").read_text()
RECABLED = (FIXTURES / "all_gather_perf__2.txt").read_text()        # 2.82 GB/s: re-cabled without a reboot
ONE_HALF = (FIXTURES / "nccl-debug-info-net-ib__1.txt").read_text().replace(" [1]roceP2p1s0f1:1/RoCE", "") + RECABLED
PLAYBOOKS25 = (FIXTURES / "all_gather_perf__playbooks25.txt").read_text()


def facts_of_the_real_pair(inventory: object = SIM) -> Facts:
    facts = healthy(inventory)  # type: ignore[arg-type]
    for name, hostname in REAL_HOSTS.items():
        identity = facts.nodes[name][host.IDENTITY]
        facts.nodes[name][host.IDENTITY] = dataclasses.replace(identity, hostname=hostname)
    return facts


def bandwidth(text: str, facts: Facts | None = None):  # type: ignore[no-untyped-def]
    run = dataclasses.replace(test_checks.deep_run(), nccl=text, nccl_skip="")
    return deep.check_bandwidth(facts or facts_of_the_real_pair(), run)[0]


def test_a_healthy_pair_is_within_what_one_cable_gives() -> None:
    finding = bandwidth(HEALTHY)
    assert finding.status is Status.OK, finding
    assert "9000 MB/s" in finding.detail   # MPI's point-to-point figure stays in the row
    assert ("all_gather bus bandwidth 21.4033 GB/s, about 20.3 GB/s expected for one QSFP cable's two PCIe halves "
            "at MTU 9000") in finding.detail


def test_a_run_nothing_in_the_facts_explains_points_at_a_reboot_after_recabling() -> None:
    finding = bandwidth(RECABLED)
    assert finding.status is Status.FAIL and finding.detail.count("far below the cabling") == 1, finding
    assert "2.82151 GB/s" in finding.detail and "no half, MTU or NCCL version explains it" in finding.detail
    assert "reboot both Sparks" in finding.fix and "links.speed" in finding.fix


def test_one_half_of_the_port_is_named_with_both_halves_as_the_fix() -> None:
    finding = bandwidth(ONE_HALF)
    assert finding.status is Status.FAIL, finding
    assert "likely cause: one PCIe half of the port carries NCCL's data (NCCL used rocep1s0f1 on spark-a, of " \
           "rocep1s0f1+roceP2p1s0f1; NCCL used rocep1s0f1 on spark-b" in finding.detail
    assert "both halves of the cabled port in NCCL_IB_HCA" in finding.fix


def test_a_small_mtu_is_named_from_the_links_facts() -> None:
    facts = facts_of_the_real_pair()
    interfaces = facts.nodes["spark-b"][net.INTERFACES]
    interfaces["enp1s0f1np1"] = dataclasses.replace(interfaces["enp1s0f1np1"], mtu=1500)
    facts.nodes["spark-b"][rdma.PORTS][("rocep1s0f1", 1)] = rdma.PortAttributes("rocep1s0f1", 1, "PORT_ACTIVE", 4096,
                                                                                 1024, "Ethernet")
    finding = bandwidth(RECABLED, facts)
    assert "likely cause: a small MTU (enp1s0f1np1 of spark-b at MTU 1500, rocep1s0f1 of spark-b at RoCE " \
           "active_mtu 1024)" in finding.detail, finding
    assert "cluster.mtu: 9000" in finding.fix and "sparkpair setup-network" in finding.fix


def test_an_nccl_older_than_the_playbooks_is_named_from_its_own_header() -> None:
    # the header line of a real run with NCCL 2.28.3 (dgx-spark-playbooks#25) above the real 2.82 GB/s table
    header = PLAYBOOKS25.splitlines()[0]
    finding = bandwidth(header + "\n" + RECABLED.split("\n", 13)[-1])
    assert "likely cause: NCCL 2.28.3, older than the 2.28.9 NVIDIA's Spark playbooks validate" in finding.detail
    assert "known.nccl-before-2-28-9" in finding.fix
    newer = bandwidth(HEALTHY.replace("21.4033", "3.1"))   # NCCL 2.28.9 by its own INFO line: not the cause
    assert "NCCL 2.28" not in newer.detail


def test_a_cut_table_still_gives_nccl_tests_own_average() -> None:
    run = parse_nccl_run(PLAYBOOKS25)
    assert run.bus_bandwidth == 19.945 and run.library == "2.28.3"   # (18.94 + 20.95) / 2
    assert parse_nccl_run((FIXTURES / "all_gather_perf__1.txt").read_text().replace(
        "# Avg bus bandwidth    : 21.4033", "")).bus_bandwidth == 21.4017   # its own: 21.4033, from unrounded rows
    assert parse_nccl_run(HEALTHY).hosts["spark-fb97"].version == "2.28.9"
    assert bandwidth(PLAYBOOKS25).status is Status.OK   # 19.9 GB/s at 16 GiB, MTU 1500 or not


def test_an_inventory_with_one_twin_per_node_is_named() -> None:
    data = {"nodes": [{"name": n.name, "host": n.host, "links": {"enp1s0f1np1": str(n.links["enp1s0f1np1"])}}
                      for n in SIM.nodes], "cluster": {"ssh_key": str(SIM.cluster.ssh_key)}}
    one = parse_inventory(data, "one.yaml")
    facts = facts_of_the_real_pair(one)
    finding = bandwidth(RECABLED, facts)
    assert "one PCIe half of the cable (the inventory names one twin)" in finding.detail
    assert "the inventory names one twin per node" in finding.detail


def test_a_socket_fallback_leaves_the_figure_to_deep_nccl() -> None:
    text = (FIXTURES / "nccl-socket-fallback__nccltests188.txt").read_text() + RECABLED
    finding = bandwidth(text)
    assert finding.status is Status.OK and "all_gather" not in finding.detail   # MPI's figure only
    nccl = deep.check_nccl(facts_of_the_real_pair(), dataclasses.replace(test_checks.deep_run(), nccl=text,
                                                                         nccl_skip=""))[0]
    assert nccl.status is Status.FAIL and "fell back to TCP sockets" in nccl.detail


def test_deep_nccl_shows_the_figure_and_leaves_the_verdict_to_deep_bandwidth() -> None:
    nccl = deep.check_nccl(facts_of_the_real_pair(), dataclasses.replace(test_checks.deep_run(), nccl=RECABLED,
                                                                         nccl_skip=""))[0]
    assert nccl.status is Status.OK and "avg bus bandwidth 2.82151 GB/s" in nccl.detail
    assert "deep.bandwidth judges it" in nccl.detail
