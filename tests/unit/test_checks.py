"""Doctor's check functions over hand-built facts: every check's OK, and its FAIL or WARN with the fix."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparkpair.checks import Facts, Finding, Status, deep, engine, links, run_checks
from sparkpair.checks.catalog import CHECKS
from sparkpair.checks.nccltests import parse_nccl_run
from sparkpair.engine import mpijobs
from sparkpair.inventory import Inventory, Node, read_inventory
from sparkpair.probes import NodeFacts, Probe, ProbeFailure, docker, host, models, net, rdma
from sparkpair.probes.docker import ContainerState, DockerInfo
from sparkpair.probes.host import DgxRelease, Gpu, Identity, Listener
from sparkpair.probes.models import RepoManifest
from sparkpair.probes.net import Address, Ethtool, Interface, NetplanFile, PingResult

ROOT = Path(__file__).resolve().parents[2]
SIM = read_inventory(ROOT / "tests" / "fixtures" / "inventory" / "sim.yaml")
PROFILE = "qwen3-235b"
GIB_KB = 1024 * 1024
CMA_KHO = (ROOT / "tests" / "fixtures" / "memory" / "meminfo-cma__dspark259.txt").read_text()
REVISION = "3c1f" * 10
BLOB = "9f86" * 10
CACHE = SIM.container.hf_cache
IMAGE = docker.image_id(SIM.container.image)
CONTAINER = docker.container(SIM.container.name)


def mac(node: str, twin: str) -> str:
    return f"02:00:00:{'0a' if node == 'spark-a' else '0b'}:00:{'01' if twin == 'enp1s0f1np1' else '02'}"


def roce(node: Node, gid_index: int = 3) -> dict[Probe[Any], Any]:
    """The RDMA probes of a healthy node: each twin's device Up, ACTIVE at RoCE MTU 4096, its IPv4 RoCE v2 GID."""
    links, ports, tables = {}, {}, {}
    for twin, address in node.links.items():
        device = "roce" + twin[2:].removesuffix("np1")
        links[twin] = rdma.RoceLink(device, 1, twin, True)
        ports[(device, 1)] = rdma.PortAttributes(device, 1, "PORT_ACTIVE", 4096, 4096, "Ethernet")
        ipv4 = rdma.ipv4_gid_value(str(address.ip))
        gids = (rdma.Gid(0, "fe80:0000:0000:0000:005b:10ff:fe01:0002", "IB/RoCE v1", twin),
                rdma.Gid(1, "fe80:0000:0000:0000:005b:10ff:fe01:0002", "RoCE v2", twin),
                rdma.Gid(gid_index - 1, ipv4, "IB/RoCE v1", twin), rdma.Gid(gid_index, ipv4, "RoCE v2", twin))
        tables[(device, 1)] = rdma.PortTable(device, 1, "ACTIVE", "LinkUp", "Ethernet", gids, 255)
    return {rdma.DEVICES: links, rdma.PORTS: ports, rdma.GID_TABLES: tables}


def manifest() -> RepoManifest:
    return RepoManifest(REVISION, {BLOB: 1000}, {"config.json": BLOB})


def node_facts(inventory: Inventory, name: str) -> NodeFacts:
    """What the probes report on a healthy node."""
    node, cache = inventory.node(name), inventory.container.hf_cache
    peer, mtu = inventory.peer_of(node), inventory.cluster.mtu
    facts = {
        host.IDENTITY: Identity(1000, "nvidia", frozenset({"nvidia", "docker"}), name),
        host.SUDO: host.RootAccess("ours", False),
        host.DGX_RELEASE: DgxRelease("DGX Spark", "NVIDIA DGX Spark", "7.5.0", "7.2.3", "DGX Server for KVM", ("7.5.0",)),
        host.GPUS: [Gpu(0, "NVIDIA GB10", "580.95.05", None)],
        host.MEMINFO: {"MemAvailable": 120 * GIB_KB, "MemFree": 110 * GIB_KB},
        host.KERNEL: "6.17.0-1021-nvidia",   # a real Spark's (shared/reference/realworld/outputs/uname-a__1.txt)
        host.LISTENERS: [Listener("0.0.0.0", 22, "sshd (pid 1)")],
        net.INTERFACES: {twin: Interface(twin, mac(name, twin), mtu, True, True,
                                       (Address(str(address.ip), address.network.prefixlen, "inet", False),))
                       for twin, address in node.links.items()},
        net.NETPLAN_FILES: {"/etc/netplan/40-sparkpair-cx7.yaml": NetplanFile.read(
            "/etc/netplan/40-sparkpair-cx7.yaml",
            "network:\n  ethernets:\n" + "".join(f"    {twin}:\n      addresses: [{address}]\n"
                                                 for twin, address in node.links.items()))},
        **roce(node),
        links.crossing_probe(inventory, node): {(twin, str(peer.links[twin].ip)): mac(peer.name, twin)
                                                for twin in node.links},
        docker.DOCKER_INFO: DockerInfo("20.10.24", frozenset({"nvidia", "runc"})),
        IMAGE: "sha256:" + "41" * 32,
        CONTAINER: None,
        models.cache_access(CACHE): (True, ""),
        host.free_bytes(cache): 80 * 1024 ** 3,
        engine.TOKEN_ON_NODE: False,
    }
    for twin in node.links:
        target = str(peer.links[twin].ip)
        facts[net.ethtool(twin)] = Ethtool(200000, True)
        facts[net.ping(twin, target)] = PingResult(2, 2, 0.1)
        facts[net.ping(twin, target, mtu - 28)] = PingResult(2, 2, 0.1)
        facts[net.known_host(target)] = (("ssh-ed25519", f"AAAA{peer.name}"),)
    facts[net.ssh_batch(str(next(iter(peer.links.values())).ip))] = peer.name
    for repo in inventory.profile(PROFILE).repos:
        facts[models.manifest(cache, repo)] = manifest()
    repos = tuple(inventory.profile(PROFILE).repos)
    facts[models.content(cache, repos, engine.VERIFY_BUDGET_S)] = content()
    facts[engine.hub_probe(inventory, repos[0])] = models.HubReach(True, "HTTP 200")
    return NodeFacts(facts)


