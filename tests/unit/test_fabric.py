"""The RoCE fabric: the RDMA probes on every real sample (tests/fixtures/rdma, SOURCES.md), links.roce and
each node's NCCL settings, and deep.nccl's judgement of real NCCL logs and nccl-tests tables."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import test_checks
from test_checks import SIM, checked, healthy, roce, rows

from sparkpair.checks import Status, deep
from sparkpair.checks import roce as roce_checks
from sparkpair.checks.nccltests import IB, SOCKET, parse_nccl_run
from sparkpair.inventory import Inventory
from sparkpair.probes import ProbeFailure, net, rdma
from sparkpair.render.recipe import NodeFabric

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rdma"


def sample(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- probes ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, up", [
    ("ibdev2netdev__1.txt", ("enp1s0f1np1", "enP2p1s0f1np1")),      # cable in the outer port: f1 twins Up
    ("ibdev2netdev__2.txt", ("enp1s0f0np0", "enP2p1s0f0np0")),      # the other port: f0 twins Up
    ("ibdev2netdev__3.txt", ("enp1s0f0np0", "enP2p1s0f0np0")),
    ("ibdev2netdev__5.txt", ("enp1s0f0np0", "enP2p1s0f0np0")),      # roceP2 lines first (another collation)
])
def test_ibdev2netdev_in_either_order_and_for_either_port(name: str, up: tuple[str, ...]) -> None:
    links = rdma.parse_ibdev2netdev(sample(name))
    assert {netdev: link.device for netdev, link in links.items()} == {
        "enp1s0f0np0": "rocep1s0f0", "enp1s0f1np1": "rocep1s0f1", "enP2p1s0f0np0": "roceP2p1s0f0",
        "enP2p1s0f1np1": "roceP2p1s0f1"}
    assert {netdev for netdev, link in links.items() if link.up} == set(up)
    assert all(link.port == 1 for link in links.values())


def test_ibdev2netdev_verbose_lines_name_the_same_device() -> None:
    verbose = "0000:01:00.1 rocep1s0f1 (MT4129 - MCX750500B-0D00) CX750 fw 28.45.1020 port 1 (ACTIVE) ==> enp1s0f1np1 (Up)\n"
    assert rdma.parse_ibdev2netdev(verbose) == {"enp1s0f1np1": rdma.RoceLink("rocep1s0f1", 1, "enp1s0f1np1", True)}
    assert rdma.parse_ibdev2netdev("nothing here\n") == {}


def test_ibv_devinfo_gives_each_ports_state_and_roce_mtu() -> None:
    ports = rdma.parse_ibv_devinfo(sample("ibv_devinfo__1.txt"))
    assert sorted(ports) == [("roceP2p1s0f0", 1), ("roceP2p1s0f1", 1), ("rocep1s0f0", 1), ("rocep1s0f1", 1)]
    cabled = ports[("rocep1s0f1", 1)]
    assert cabled.active and cabled.active_mtu == 4096 and cabled.max_mtu == 4096 and cabled.link_layer == "Ethernet"
    idle = ports[("rocep1s0f0", 1)]
    assert not idle.active and idle.state == "PORT_DOWN" and idle.active_mtu == 1024


def test_gid_tables_from_sysfs_keep_populated_entries_with_type_and_netdev() -> None:
    head = rdma.parse_gid_tables(sample("gid-tables-head__handmade.txt"))
    port = head[("rocep1s0f1", 1)]
    assert port.active and port.phys_state == "LinkUp" and port.link_layer == "Ethernet" and port.slots == 8
    assert [(g.index, g.kind) for g in port.gids] == [(0, "IB/RoCE v1"), (1, "RoCE v2"), (2, "IB/RoCE v1"),
                                                      (3, "RoCE v2")]
    gid = port.roce_v2_gid("192.168.100.10")
    assert gid is not None and gid.index == 3 and str(gid) == "::ffff:192.168.100.10" and gid.netdev == "enp1s0f1np1"
    assert str(port.gids[0]) == "fe80::4ebb:47ff:fe2d:1a17" and port.gids[0].ipv4 is None
    assert not head[("rocep1s0f0", 1)].active and len(head[("rocep1s0f0", 1)].gids) == 2
    worker = rdma.parse_gid_tables(sample("gid-tables-worker-index4__handmade.txt"))
    assert worker[("rocep1s0f1", 1)].roce_v2_gid("192.168.100.11").index == 4   # index 3 is empty there
    assert worker[("rocep1s0f1", 1)].roce_v2_gid("192.168.100.10") is None
    assert rdma.parse_gid_tables(rdma.NO_SYSFS + "\n") == {}


def test_the_gid_value_of_an_ipv4_address_is_sysfs_form() -> None:
    assert rdma.ipv4_gid_value("192.168.100.10") == "0000:0000:0000:0000:0000:ffff:c0a8:640a"


def test_the_probes_are_the_commands_a_spark_answers() -> None:
    assert rdma.DEVICES.command.text == "ibdev2netdev" and rdma.PORTS.command.text == "ibv_devinfo"
    assert "/sys/class/infiniband" in rdma.GID_TABLES.command.text and 2 in rdma.GID_TABLES.ok_codes


# --- links.roce and each node's NCCL settings --------------------------------------------------------

def test_each_nodes_nccl_settings_come_from_its_own_probes() -> None:
    facts = healthy()
    facts.nodes["spark-b"].update(roce(SIM.node("spark-b"), 5))
    fabrics = roce_checks.pair_fabric(facts)
    assert fabrics["spark-a"] == NodeFabric(("rocep1s0f1", "roceP2p1s0f1"), 3)
    assert fabrics["spark-b"] == NodeFabric(("rocep1s0f1", "roceP2p1s0f1"), 5)
    assert fabrics["spark-b"].env() == {"NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1", "NCCL_IB_GID_INDEX": "5"}


def test_twins_of_one_node_with_different_indexes_leave_the_gid_index_to_nccl() -> None:
    facts = healthy()
    tables = facts.nodes["spark-b"][rdma.GID_TABLES]
    table = tables[("roceP2p1s0f1", 1)]
    tables[("roceP2p1s0f1", 1)] = dataclasses.replace(table, gids=tuple(
        dataclasses.replace(g, index=g.index + 2) if g.index >= 2 else g for g in table.gids))
    assert roce_checks.pair_fabric(facts)["spark-b"] == NodeFabric(("rocep1s0f1", "roceP2p1s0f1"), None)
    finding = rows(checked(facts), "links.roce", "spark-b")[-1]
    assert finding.status is Status.WARN and "3 on enp1s0f1np1, 5 on enP2p1s0f1np1" in finding.detail
    assert "leaves NCCL_IB_GID_INDEX unset on spark-b" in finding.fix


def test_a_healthy_pair_reports_each_twins_port_mtu_and_gid_index() -> None:
    found = rows(checked(healthy()), "links.roce")
    assert [f.status for f in found] == [Status.OK] * 5
    assert "rocep1s0f1 (enp1s0f1np1) ACTIVE, active_mtu 4096, RoCE v2 GID ::ffff:198.19.1.11 at index 3" in \
        found[0].detail
    assert found[-1].node == "pair" and "index 3 on spark-a and 3 on spark-b" in found[-1].detail


def without_ipv4_v2(facts_node: object, device: str) -> None:
    tables = facts_node[rdma.GID_TABLES]  # type: ignore[index]
    table = tables[(device, 1)]
    tables[(device, 1)] = dataclasses.replace(table, gids=tuple(g for g in table.gids if g.index != 3))


def test_a_missing_ipv4_gid_fails_with_how_to_get_it_back() -> None:
    facts = healthy()
    without_ipv4_v2(facts.nodes["spark-b"], "rocep1s0f1")
    finding = [f for f in rows(checked(facts), "links.roce", "spark-b") if f.status is Status.FAIL][0]
    assert "no RoCE v2 GID carries 198.19.1.12 (only IB/RoCE v1 at index 2)" in finding.detail
    assert "sudo ip addr del 198.19.1.12/24 dev enp1s0f1np1 && sudo netplan apply" in finding.fix
    assert roce_checks.pair_fabric(facts)["spark-b"].gid_index is None


def test_a_port_down_and_an_unreadable_table_fail() -> None:
    facts = healthy()
    table = facts.nodes["spark-b"][rdma.GID_TABLES][("rocep1s0f1", 1)]
    facts.nodes["spark-b"][rdma.GID_TABLES][("rocep1s0f1", 1)] = dataclasses.replace(table, state="DOWN",
                                                                                      phys_state="Disabled")
    facts.nodes["spark-b"][net.INTERFACES]["enp1s0f1np1"] = dataclasses.replace(
        facts.nodes["spark-b"][net.INTERFACES]["enp1s0f1np1"], carrier=False)
    finding = [f for f in rows(checked(facts), "links.roce", "spark-b") if f.status is Status.FAIL][0]
    assert "port DOWN (Disabled)" in finding.detail and "fix links.carrier first" in finding.fix
    facts = healthy()
    facts.nodes["spark-a"][rdma.GID_TABLES] = {}
    finding = rows(checked(facts), "links.roce", "spark-a")[0]
    assert finding.status is Status.FAIL and "modprobe mlx5_ib" in finding.fix


@pytest.mark.parametrize("netdev_mtu, cluster_mtu, words", [
    (1500, 9000, "sparkpair setup-network (sets enp1s0f1np1 of spark-b to mtu 9000"),
    (1500, 1500, "set cluster.mtu: 9000 in the inventory (it is 1500)"),
    (9000, 9000, "bounce enp1s0f1np1 on spark-b"),
])
def test_roce_mtu_1024_warns_with_the_cause_and_fix(netdev_mtu: int, cluster_mtu: int, words: str) -> None:
    inventory = dataclasses.replace(SIM, cluster=dataclasses.replace(SIM.cluster, mtu=cluster_mtu))
    facts = healthy(inventory)
    node = facts.nodes["spark-b"]
    node[net.INTERFACES]["enp1s0f1np1"] = dataclasses.replace(node[net.INTERFACES]["enp1s0f1np1"], mtu=netdev_mtu)
    node[rdma.PORTS][("rocep1s0f1", 1)] = rdma.PortAttributes("rocep1s0f1", 1, "PORT_ACTIVE", 4096, 1024, "Ethernet")
    finding = [f for f in rows(checked(facts), "links.roce", "spark-b") if f.status is Status.WARN][0]
    assert f"active_mtu 1024, not 4096, with the netdev at mtu {netdev_mtu}" in finding.detail
    assert words in finding.fix


def test_the_roce_mtu_follows_the_netdev_mtu() -> None:
    assert [roce_checks.roce_mtu(mtu) for mtu in (9000, 4200, 4192, 4191, 1500)] == [4096, 4096, 4096, 2048, 1024]


def test_without_ibv_devinfo_the_mtu_is_a_warning_not_a_guess() -> None:
    facts = healthy()
    facts.nodes["spark-a"][rdma.PORTS] = ProbeFailure("ibv_devinfo", 127, "ibv_devinfo: command not found")
    found = [f for f in rows(checked(facts), "links.roce", "spark-a") if f.status is Status.WARN]
    assert len(found) == 2 and "ibverbs-utils" in found[0].fix


def override(value: str) -> Inventory:
    return dataclasses.replace(SIM, container=dataclasses.replace(SIM.container, env={"NCCL_IB_GID_INDEX": value}))


def test_one_inventory_gid_index_for_nodes_that_differ_is_refused_with_the_per_node_values() -> None:
    facts = healthy(override("3"))
    facts.nodes["spark-b"].update(roce(SIM.node("spark-b"), 5))
    finding = rows(checked(facts), "links.roce", "pair")[0]
    assert finding.status is Status.FAIL
    assert "container.env sets NCCL_IB_GID_INDEX=3 for both nodes" in finding.detail
    assert "NCCL_IB_GID_INDEX=3 on spark-a, NCCL_IB_GID_INDEX=5 on spark-b" in finding.fix
    assert rows(checked(healthy(override("3"))), "links.roce", "pair")[0].status is Status.OK


def test_links_roce_stops_a_launch() -> None:
    from sparkpair.checks.catalog import is_launch_critical

    assert is_launch_critical("links.roce")


def test_the_fault_rows_of_test_checks_cover_links_roce() -> None:
    assert any(case[1] == "links.roce" for case in test_checks.BROKEN)


# --- deep.nccl: the fabric proof -------------------------------------------------------------------

REAL_HOSTS = {"spark-a": "spark-fb97", "spark-b": "spark-4440"}
TWINS = ("rocep1s0f1", "roceP2p1s0f1")
EXPECTED = {"spark-a": TWINS, "spark-b": TWINS}


def test_nccl_info_lines_name_the_transport_and_both_twins_per_host() -> None:
    run = parse_nccl_run(sample("nccl-debug-info-net-ib__1.txt"))
    assert run.transports == {IB}
    assert run.hosts["spark-fb97"].ib_devices == list(TWINS) == run.hosts["spark-4440"].ib_devices
    assert parse_nccl_run(sample("nccl-debug-info-net-ib__2.txt")).transports == {IB}   # "via NET/IB/1"


def test_nccl_tests_tables_give_the_average_bus_bandwidth_and_the_ranks_hosts() -> None:
    healthy_run = parse_nccl_run(sample("all_gather_perf__1.txt"))
    assert healthy_run.bus_bandwidth == 21.4033 and healthy_run.out_of_bounds == 0
    assert healthy_run.ranks == {0: "spark-fb97", 1: "spark-4440"}
    assert healthy_run.rows[0] == (1073741824, 19.73, 20.8) and len(healthy_run.rows) == 3
    assert parse_nccl_run(sample("all_gather_perf__2.txt")).bus_bandwidth == 2.82151


def test_the_real_healthy_pair_passes_as_ib_roce_on_both_twins() -> None:
    text = sample("nccl-debug-info-net-ib__1.txt") + sample("all_gather_perf__1.txt")
    finding = deep.judge_nccl(parse_nccl_run(text), EXPECTED, REAL_HOSTS, text)
    assert finding.status is Status.OK
    assert "spark-a IB rocep1s0f1+roceP2p1s0f1; spark-b IB rocep1s0f1+roceP2p1s0f1" in finding.detail
    assert "avg bus bandwidth 21.4033 GB/s" in finding.detail


def test_the_real_run_after_recabling_without_a_reboot_shows_its_figure_for_deep_bandwidth() -> None:
    """The figure is deep.bandwidth's to judge (tests/unit/test_bandwidth.py: far below, reboot both Sparks)."""
    text = sample("all_gather_perf__2.txt")
    finding = deep.judge_nccl(parse_nccl_run(text), EXPECTED, REAL_HOSTS, text)
    assert "avg bus bandwidth 2.82151 GB/s" in finding.detail and "deep.bandwidth judges it" in finding.detail


