"""Probe parsers against output captured from the simulated pair and from real tools."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sparkpair.probes import Probe, ProbeFailure, batch_script, host, models, net, parse_batch
from sparkpair.transport import Shell

CAPTURED = Path(__file__).parent.parent / "fixtures" / "probes"


def captured(name: str) -> str:
    return (CAPTURED / name).read_text()


def test_interfaces_fresh_node_has_twins_down_without_addresses() -> None:
    interfaces = net.parse_interfaces(captured("ip-addr-fresh.json"))
    twin = interfaces["enp1s0f1np1"]
    assert not twin.admin_up and not twin.carrier and twin.ipv4 == [] and twin.mtu == 1500
    management = interfaces["enP7s7"]
    assert management.admin_up and management.carrier and management.ipv4 == ["198.18.0.11/24"]


def test_default_route_and_ssh_session() -> None:
    assert net.parse_default_routes(captured("ip-route-default.json")) == ["enP7s7"]
    assert net.parse_ssh_session("198.18.0.1 51022 198.18.0.11 22") == "198.18.0.11"
    assert net.parse_ssh_session("") == ""


def test_ibdev2netdev_maps_roce_devices_to_netdevs() -> None:
    devices = net.parse_ibdev2netdev(captured("ibdev2netdev-down.txt"))
    assert devices["enP2p1s0f1np1"] == ("roceP2p1s0f1", False) and len(devices) == 4
    assert net.parse_ibdev2netdev("rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)\n") == {"enp1s0f1np1": ("rocep1s0f1", True)}


def test_ethtool_speed_and_link() -> None:
    assert net.parse_ethtool(captured("ethtool-no-link.txt")) == net.Ethtool(None, False)
    assert net.parse_ethtool("\tSpeed: 200000Mb/s\n\tLink detected: yes\n") == net.Ethtool(200000, True)


def test_ping_summaries() -> None:
    ok = net.parse_ping(captured("ping-ok.txt"))
    assert ok.ok and ok.received == 2 and ok.avg_ms is not None and ok.avg_ms < 10
    lost = net.parse_ping(captured("ping-lost.txt"))
    assert not lost.ok and lost.sent == 2 and lost.received == 0
    assert not net.parse_ping(captured("ping-df-too-big.txt")).ok


def test_netplan_owners_include_match_names() -> None:
    text = "\x1c/etc/netplan/50-cloud-init.yaml\n" + captured("netplan-cloud-init.yaml") + \
        "\x1c/etc/netplan/60-x.yaml\nnetwork:\n  ethernets:\n    cx:\n      match: {name: enp1s0f1np1}\n" + \
        "\x1c/etc/netplan/70-broken.yaml\nnetwork: [\n"
    files = net.parse_netplan_files(text)
    assert files["/etc/netplan/50-cloud-init.yaml"].interfaces == {"enP7s7"}
    assert files["/etc/netplan/60-x.yaml"].interfaces == {"cx", "enp1s0f1np1"}
    assert files["/etc/netplan/70-broken.yaml"].interfaces == frozenset()


def test_host_facts() -> None:
    assert host.parse_gpus(captured("nvidia-smi-query.csv")) == [host.Gpu(0, "NVIDIA GB10", "580.95.05", None)]
    assert host.parse_key_values(captured("dgx-release.txt"))["DGX_NAME"] == "DGX Spark"
    meminfo = host.parse_meminfo(captured("meminfo.txt"))
    assert meminfo["MemAvailable"] > 0 and meminfo["MemTotal"] >= meminfo["MemAvailable"]
    identity = host.parse_identity("1000\nnvidia\nnvidia sudo docker\nspark-a\n")
    assert identity.uid == 1000 and "docker" in identity.groups and identity.hostname == "spark-a"


def test_listeners_name_the_process() -> None:
    line = 'LISTEN 0 128 0.0.0.0:8355 0.0.0.0:* users:(("python3",pid=4242,fd=5))\nLISTEN 0 5 [::]:2233 [::]:*\n'
    assert host.parse_listeners(line) == [host.Listener("0.0.0.0", 8355, "python3 (pid 4242)"),
                                          host.Listener("::", 2233, "unknown process")]


def test_manifest_of_a_hub_cache_repo() -> None:
    sha = "a" * 64
    text = (f"f\t10\tblobs/{sha}\t\nf\t3\tblobs/{'b' * 64}.incomplete\t\n"
            f"l\t52\tsnapshots/{'c' * 40}/config.json\t../../blobs/{sha}\n"
            f"l\t52\tsnapshots/{'c' * 40}/model.safetensors\t../../blobs/{'d' * 64}\n"
            f"ref\trefs/main\t{'c' * 40}\n")
    manifest = models.parse_manifest(text)
    assert manifest.revision == "c" * 40 and manifest.blobs == {sha: 10}
    assert manifest.broken == ("model.safetensors",) and manifest.incomplete and not manifest.complete
    assert models.parse_manifest("") == models.RepoManifest(None)


def test_batch_runs_probes_concurrently_and_keeps_failures(tmp_path: Path) -> None:
    probes = [Probe("sleep-a", Shell("sleep 0.5; echo {}", "a b"), str),
              Probe("sleep-b", Shell("sleep 0.5; echo oops >&2; exit 4"), str, ok_codes=(0,))]
    result = subprocess.run(["sh", "-c", batch_script(probes).text], capture_output=True, text=True, timeout=5)
    raw = parse_batch(result.stdout)
    assert raw == {"sleep-a": (0, "a b\n", ""), "sleep-b": (4, "", "oops\n")}
    assert str(ProbeFailure("sleep-b", 4, "oops\n")) == "sleep-b: oops"