def content(bad: dict[str, str] | None = None, unverified: tuple[str, ...] = (),
            links: tuple[tuple[str, str], ...] = ()) -> models.ContentCheck:
    """What verification reports for the profile's repos: all good unless told otherwise (for the target)."""
    repos = {models.repo_dirname(repo): models.RepoContent(1) for repo in SIM.profile(PROFILE).repos}
    repos[models.repo_dirname("nvidia/Qwen3-235B-A22B-FP4")] = models.RepoContent(1, bad or {}, unverified, links)
    return models.ContentCheck(repos, 0, 2, 0.01)


def set_content(node: str, found: object) -> Callable[[Facts], None]:
    return set_fact(node, models.content(CACHE, tuple(SIM.profile(PROFILE).repos), engine.VERIFY_BUDGET_S), found)


def set_hub(node: str, reach: object) -> Callable[[Facts], None]:
    return set_fact(node, engine.hub_probe(SIM, SIM.profile(PROFILE).repos[0]), reach)


def healthy(inventory: Inventory = SIM) -> Facts:
    facts = Facts(inventory, inventory.profile(PROFILE), clock_offsets={"spark-a": 0.01, "spark-b": 0.02})
    facts.nodes = {node.name: node_facts(inventory, node.name) for node in inventory.nodes}
    return facts


def checked(facts: Facts) -> list[Finding]:
    return run_checks(facts, CHECKS)


def rows(findings: list[Finding], check: str, node: str | None = None) -> list[Finding]:
    return [f for f in findings if f.check == check and (node is None or f.node == node)]


def test_a_healthy_pair_is_all_ok_and_every_check_reports() -> None:
    findings = checked(healthy())
    assert [f for f in findings if f.status is not Status.OK] == []
    assert {f.check for f in findings} == {
        "inventory.valid", "reach.ssh", "reach.sudo", "reach.same-user", "platform.dgx-os", "platform.gpu",
        "platform.driver-match", "links.present", "links.carrier", "links.speed", "links.address", "links.mtu",
        "links.persistent", "links.rdma", "links.roce", "links.mtu-match", "links.crossed", "path.ping", "path.mtu", "trust.ssh",
        "docker.group", "docker.daemon", "docker.nvidia-runtime", "docker.image", "docker.image-match",
        "docker.container", "ports.serving", "models.present", "models.writable", "models.disk", "models.match",
        "models.token", "models.hub", "memory.available", "known.catalog", "clock.skew"}


def set_fact(node: str, key: Probe[Any], value: object) -> Callable[[Facts], None]:
    def change(facts: Facts) -> None:
        facts.nodes[node][key] = value
    return change


def set_interface(node: str, twin: str, **changes: object) -> Callable[[Facts], None]:
    def change(facts: Facts) -> None:
        interfaces = facts.nodes[node][net.INTERFACES]
        interfaces[twin] = dataclasses.replace(interfaces[twin], **changes)
    return change


def unreachable(facts: Facts) -> None:
    facts.unreachable["spark-b"] = "nvidia@198.18.0.12:22 refused the connection; is sshd running?"
    facts.connect_hints["spark-b"] = "sudo systemctl start ssh on the node"


def crossed(facts: Facts) -> None:
    for node, peer in (("spark-a", "spark-b"), ("spark-b", "spark-a")):
        ips = SIM.node(peer).links
        facts.nodes[node][links.crossing_probe(SIM, SIM.node(node))] = {
                                          ("enp1s0f1np1", str(ips["enp1s0f1np1"].ip)): mac(peer, "enP2p1s0f1np1"),
                                          ("enP2p1s0f1np1", str(ips["enP2p1s0f1np1"].ip)): mac(peer, "enp1s0f1np1")}


def no_models(node: str) -> Callable[[Facts], None]:
    def change(facts: Facts) -> None:
        for repo in SIM.profile(PROFILE).repos:
            facts.nodes[node][models.manifest(CACHE, repo)] = RepoManifest(None)
    return change