@pytest.mark.parametrize("name, words", [
    ("nccl-socket-fallback__nccltests188.txt", "NCCL_IB_DISABLE is set"),
    ("nccl-ib-no-device__nccl226.txt", "NET/IB : No device found"),
    ("nccl-ib-no-device__spark-forum.txt", "NCCL_IB_HCA (rocep1s0f1)"),
])
def test_a_socket_fallback_fails_with_its_likely_cause(name: str, words: str) -> None:
    text = sample(name) + sample("all_gather_perf__2.txt")
    parsed = parse_nccl_run(text)
    finding = deep.judge_nccl(parsed, EXPECTED, REAL_HOSTS, text)
    assert SOCKET in parsed.transports   # the forum's lines were quoted without host prefixes: "a rank"
    assert finding.status is Status.FAIL and "fell back to TCP sockets" in finding.detail and words in finding.fix


def test_one_twin_fails_as_half_the_bandwidth() -> None:
    text = sample("nccl-debug-info-net-ib__1.txt").replace(" [1]roceP2p1s0f1:1/RoCE", "") + \
        sample("all_gather_perf__1.txt")
    finding = deep.judge_nccl(parse_nccl_run(text), EXPECTED, REAL_HOSTS, text)
    assert finding.status is Status.FAIL and "one twin only" in finding.detail
    assert "used rocep1s0f1 of rocep1s0f1+roceP2p1s0f1" in finding.detail