def stale_engine(facts: Facts) -> None:
    facts.nodes["spark-b"][CONTAINER] = ContainerState("trtllm-multinode", "exited", False, "sha256:1",
                                                         {"sparkpair.node": "spark-b"}, "")


def skew(seconds: float) -> Callable[[Facts], None]:
    def change(facts: Facts) -> None:
        facts.clock_offsets = {"spark-a": 0.0, "spark-b": seconds}
    return change


def both(*changes: Callable[[Facts], None]) -> Callable[[Facts], None]:
    def change(facts: Facts) -> None:
        for each in changes:
            each(facts)
    return change


DENIED = ProbeFailure("ssh 198.19.1.12", 255, "nvidia@198.19.1.12: Permission denied (publickey).\n")
TWIN = "enp1s0f1np1"
# (what breaks, check id, node, expected status, words the detail or the fix must contain)
BROKEN = [
    (unreachable, "reach.ssh", "spark-b", "FAIL", ["refused", "sudo systemctl start ssh"]),
    (set_fact("spark-b", host.SUDO, host.RootAccess("absent", False)), "reach.sudo", "spark-b", "FAIL",
     ["NOPASSWD: /usr/local/sbin/sparkpair-root"]),
    (set_fact("spark-b", host.IDENTITY, Identity(1001, "nvidia", frozenset({"docker"}), "spark-b")),
     "reach.same-user", "pair", "FAIL", ["uid 1001"]),
    (set_fact("spark-b", host.DGX_RELEASE, ProbeFailure("dgx_release", 1, "No such file")), "platform.dgx-os",
     "spark-b", "WARN", ["DGX OS"]),
    (set_fact("spark-b", host.GPUS, []), "platform.gpu", "spark-b", "FAIL", ["no GPU visible"]),
    (set_fact("spark-b", host.GPUS, [Gpu(0, "NVIDIA GB10", "575.1", None)]), "platform.driver-match", "pair", "FAIL",
     ["575.1"]),
    (lambda f: f.nodes["spark-b"][net.INTERFACES].pop(TWIN), "links.present", "spark-b", "FAIL", [TWIN]),
    (set_interface("spark-b", TWIN, admin_up=False, carrier=False), "links.carrier", "spark-b", "FAIL",
     [f"brings {TWIN} up on spark-b"]),
    (set_interface("spark-b", TWIN, carrier=False), "links.carrier", "spark-b", "FAIL",
     [f"reseat the QSFP cable of {TWIN} on spark-b"]),
    (set_fact("spark-b", net.ethtool(TWIN), Ethtool(100000, True)), "links.speed", "spark-b", "WARN", ["100000Mb/s"]),
    (set_interface("spark-b", TWIN, addresses=(Address("198.19.1.112", 24, "inet", False),)), "links.address",
     "spark-b", "FAIL", [f"gives {TWIN} of spark-b 198.19.1.12/24"]),
    (set_interface("spark-b", TWIN, addresses=(Address("198.19.1.12", 24, "inet", False),
                                               Address("198.19.1.99", 24, "inet", False))),
     "links.address", "spark-b", "WARN", ["198.19.1.99"]),
    (set_interface("spark-b", TWIN, mtu=1500), "links.mtu", "spark-b", "FAIL", [f"sets {TWIN} of spark-b to mtu 9000"]),
    (set_interface("spark-b", TWIN, mtu=1500), "links.mtu-match", "pair", "FAIL", [f"{TWIN} of spark-b"]),
    (set_interface("spark-b", TWIN, addresses=(Address("198.19.1.12", 24, "inet", True),)), "links.persistent",
     "spark-b", "WARN", ["DHCP lease", "/etc/netplan"]),
    (set_fact("spark-b", net.NETPLAN_FILES, {}), "links.persistent", "spark-b", "WARN", ["lost at reboot"]),
    (set_fact("spark-b", rdma.DEVICES, {TWIN: rdma.RoceLink("rocep1s0f1", 1, TWIN, False)}), "links.rdma", "spark-b",
     "FAIL",
     [f"check the cable of {TWIN} on spark-b"]),
    (lambda f: f.nodes["spark-b"].update(roce(SIM.node("spark-b"), 5)), "links.roce", "pair", "WARN",
     ["index 3 on spark-a and 5 on spark-b", "NCCL_IB_GID_INDEX=5 on spark-b"]),
    (lambda f: f.nodes["spark-b"][rdma.PORTS].update(
        {("rocep1s0f1", 1): rdma.PortAttributes("rocep1s0f1", 1, "PORT_ACTIVE", 4096, 1024, "Ethernet")}),
     "links.roce", "spark-b", "WARN", ["active_mtu 1024", "bounce enp1s0f1np1 on spark-b"]),
    (crossed, "links.crossed", "spark-a", "FAIL", ["cables crossed", "swap the QSFP cables"]),
    (set_fact("spark-a", net.ping(TWIN, "198.19.1.12"), PingResult(2, 0, None)), "path.ping", "spark-a", "FAIL",
     ["0 of 2 answered", f"links.* rows of {TWIN} on spark-a and spark-b"]),
    (set_fact("spark-a", net.ping(TWIN, "198.19.1.12", 8972), PingResult(2, 0, None)), "path.mtu", "spark-a", "FAIL",
     [f"sets {TWIN} to mtu 9000 on spark-a and spark-b"]),
    (set_fact("spark-a", net.ssh_batch("198.19.1.12"), DENIED), "trust.ssh", "spark-a", "FAIL",
     ["Permission denied", "authorizes spark-a's key on spark-b"]),
    (set_fact("spark-a", net.known_host("198.19.2.12"), ()), "trust.ssh", "spark-a", "FAIL",
     ["198.19.2.12 is not in known_hosts", "records spark-b's host key for 198.19.2.12 on spark-a"]),
    (set_fact("spark-a", net.known_host("198.19.2.12"), (("ssh-ed25519", "AAAAstale"),)), "trust.ssh", "spark-a",
     "FAIL", ["(ssh-ed25519) differs from 198.19.1.12's", "records spark-b's host key for 198.19.2.12"]),
    (set_fact("spark-b", host.IDENTITY, Identity(1000, "nvidia", frozenset({"nvidia"}), "spark-b")), "docker.group",
     "spark-b", "FAIL", ["usermod -aG docker"]),
    (set_fact("spark-b", docker.DOCKER_INFO, ProbeFailure("docker_info", 1, "Cannot connect to the Docker daemon")),
     "docker.daemon", "spark-b", "FAIL", ["sudo systemctl start docker (on spark-b)"]),
    (set_fact("spark-b", docker.DOCKER_INFO, DockerInfo("20.10", frozenset({"runc"}))), "docker.nvidia-runtime",
     "spark-b", "FAIL", ["nvidia-ctk runtime configure"]),
    (set_fact("spark-b", IMAGE, None), "docker.image", "spark-b", "FAIL", ["docker pull", "(on spark-b)"]),
    (set_fact("spark-b", IMAGE, "sha256:" + "dd" * 32), "docker.image-match", "pair", "FAIL",
     ["different image IDs"]),
    (set_fact("spark-b", CONTAINER, ContainerState("trtllm-multinode", "running", True, "sha256:1", {}, "")),
     "docker.container", "spark-b", "WARN", ["not started by sparkpair", "docker rm -f trtllm-multinode (on spark-b)"]),
    (stale_engine, "docker.container", "spark-b", "WARN", ["stale", "sparkpair stop"]),
    (set_fact("spark-a", host.LISTENERS, [Listener("0.0.0.0", 8355, "python3 (pid 7)")]), "ports.serving", "spark-a",
     "FAIL", ["python3 (pid 7)", "on spark-a"]),
    (no_models("spark-b"), "models.present", "spark-b", "WARN", ["not in the HF cache", "sparkpair launch"]),
    (set_fact("spark-b", models.manifest(CACHE, "nvidia/Qwen3-235B-A22B-FP4"),
              RepoManifest(REVISION, {BLOB: 1000}, {"config.json": BLOB}, unsafe=("snapshots/r/x: a link to ../../../x",))),
     "models.present", "spark-b", "FAIL", ["refuses to use", "a link to ../../../x", "remove", "models--nvidia--"]),
    (no_models("spark-b"), "models.token", "pair", "WARN", ["export HF_TOKEN"]),
    (set_fact("spark-b", models.cache_access(CACHE), (True, "/home/nvidia/.cache/huggingface/hub")), "models.writable",
     "spark-b", "FAIL", ["belongs to another user", "chown", "(on spark-b)"]),
    (set_fact("spark-b", models.cache_access(CACHE), (False, "")), "models.writable", "spark-b", "FAIL", ["not writable"]),
    (both(no_models("spark-b"), set_fact("spark-b", host.free_bytes(CACHE), 10 * 1024 ** 3)), "models.disk",
     "spark-b", "FAIL", ["to download", "on spark-b"]),
    (set_fact("spark-b", host.free_bytes(CACHE), 0), "models.disk", "spark-b", "WARN",
     ["nothing to download", "on spark-b"]),
    (set_fact("spark-b", models.manifest(CACHE, "nvidia/Qwen3-235B-A22B-FP4"), RepoManifest(REVISION, {BLOB: 999}, {"c": BLOB})),
     "models.match", "pair", "FAIL", ["999 bytes", "sparkpair launch"]),
    (set_content("spark-b", content({BLOB: "content hashes to 0c1f33a2e9d1"})), "models.match", "spark-b", "FAIL",
     ["nvidia/Qwen3-235B-A22B-FP4: config.json is corrupt on spark-b", "copies it again from spark-a"]),
    (set_content("spark-a", content({BLOB: "content hashes to 0c1f33a2e9d1"})), "models.match", "spark-a", "FAIL",
     ["config.json is corrupt on spark-a", "sparkpair launch (downloads it again)"]),
    (set_content("spark-b", content(links=(("r/config.json", "not a link to a blob"),))), "models.match", "spark-b",
     "FAIL", ["snapshots/r/config.json is not a link to a blob"]),
    (set_content("spark-b", content(unverified=(BLOB,))), "models.match", "spark-b", "WARN",
     ["1 of 1 files not verified yet", "run doctor again"]),
    (set_content("spark-b", ProbeFailure("model content", 1, "python3: not found")), "models.match", "spark-b",
     "SKIP", ["cannot verify", "python3: not found"]),
    (both(no_models("spark-a"), set_hub("spark-a", models.HubReach(False, "URLError: [Errno -3] Temporary failure"))),
     "models.hub", "spark-a", "WARN", ["not reached from spark-a: URLError", "--model-source local:PATH"]),
    (set_fact("spark-b", host.MEMINFO, {"MemAvailable": 5 * GIB_KB, "MemFree": 5 * GIB_KB}), "memory.available",
     "spark-b", "FAIL", ["needs 8.0 GiB"]),
    (set_fact("spark-b", host.MEMINFO, {"MemAvailable": 100 * GIB_KB, "MemFree": 6 * GIB_KB}), "memory.available",
     "spark-b", "WARN", ["drop_caches"]),
    # the known-bad catalog's entries, each on a real sample of the fact it reads (tests/unit/test_known_bad.py)
    (both(set_fact("spark-b", host.KERNEL, "7.0.0-1019-nvidia"), set_fact("spark-b", host.MEMINFO, {
        "MemAvailable": 100 * GIB_KB, "MemFree": 100 * GIB_KB, **host.parse_meminfo(CMA_KHO)})),
     "known.kernel-kho-cma", "spark-b", "FAIL", ["CmaFree 940604 kB > CmaTotal 0 kB", "kho=off", "NV-Kernels/pull/591"]),
    (set_fact("spark-b", host.KERNEL, "6.17.0-1008-nvidia"), "known.kernel-6-17-0-1008-panic", "spark-b", "WARN",
     ["DOE mailbox", "full-upgrade"]),
    (set_fact("spark-b", docker.image_config(SIM.container.image), docker.ImageConfig(
        "sha256:" + "41" * 32, (), {"NCCL_VERSION": "2.30.4-1"}, {})), "known.nccl-2-30-4-nvls-hang", "spark-b",
     "WARN", ["nccl 2.30.4-1 and NCCL_NVLS_ENABLE not set", "NCCL_NVLS_ENABLE=0"]),
    (set_fact("spark-b", docker.image_config(SIM.container.image), docker.ImageConfig(
        "sha256:" + "41" * 32, (), {"NCCL_VERSION": "2.16.2-1"}, {})), "known.nccl-before-2-28-9", "spark-b", "WARN",
     ["nccl 2.16.2-1", "2.28.9 or later"]),
    (lambda f: setattr(f, "inventory", dataclasses.replace(f.inventory, container=dataclasses.replace(
        f.inventory.container, image="nvcr.io/nvidia/vllm:25.12-py3"))), "known.vllm-image-25-12", "spark-a", "WARN",
     ["vLLM 0.11.1", "nvcr.io/nvidia/vllm:26.05-py3"]),
    (skew(5), "clock.skew", "pair", "WARN", ["5.00 s", "timedatectl"]),
    (skew(60), "clock.skew", "pair", "FAIL", ["Root CA"]),
]


@pytest.mark.parametrize("breaks, check, node, status, words", BROKEN,
                         ids=[f"{case[1]}-{case[3]}-{i}" for i, case in enumerate(BROKEN)])
def test_each_check_fails_or_warns_with_its_fix(breaks, check, node, status, words) -> None:
    assert all(f.status is Status.OK for f in rows(checked(healthy()), check, node))
    facts = healthy()
    breaks(facts)
    found = [f for f in rows(checked(facts), check, node) if f.status.value == status]
    assert found, rows(checked(facts), check)
    assert any(all(word in f.detail + " " + f.fix for word in words) for f in found), found


def test_an_unreachable_node_skips_its_rows_while_the_other_is_checked() -> None:
    facts = healthy()
    unreachable(facts)
    findings = checked(facts)
    worker = [f for f in findings if f.node == "spark-b"]
    assert {f.status for f in worker} == {Status.FAIL, Status.SKIP}
    assert [f.check for f in worker if f.status is Status.FAIL] == ["reach.ssh"]
    assert all(f.status is Status.OK for f in findings if f.node == "spark-a")


def test_a_sudo_question_without_an_answer_is_not_called_a_password_prompt() -> None:
    facts = healthy()
    lost = ProbeFailure("sudo", -1, "the node's probe round ended without this probe's answer (exit -1)")
    set_fact("spark-b", host.SUDO, lost)(facts)
    [row] = rows(checked(facts), "reach.sudo", "spark-b")
    assert row.status is Status.FAIL
    assert "could not ask whether sudo -n works" in row.detail and "exit -1" in row.detail
    assert "password" not in row.detail and "NOPASSWD" not in row.fix