def test_an_ibv_modify_qp_failure_points_at_the_gid() -> None:
    text = (Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "nccl_ib_bad_hca__1.log").read_text()
    finding = deep.judge_nccl(parse_nccl_run(text), EXPECTED, REAL_HOSTS, text)
    assert finding.status is Status.FAIL and "ibv_modify_qp failed" in finding.detail and "links.roce" in finding.fix


def test_deep_nccl_judges_what_the_job_printed_against_each_nodes_twins() -> None:
    text = sample("nccl-debug-info-net-ib__1.txt") + sample("all_gather_perf__1.txt")
    facts = healthy()
    for name, hostname in REAL_HOSTS.items():
        identity = facts.nodes[name][test_checks.host.IDENTITY]
        facts.nodes[name][test_checks.host.IDENTITY] = dataclasses.replace(identity, hostname=hostname)
    run = dataclasses.replace(test_checks.deep_run(), nccl=text, nccl_skip="")
    finding = deep.check_nccl(facts, run)[0]
    assert finding.status is Status.OK and "spark-b IB rocep1s0f1+roceP2p1s0f1" in finding.detail


@pytest.mark.usefixtures("needs_mpi")
def test_the_simulated_pairs_all_gather_perf_prints_nccl_tests_format_and_fails_as_sockets(tmp_path: Path) -> None:
    """The testbed image's all_gather_perf, run here by OpenMPI over loopback, prints what sparkpair parses: the
    real table format, a measured bandwidth, and NCCL's lines saying sockets."""
    import os
    import subprocess
    import sys

    standin = Path(__file__).resolve().parents[1] / "testbed" / "sparkpair_testbed" / "image" / "nccl-tests" / \
        "all_gather_perf"
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA GB10, 0000000F:01:00.0'\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "lo",
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "NCCL_IB_HCA": "rocep1s0f1"}
    argv = ["mpirun", "--oversubscribe", "-np", "2", "--mca", "btl_tcp_if_include", "lo", "-x", "PATH", "-x",
            "NCCL_DEBUG", "-x", "NCCL_SOCKET_IFNAME", "-x", "NCCL_IB_HCA", sys.executable, str(standin),
            "-b", "8M", "-e", "16M", "-f", "2", "-g", "1"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    parsed = parse_nccl_run(result.stdout)
    assert [row[0] for row in parsed.rows] == [8 << 20, 16 << 20] and parsed.out_of_bounds == 0
    assert parsed.bus_bandwidth is not None and parsed.bus_bandwidth > 0
    assert parsed.transports == {SOCKET} and len(parsed.hosts) == 1   # both ranks on this host
    net_lines = next(iter(parsed.hosts.values()))
    assert net_lines.ib_not_found and net_lines.socket_interfaces == ["lo"] and net_lines.ib_hca == "rocep1s0f1"
    finding = deep.judge_nccl(parsed, EXPECTED, {}, result.stdout)
    assert finding.status is Status.FAIL and "fell back to TCP sockets" in finding.detail
    assert f"avg bus bandwidth {parsed.bus_bandwidth:g} GB/s" in finding.detail


def test_bench_records_the_fabric_the_engine_ran_on() -> None:
    from sparkpair.bench import fabric_facts, record
    from sparkpair.engine.state import LaunchState

    nodes = {"spark-a": {"NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1", "NCCL_IB_GID_INDEX": "3"},
             "spark-b": {"NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1", "NCCL_IB_GID_INDEX": "5"}}
    proof = {"transport": {"spark-a": "Socket", "spark-b": "Socket"},
             "devices": {"spark-a": ["enp1s0f1np1"], "spark-b": ["enp1s0f1np1"]}, "bus_bandwidth_gbs": 0.53}
    state = LaunchState("qwen3-235b", ["spark-a", "spark-b"], 0.0, "mpirun", fabric={"nodes": nodes, "proof": proof})
    facts = fabric_facts(state)
    assert facts["nodes"] == nodes and facts["transport"]["spark-b"] == "Socket" and facts["bus_bandwidth_gbs"] == 0.53
    line = record._fabric_line(facts)
    assert "spark-b: NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1, NCCL_IB_GID_INDEX=5" in line
    assert "NCCL spark-a Socket enp1s0f1np1" in line and "bus bandwidth 0.53 GB/s" in line
    unmeasured = fabric_facts(LaunchState("qwen3-235b", ["spark-a"], 0.0, "x"))
    assert unmeasured["transport"] is None and "not measured" in record._fabric_line(unmeasured)
    assert LaunchState.from_json(state.to_json()) == state