def test_twins_in_one_subnet_warn_with_why() -> None:
    one_subnet = read_inventory(ROOT / "tests" / "fixtures" / "inventory" / "one-subnet.yaml")
    finding = rows(checked(healthy(one_subnet)), "inventory.twin-subnets", "spark-a")[0]
    assert finding.status is Status.WARN and "routing ambiguity" in finding.detail
    assert "asymmetric routing" in finding.detail and "192.168.101.x/24" in finding.fix
    assert rows(checked(healthy()), "inventory.twin-subnets") == []


def test_the_shipped_example_raises_none_of_doctors_inventory_warnings() -> None:
    example = read_inventory(ROOT / "inventory.example.yaml")
    inventory_rows = [f for f in checked(healthy(example)) if f.check.startswith("inventory.")]
    assert inventory_rows and all(f.status is Status.OK for f in inventory_rows)


def test_the_serving_port_held_by_the_running_engine_is_ok_and_memory_is_not_judged() -> None:
    facts = healthy()
    for name in ("spark-a", "spark-b"):
        facts.nodes[name][CONTAINER] = ContainerState("trtllm-multinode", "running", True, "sha256:1",
                                                        {"sparkpair.node": name}, "2026-01-01T00:00:00")
    facts.nodes["spark-a"][host.LISTENERS] = [Listener("0.0.0.0", 8355, "python3 (pid 7)")]
    findings = checked(facts)
    assert rows(findings, "ports.serving")[0].status is Status.OK
    assert {f.status for f in rows(findings, "memory.available")} == {Status.SKIP}


def test_the_sshd_port_is_checked_on_both_nodes_for_the_sshd_transport() -> None:
    sshd = dataclasses.replace(SIM, container=dataclasses.replace(SIM.container, mpi_transport="sshd"))
    facts = healthy(sshd)
    assert [f.status for f in rows(checked(facts), "ports.sshd")] == [Status.OK, Status.OK]
    facts.nodes["spark-b"][host.LISTENERS] = [Listener("0.0.0.0", 2233, "python3 (pid 9)")]
    finding = rows(checked(facts), "ports.sshd", "spark-b")[0]
    assert finding.status is Status.FAIL and "container.sshd_port" in finding.fix


def test_a_token_on_this_machine_satisfies_models_token() -> None:
    facts = healthy()
    no_models("spark-b")(facts)
    facts.operator_token = True
    assert rows(checked(facts), "models.token")[0].status is Status.OK


# --- deep ---------------------------------------------------------------------------------------

OPERATOR = hashlib.sha256(b"hf_x").hexdigest()


def deep_run(**changes: object) -> deep.DeepRun:
    """What a healthy pair's deep jobs report."""
    stages = {
        "hosts": [{"rank": 0, "host": "spark-a"}, {"rank": 1, "host": "spark-b"}],
        "token": [{"rank": r, "host": h, "env": True, "path": "/sparkpair/secrets/hf_token", "sha256": OPERATOR}
                  for r, h in enumerate(("spark-a", "spark-b"))],
        "allreduce": {"sum": 3, "expected": 3, "ints": 1 << 20, "wrong": 0},
        "bandwidth": {"latency_us": 40.0, "bandwidth_mbs": 9000.0, "message_bytes": 8 << 20, "messages": 24},
        "done": {"ranks": 2},
    }
    run = deep.DeepRun(where="in short-lived containers trtllm-multinode-doctor, removed afterwards",
                       exit_code=0, stages=stages, operator_sha256=OPERATOR, nccl_skip="no all_gather_perf")
    return dataclasses.replace(run, **changes)


def deep_findings(run: deep.DeepRun) -> dict[str, Finding]:
    return {f.check: f for f in run_checks(healthy(), deep.deep_checks(run))}


def test_healthy_deep_jobs_are_ok_and_show_the_figures() -> None:
    found = deep_findings(deep_run())
    assert {c: f.status for c, f in found.items()} == {
        "deep.mpi": Status.OK, "deep.allreduce": Status.OK, "deep.token": Status.OK,
        "deep.bandwidth": Status.OK, "deep.nccl": Status.SKIP}
    assert "rank 0 spark-a, rank 1 spark-b" in found["deep.mpi"].detail
    assert "short-lived" in found["deep.mpi"].detail
    assert "9000 MB/s" in found["deep.bandwidth"].detail and "40.0 µs" in found["deep.bandwidth"].detail
    assert OPERATOR not in " ".join(f.detail for f in found.values())


def with_stage(name: str, value: object) -> dict:
    return {**deep_run().stages, name: value}


def without(*names: str) -> dict:
    return {k: v for k, v in deep_run().stages.items() if k not in names}


def token_stage(*digests: object, env: bool = True) -> list[dict]:
    return [{"rank": r, "host": h, "env": env, "sha256": d} for r, (h, d) in enumerate(zip(("spark-a", "spark-b"),
                                                                                           digests))]


NCCL_OUT = "#  Out of bounds values : 0 OK\n# Avg bus bandwidth    : {} \n#\n"
DEEP_BROKEN = [
    ({"blocked": "needs docker.image on spark-b", "stages": {}}, "deep.mpi", "SKIP", "needs docker.image"),
    ({"blocked": "needs docker.image on spark-b", "stages": {}}, "deep.nccl", "SKIP", "needs docker.image"),
    ({"error": "spark-b: docker run failed: nvidia-container-cli", "stages": {}}, "deep.mpi", "FAIL", "nvidia-container"),
    ({"error": "spark-b: docker run failed", "stages": {}}, "deep.allreduce", "SKIP", "needs deep.mpi"),
    ({"stages": {}, "timed_out": True, "exit_code": 124, "tail": "connect() to 198.19.2.11:1025 failed"},
     "deep.mpi", "FAIL", "timed out after 60 s (connect() to"),
    ({"stages": {}, "exit_code": 255, "tail": "Permission denied (publickey)."}, "deep.mpi", "FAIL",
     "mpirun exited 255: Permission denied"),
    ({"stages": with_stage("hosts", [{"rank": 0, "host": "spark-a"}])}, "deep.mpi", "FAIL", "no rank on spark-b"),
    ({"cleanup": "spark-b: cannot remove"}, "deep.cleanup", "FAIL", "cannot remove"),
    ({"stages": with_stage("allreduce", {"sum": 2, "expected": 3, "ints": 8, "wrong": 8})}, "deep.allreduce", "FAIL",
     "8 of 8 vector entries wrong"),
    ({"stages": without("allreduce", "bandwidth", "done"), "timed_out": True}, "deep.allreduce", "FAIL",
     "did not finish: timed out"),
    ({"stages": with_stage("token", token_stage(None, None, env=False))}, "deep.token", "FAIL",
     "HF_TOKEN_PATH is not set in the rank on spark-a, spark-b"),
    ({"stages": with_stage("token", token_stage(OPERATOR, None))}, "deep.token", "FAIL", "the rank on spark-b has no token"),
    ({"stages": with_stage("token", token_stage(OPERATOR, "ab" * 32))}, "deep.token", "FAIL", "different tokens"),
    ({"stages": with_stage("token", token_stage("ab" * 32, "ab" * 32))}, "deep.token", "WARN", "not this machine's"),
    ({"stages": with_stage("token", token_stage(None, None))}, "deep.token", "WARN", "launch copies"),
    ({"stages": with_stage("token", token_stage(None, None)), "operator_sha256": None}, "deep.token", "SKIP",
     "no HF token"),
    ({"stages": with_stage("token", token_stage("ab" * 32, "ab" * 32)), "operator_sha256": None}, "deep.token", "OK",
     "same token"),
    ({"stages": with_stage("bandwidth", {"latency_us": 90.0, "bandwidth_mbs": 110.0, "message_bytes": 8 << 20,
                                         "messages": 24})}, "deep.bandwidth", "WARN", "1 GbE"),
    ({"stages": with_stage("bandwidth", {"latency_us": 80000.0, "bandwidth_mbs": 900.0, "message_bytes": 8 << 20,
                                         "messages": 24})}, "deep.bandwidth", "WARN", "80000.0 µs"),
    ({"stages": without("bandwidth", "done"), "timed_out": True}, "deep.bandwidth", "WARN", "did not finish"),
    ({"nccl_skip": "", "nccl": NCCL_OUT.format("23.512")}, "deep.nccl", "OK", "23.512 GB/s"),
    ({"nccl_skip": "", "nccl": NCCL_OUT.format("23.512")}, "deep.bandwidth", "OK", "all_gather bus bandwidth 23.512"),
    ({"nccl_skip": "", "nccl": NCCL_OUT.format("16.5")}, "deep.bandwidth", "WARN", "below the cabling"),
    ({"nccl_skip": "", "nccl": NCCL_OUT.format("11.2")}, "deep.bandwidth", "FAIL", "far below the cabling"),
    ({"nccl_skip": "", "nccl": "NCCL error: unhandled system error\n"}, "deep.nccl", "FAIL", "unhandled system error"),
]


@pytest.mark.parametrize("changes, check, status, words", DEEP_BROKEN,
                         ids=[f"{case[1]}-{case[2]}-{i}" for i, case in enumerate(DEEP_BROKEN)])
def test_each_deep_check_reports_what_the_jobs_showed(changes, check, status, words) -> None:
    finding = deep_findings(deep_run(**changes))[check]
    assert finding.status.value == status and words in finding.detail, finding


def test_probe_stages_are_parsed_from_mpirun_noise() -> None:
    text = "Warning: Permanently added\nSPARKPAIR-DEEP hosts [{\"rank\": 0, \"host\": \"a\"}]\n" \
           "SPARKPAIR-DEEP broken {not json\n  SPARKPAIR-DEEP done {\"ranks\": 2}\n"
    assert deep.parse_stages(text) == {"hosts": [{"rank": 0, "host": "a"}], "done": {"ranks": 2}}
    assert parse_nccl_run(NCCL_OUT.format("21.9")).bus_bandwidth == 21.9
    assert parse_nccl_run("nothing here").bus_bandwidth is None


def test_the_deep_job_uses_launchs_mpirun_line_under_a_timeout() -> None:
    prefix = mpijobs.mpirun_prefix(SIM, SIM.profile(PROFILE))
    assert prefix[:5] == ["mpirun", "-np", "2", "--hostfile", "/sparkpair/config/openmpi-hostfile"]
    assert ["--mca", "plm_rsh_agent", "/sparkpair/config/mpi-rsh-agent"] == prefix[5:8]
    assert "-x" in prefix and "HF_TOKEN_PATH" in prefix and "--output-filename" not in prefix
    argv = mpijobs.bounded(["python3", "-c", "pass"], 7.5)
    assert argv[:5] == ["timeout", "-k", "5", "7.5", "python3"]


def test_the_telling_lines_of_mpiruns_output_reach_the_detail() -> None:
    text = ("nvidia@198.19.1.12: Permission denied (publickey).\n" + "-" * 70 + "\n"
            "ORTE was unable to reliably start one or more daemons.\nThis usually is caused by:\n\n")
    assert deep.telling(text) == ("nvidia@198.19.1.12: Permission denied (publickey). | "
                                "ORTE was unable to reliably start one or more daemons.")
    assert deep.telling("a\nb\nc\nd\n") == "b | c | d"


def test_deep_jobs_need_reachable_nodes_with_docker_and_the_image() -> None:
    assert mpijobs.blocker(healthy()) == ""
    facts = healthy()
    facts.nodes["spark-b"][IMAGE] = None
    assert mpijobs.blocker(facts) == "needs docker.image on spark-b"
    facts = healthy()
    unreachable(facts)
    assert mpijobs.blocker(facts) == "needs reach.ssh on spark-b"
    single = healthy()
    single.profile = single.inventory.profile("gpt-oss-120b")
    assert "TP=2" in mpijobs.blocker(single)
    foreign = healthy()
    foreign.nodes["spark-a"][CONTAINER] = ContainerState("trtllm-multinode", "running", True, "x", {}, "")
    assert "did not start" in mpijobs.blocker(foreign)


def test_the_engine_counts_as_running_only_where_its_container_runs() -> None:
    facts = healthy()
    assert mpijobs.engine_nodes(facts) == []
    facts.nodes["spark-a"][CONTAINER] = ContainerState("trtllm-multinode", "running", True, "x",
                                                         {"sparkpair.node": "spark-a"}, "")
    assert mpijobs.engine_nodes(facts) == ["spark-a"]


@pytest.mark.usefixtures("needs_mpi")
def test_the_probe_program_reports_every_stage_from_two_local_ranks(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("hf_local\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    env["HF_TOKEN_PATH"] = str(tmp_path / "token")
    argv = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none", "--mca", "btl_tcp_if_include",
            "lo", "--mca", "oob_tcp_if_include", "lo", "-x", "HF_TOKEN_PATH", "-np", "2",
            sys.executable, "-c", mpijobs.probe_program()]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    stages = deep.parse_stages(result.stdout)
    assert [r["rank"] for r in stages["hosts"]] == [0, 1]
    assert stages["allreduce"] == {"sum": 3, "expected": 3, "ints": 1 << 20, "wrong": 0}
    assert {r["sha256"] for r in stages["token"]} == {hashlib.sha256(b"hf_local").hexdigest()}
    assert stages["bandwidth"]["bandwidth_mbs"] > 0 and stages["done"] == {"ranks": 2}
    assert "hf_local" not in result.stdout


def test_a_single_node_profile_is_checked_on_the_node_that_will_serve_it() -> None:
    facts = healthy()
    facts.profile, facts.serving_node = facts.inventory.profile("gpt-oss-120b"), "spark-b"
    for node in facts.nodes.values():
        node.update({models.manifest(CACHE, repo): manifest() for repo in SIM.profile("gpt-oss-120b").repos})
    facts.nodes["spark-b"][host.MEMINFO] = {"MemAvailable": 1 * GIB_KB, "MemFree": 1 * GIB_KB}
    facts.nodes["spark-b"][models.cache_access(CACHE)] = (False, "Permission denied")
    findings = checked(facts)
    assert [f.status for f in rows(findings, "memory.available")] == [Status.FAIL]
    assert rows(findings, "memory.available", "spark-b") and rows(findings, "models.writable", "spark-b")
    assert rows(findings, "models.writable", "spark-b")[0].status is Status.FAIL
    assert not rows(findings, "memory.available", "spark-a") and not rows(findings, "models.writable", "spark-a")
    assert rows(findings, "ports.serving", "spark-b") and not rows(findings, "ports.serving", "spark-a")


def test_a_lost_echo_is_reported_but_only_a_silent_path_fails() -> None:
    facts = healthy()
    facts.nodes["spark-a"][net.ping(TWIN, "198.19.1.12")] = PingResult(3, 2, 0.1)
    facts.nodes["spark-a"][net.ping(TWIN, "198.19.1.12", 8972)] = PingResult(3, 1, 0.2)
    findings = checked(facts)
    plain, full = rows(findings, "path.ping", "spark-a")[0], rows(findings, "path.mtu", "spark-a")[0]
    assert plain.status is Status.OK and "(1 of 3 echoes lost)" in plain.detail
    assert full.status is Status.OK and "(2 of 3 echoes lost)" in full.detail
    facts.nodes["spark-a"][net.ping(TWIN, "198.19.1.12", 8972)] = PingResult(3, 0, None)
    assert rows(checked(facts), "path.mtu", "spark-a")[0].status is Status.FAIL
