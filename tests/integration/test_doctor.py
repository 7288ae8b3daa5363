"""sparkpair doctor on the simulated pair: a healthy pair passes, every fault the pair can inject is
found with its fix and clears after heal, --only filters, and --deep runs MPI across both nodes."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from conftest import Run, ensure_networked, run_sparkpair
from openai import OpenAI

TOKEN = "hf_sparkpair_doctor_test_token"
MODEL = "nvidia/Qwen3-235B-A22B-FP4"
SETTLES_WITHIN_S = 90  # how long a fault or a heal may take to show in doctor
# Re-joining the simulated cable's bridges keeps carrier up, so the nodes would keep neighbour
# entries that point at the old far end for up to a minute. Moving a real cable drops carrier,
# which makes the kernel flush them: the test does that flush for these faults.
RECABLING = {"crossed-cables"}


class Report:
    """One `doctor --json` run: exit code and findings."""

    def __init__(self, run: Run) -> None:
        assert run.code in (0, 1), run.text
        self.code, self.run = run.code, run
        self.findings = json.loads(run.out)["findings"]

    def rows(self, check: str, node: str | None = None, status: str | None = None) -> list[dict]:
        """Findings of a check id (or group prefix), optionally on one node and with one status."""
        return [f for f in self.findings if (f["check"] == check or f["check"].startswith(check + "."))
                and (node is None or f["node"] == node) and (status is None or f["status"] == status)]

    def bad(self) -> list[tuple[str, str, str]]:
        return sorted((f["status"], f["check"], f["node"]) for f in self.findings if f["status"] in ("FAIL", "WARN"))


def no_token(tmp: Path) -> dict:
    """An operator environment with no HF token anywhere."""
    return {"HF_TOKEN": "", "HF_TOKEN_PATH": "", "HF_HOME": str(tmp / "no-hf-home")}


def doctor(inventory: Path, *args: str, env: dict | None = None) -> Report:
    return Report(run_sparkpair(inventory, "doctor", "--json", *args, env=env))


def variant(bed, tmp_path: Path, **container: object) -> Path:
    """The pair's inventory with container settings changed."""
    data = yaml.safe_load(Path(bed.inventory).read_text())
    data["container"].update(container)
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def leftovers(bed) -> list[str]:
    """Doctor's short-lived containers or config copies still on a node."""
    found = []
    for node in ("spark-a", "spark-b"):
        names = bed.exec(node, "docker ps -a --format '{{.Names}}'").stdout.split()
        found += [f"{node}: container {n}" for n in names if n.endswith("-doctor")]
        if bed.exec(node, "test -e /home/nvidia/.sparkpair/doctor", check=False).returncode == 0:
            found.append(f"{node}: ~/.sparkpair/doctor")
    return found


@pytest.fixture(scope="module")
def pair(testbed):
    """A networked pair whose caches hold the profile's models and both nodes the test token
    (one launch and stop); the engine is stopped before and after the module."""
    ensure_networked(testbed)
    inventory = testbed.inventory
    run_sparkpair(inventory, "stop")
    launched = run_sparkpair(inventory, "launch", "--timeout", "120", env={"HF_TOKEN": TOKEN})
    assert launched.code == 0, launched.text
    assert run_sparkpair(inventory, "stop").code == 0
    yield testbed
    run_sparkpair(inventory, "stop")
    for node in ("spark-a", "spark-b"):
        testbed.exec(node, "rm -f /home/nvidia/.sparkpair/secrets/hf_token")


def test_a_healthy_pair_with_its_models_passes_without_a_warning(pair, tmp_path) -> None:
    report = doctor(pair.inventory, env=no_token(tmp_path))
    assert report.code == 0 and report.bad() == []
    assert {f["node"] for f in report.findings} == {"spark-a", "spark-b", "pair"}
    assert report.rows("links.mtu", "spark-b", "OK") and report.rows("trust.ssh", "spark-a", "OK")


@contextmanager
def token_files_moved(bed, nodes=("spark-a", "spark-b")):
    """The nodes' HF token files (placed by launch) moved aside for the block, then put back."""
    secrets = "/home/nvidia/.sparkpair/secrets"
    for node in nodes:
        bed.exec(node, f"mv {secrets}/hf_token {secrets}/hf_token.kept")
    try:
        yield
    finally:
        for node in nodes:
            bed.exec(node, f"mv {secrets}/hf_token.kept {secrets}/hf_token")


def test_a_healthy_pair_without_models_passes_with_download_warnings_only(pair, tmp_path) -> None:
    for node in ("spark-a", "spark-b"):
        pair.fault("model-missing-on-worker", node=node)
    with token_files_moved(pair):
        report = doctor(pair.inventory, env=no_token(tmp_path))
    assert report.code == 0, report.bad()
    assert report.bad() == [("WARN", "models.present", "spark-a"), ("WARN", "models.present", "spark-b"),
                            ("WARN", "models.token", "pair")]
    assert all("launch downloads it" in f["detail"] for f in report.rows("models.present", status="WARN"))
    with_token = doctor(pair.inventory, env={**no_token(tmp_path), "HF_TOKEN": TOKEN})
    assert with_token.rows("models.token", "pair", "OK") and TOKEN not in with_token.run.text


# fault, its options, then the findings it must cause: (check, node, status, words the fix must contain)
FAULTS = [
    ("link-down", {}, [("links.carrier", "spark-b", "FAIL", ["enP2p1s0f1np1", "spark-b"]),
                       ("links.carrier", "spark-a", "FAIL", ["enP2p1s0f1np1", "spark-a"]),
                       ("links.rdma", "spark-b", "FAIL", ["enP2p1s0f1np1", "spark-b"]),
                       ("path.ping", "spark-a", "FAIL", ["enP2p1s0f1np1", "spark-b"])]),
    ("cable-unplugged", {}, [("links.carrier", "spark-a", "FAIL", ["enp1s0f1np1", "spark-a"]),
                             ("links.carrier", "spark-b", "FAIL", ["enP2p1s0f1np1", "spark-b"])]),
    ("crossed-cables", {}, [("links.crossed", "spark-a", "FAIL", ["swap the QSFP cables"]),
                            ("links.crossed", "spark-b", "FAIL", ["swap the QSFP cables"])]),
    ("mtu-mismatch", {}, [("links.mtu", "spark-b", "FAIL", ["enp1s0f1np1 of spark-b", "mtu 9000"]),
                          ("links.mtu-match", "pair", "FAIL", ["enp1s0f1np1 of spark-b"]),
                          ("path.mtu", "spark-a", "FAIL", ["enp1s0f1np1", "spark-b"])]),
    ("wrong-ip", {}, [("links.address", "spark-b", "FAIL", ["enp1s0f1np1 of spark-b", "198.19.1.12/24"]),
                      ("path.ping", "spark-a", "FAIL", ["enp1s0f1np1", "spark-b"])]),
    ("port-busy", {}, [("ports.serving", "spark-a", "FAIL", ["on spark-a", "python3 (pid"])]),
    ("docker-down", {}, [("docker.daemon", "spark-b", "FAIL", ["sudo systemctl start docker", "spark-b"])]),
    ("peer-key-missing", {}, [("trust.ssh", "spark-a", "FAIL", ["spark-a's key on spark-b"])]),
    ("image-missing", {}, [("docker.image", "spark-b", "FAIL", ["docker pull", "on spark-b"])]),
    ("image-mismatch", {}, [("docker.image-match", "pair", "FAIL", ["docker pull"])]),
    ("model-missing-on-worker", {}, [("models.present", "spark-b", "WARN", ["sparkpair launch"])]),
    ("hf-cache-root-owned", {}, [("models.writable", "spark-b", "FAIL", ["chown", "on spark-b"])]),
    ("disk-full", {}, [("models.disk", "spark-b", "WARN", ["free disk space", "on spark-b"]),
                       ("models.writable", "spark-b", "FAIL", ["on spark-b"])]),
    ("gpu-missing", {}, [("platform.gpu", "spark-b", "FAIL", ["docs/runbooks.md#platform-gpu"])]),
    ("roce-mtu-1024", {}, [("links.roce", "spark-b", "WARN", ["sparkpair setup-network", "RoCE MTU follows to 4096"]),
                           ("links.mtu", "spark-b", "FAIL", ["enP2p1s0f1np1 of spark-b", "mtu 9000"])]),
    ("roce-gid-missing", {}, [("links.roce", "spark-b", "FAIL",
                               ["sudo ip addr del 198.19.1.12/24 dev enp1s0f1np1 && sudo netplan apply"])]),
    ("roce-gid-differs", {}, [("links.roce", "pair", "WARN",
                               ["NCCL_IB_GID_INDEX=3 on spark-a, NCCL_IB_GID_INDEX=5 on spark-b"])]),
]


def recabled(bed) -> None:
    """What carrier loss does when a real cable moves: forget the neighbours behind the twins."""
    for node in ("spark-a", "spark-b"):
        bed.exec(node, "ip neigh flush dev enp1s0f1np1; ip neigh flush dev enP2p1s0f1np1")


def assert_found(report: Report, check: str, node: str, status: str, words: list[str]) -> None:
    rows = report.rows(check, node, status)
    assert rows, f"no {status} {check} on {node}; got {report.bad()}"
    assert any(all(word in row["fix"] for word in words) for row in rows), rows


def wait_found(bed, inventory: Path, expected: list[tuple], env: dict) -> Report:
    """Doctor until every expected (check, node, status) row shows (see SETTLES_WITHIN_S)."""
    def found() -> Report | None:
        report = doctor(inventory, env=env)
        return report if all(report.rows(c, n, s) for c, n, s, _ in expected) else None

    return bed.wait_until(found, SETTLES_WITHIN_S, f"{expected} to show", interval=2)


def wait_ok(bed, inventory: Path, checks: list[tuple[str, str]], env: dict) -> Report:
    """Doctor until every (check, node) row is OK (a healed cable needs the neighbour cache to age)."""
    only = ",".join(sorted({check for check, _ in checks}))

    def all_ok() -> Report | None:
        report = doctor(inventory, "--only", only, env=env)
        good = all(report.rows(c, n) and all(r["status"] == "OK" for r in report.rows(c, n)) for c, n in checks)
        return report if good else None

    return bed.wait_until(all_ok, SETTLES_WITHIN_S, f"{only} OK after heal", interval=2)


@pytest.mark.parametrize("fault, options, expected", FAULTS, ids=[f[0] for f in FAULTS])
def test_each_fault_is_found_with_its_fix_and_clears_after_heal(pair, tmp_path, fault, options, expected) -> None:
    env = no_token(tmp_path)
    pair.fault(fault, **options)
    if fault in RECABLING:
        recabled(pair)
    report = wait_found(pair, pair.inventory, expected, env)
    for check, node, status, words in expected:
        assert_found(report, check, node, status, words)
    assert report.code == (1 if any(status == "FAIL" for _, _, status, _ in expected) else 0)
    pair.heal()
    if fault in RECABLING:
        recabled(pair)
    wait_ok(pair, pair.inventory, [(check, node) for check, node, _, _ in expected], env)


# Changes an operator makes by hand (no testbed fault needed), made on spark-b as root, their undo,
# and what doctor's real probes must find: (check, node, status, words the fix must contain)
BLOB = "$(ls -d /home/nvidia/.cache/huggingface/hub/models--nvidia--Qwen3-235B-A22B-FP4/blobs/* | head -n 1)"  # the profile's
NETPLAN = "/etc/netplan/40-sparkpair-cx7.yaml"
HAND_MADE = [
    ("netplan-file-removed", f"mv {NETPLAN} {NETPLAN}.kept", f"mv {NETPLAN}.kept {NETPLAN}",
     [("links.persistent", "spark-b", "WARN", ["setup-network", "spark-b"])]),
    ("extra-address", "ip addr add 198.19.1.99/24 dev enp1s0f1np1", "ip addr del 198.19.1.99/24 dev enp1s0f1np1",
     [("links.address", "spark-b", "WARN", ["leaves only 198.19.1.12/24 on enp1s0f1np1 of spark-b"])]),
    ("foreign-container", "docker run -d --name trtllm-multinode --network none --entrypoint sleep "
                          "sparkpair/trtllm-sim:1.3.0rc12 600", "docker rm -f trtllm-multinode",
     [("docker.container", "spark-b", "WARN", ["docker rm -f trtllm-multinode (on spark-b)"])]),
    ("user-not-in-docker-group", "gpasswd -d nvidia docker", "gpasswd -a nvidia docker",
     [("docker.group", "spark-b", "FAIL", ["usermod -aG docker"])]),
    ("blob-differs-on-worker", f"printf x >> {BLOB}", f"truncate -s -1 {BLOB}",
     [("models.match", "pair", "FAIL", ["sparkpair launch"])]),
]


@pytest.mark.parametrize("change, undo, expected", [h[1:] for h in HAND_MADE], ids=[h[0] for h in HAND_MADE])
def test_each_hand_made_change_is_found_and_clears_when_undone(pair, tmp_path, change, undo, expected) -> None:
    env = no_token(tmp_path)
    pair.exec("spark-b", change)
    try:
        report = wait_found(pair, pair.inventory, expected, env)
        for check, node, status, words in expected:
            assert_found(report, check, node, status, words)
        assert report.code == (1 if any(status == "FAIL" for _, _, status, _ in expected) else 0)
    finally:
        pair.exec("spark-b", undo)
    wait_ok(pair, pair.inventory, [(check, node) for check, node, _, _ in expected], env)


def test_a_busy_sshd_port_fails_with_the_sshd_transport(pair, tmp_path) -> None:
    inventory = variant(pair, tmp_path, mpi_transport="sshd")
    pair.fault("port-busy", port=2233)
    report = doctor(inventory, "--only", "ports", env=no_token(tmp_path))
    assert report.code == 1
    assert_found(report, "ports.sshd", "spark-a", "FAIL", ["on spark-a", "container.sshd_port"])
    assert report.rows("ports.sshd", "spark-b", "OK") and report.rows("ports.serving", "spark-a", "OK")
    assert not doctor(pair.inventory, "--only", "ports", env=no_token(tmp_path)).rows("ports.sshd")
    pair.heal()
    wait_ok(pair, inventory, [("ports.sshd", "spark-a")], no_token(tmp_path))


def test_sshd_down_fails_that_node_and_still_checks_the_other(pair, tmp_path) -> None:
    pair.fault("sshd-down")
    report = doctor(pair.inventory, env=no_token(tmp_path))
    assert report.code == 1
    assert_found(report, "reach.ssh", "spark-b", "FAIL", ["start ssh"])
    assert "refused" in report.rows("reach.ssh", "spark-b")[0]["detail"]
    assert not [f for f in report.findings if f["node"] == "spark-b" and f["status"] == "OK"]
    for check in ("reach.ssh", "platform.gpu", "links.carrier", "docker.image", "models.present"):
        assert report.rows(check, "spark-a", "OK"), check
    assert_found(report, "trust.ssh", "spark-a", "FAIL", ["start sshd on spark-b"])
    pair.heal()
    wait_ok(pair, pair.inventory, [("reach.ssh", "spark-b"), ("trust.ssh", "spark-a")], no_token(tmp_path))


def test_only_reports_the_chosen_ids_and_groups(pair, tmp_path) -> None:
    report = doctor(pair.inventory, "--only", "links.mtu,path", env=no_token(tmp_path))
    assert report.code == 0
    checks = {f["check"] for f in report.findings}
    assert checks == {"links.mtu", "path.ping", "path.mtu"}
    assert {f["node"] for f in report.findings} == {"spark-a", "spark-b"}


def test_doctor_shows_the_playbook_drift_each_with_its_reason(testbed, tmp_path) -> None:
    """Every departure of the simulated pair from NVIDIA's playbooks is a row with its reason: sparkpair's own
    (docs/profiles.md) and the pair's (its inventory's playbook_reasons); an unexplained override warns."""
    report = doctor(testbed.inventory, "--only", "playbook", env=no_token(tmp_path))
    assert report.code == 0 and report.bad() == [], report.bad()
    explained = {f["detail"].split(":", 1)[0]: f["detail"] for f in report.rows("playbook", status="INFO")}
    assert "Why (docs/profiles.md): keeps MPI's control traffic" in explained["env.OMPI_MCA_oob_tcp_if_include"]
    assert "Why (playbook_reasons): every address of the simulated pair" in explained["addressing.addresses"]
    assert "Why (playbook_reasons)" in explained["image"] and "Why (docs/profiles.md)" in explained["addressing.mtu"]
    env = yaml.safe_load(Path(testbed.inventory).read_text())["container"].get("env", {})
    changed = variant(testbed, tmp_path, env={**env, "NCCL_SOCKET_IFNAME": "enp1s0f1np1"})
    warned = doctor(changed, "--only", "playbook.env", env=no_token(tmp_path)).rows("playbook.env", "pair", "WARN")
    assert [row["detail"].split(":", 1)[0] for row in warned] == ["env.NCCL_SOCKET_IFNAME"], warned
    assert "playbook_reasons: {env.NCCL_SOCKET_IFNAME: ...}" in warned[0]["fix"]


def test_deep_runs_mpi_in_short_lived_containers_and_removes_them(pair, tmp_path) -> None:
    report = doctor(pair.inventory, "--deep", env={**no_token(tmp_path), "HF_TOKEN": TOKEN})
    assert report.bad() == [("FAIL", "deep.nccl", "pair")]   # sockets: no RDMA on the simulated pair (below)
    mpi = report.rows("deep.mpi", "pair", "OK")[0]["detail"]
    assert "rank 0 spark-a, rank 1 spark-b" in mpi and "short-lived containers trtllm-multinode-doctor" in mpi
    assert report.rows("deep.allreduce", "pair", "OK")[0]["detail"].startswith("sum 3 as expected")
    assert "same token" in report.rows("deep.token", "pair", "OK")[0]["detail"] and TOKEN not in report.run.text
    bandwidth = report.rows("deep.bandwidth", "pair")[0]
    mbs, us = bandwidth["detail"].split(" MB/s")[0], bandwidth["detail"].split(" µs")[0].rsplit(" ", 1)[-1]
    assert float(mbs) > 0 and float(us) > 0, bandwidth
    assert leftovers(pair) == []


def test_deep_proves_the_fabric_and_fails_the_simulated_pair_as_a_socket_fallback(pair, tmp_path) -> None:
    """The image's all_gather_perf moves its data between the nodes over TCP and says so as NCCL does: deep.nccl
    reads the transport, the devices and the bus bandwidth from that output, and FAILs with the cause."""
    report = doctor(pair.inventory, "--deep", "--only", "deep", env=no_token(tmp_path))
    assert report.code == 1 and [f["check"] for f in report.rows("deep", status="FAIL")] == ["deep.nccl"], report.bad()
    nccl = report.rows("deep.nccl", "pair", "FAIL")[0]
    assert "NCCL fell back to TCP sockets on spark-a, spark-b (Using network Socket), not RoCE" in nccl["detail"]
    assert "spark-a Socket enp1s0f1np1+enP2p1s0f1np1" in nccl["detail"]
    bandwidth = float(nccl["detail"].split("avg bus bandwidth ")[1].split(" GB/s")[0])
    assert bandwidth > 0
    assert "NET/IB : No device found" in nccl["fix"] and "NCCL_IB_HCA (rocep1s0f1,roceP2p1s0f1)" in nccl["fix"]
    assert leftovers(pair) == []


def test_deep_runs_an_nccl_tests_build_from_the_nodes(pair, tmp_path) -> None:
    """--nccl-tests PATH: a build on both nodes, mounted at the same path into the short-lived containers."""
    build = "/home/nvidia/nccl-build"
    for node in ("spark-a", "spark-b"):
        pair.exec(node, f"mkdir -p {build} && printf '#!/bin/sh\\necho \"# nccl-tests built on this node\"\\n' "
                        f"> {build}/all_gather_perf && chmod 755 {build}/all_gather_perf")
    try:
        report = doctor(pair.inventory, "--deep", "--only", "deep.mpi,deep.nccl", "--nccl-tests", build,
                        env=no_token(tmp_path))
        nccl = report.rows("deep.nccl", "pair", "FAIL")[0]["detail"]
        assert "no bus bandwidth" in nccl and "built on this node" in nccl
        missing = doctor(pair.inventory, "--deep", "--only", "deep.mpi", "--nccl-tests", "/nowhere/build",
                         env=no_token(tmp_path))
        assert "--nccl-tests /nowhere/build: no such file or directory" in missing.rows("deep.mpi", "pair", "FAIL")[0]["detail"]
    finally:
        for node in ("spark-a", "spark-b"):
            pair.exec(node, f"rm -rf {build}")
    assert leftovers(pair) == []
    assert run_sparkpair(pair.inventory, "doctor", "--nccl-tests", build).code == 2   # only with --deep


def test_deep_token_compares_the_ranks_with_this_machine_by_hash(pair, tmp_path) -> None:
    other = doctor(pair.inventory, "--deep", "--only", "deep.token", env={**no_token(tmp_path), "HF_TOKEN": "hf_x"})
    assert other.code == 0 and "not this machine's" in other.rows("deep.token", "pair", "WARN")[0]["detail"]
    with token_files_moved(pair, ["spark-b"]):
        missing = doctor(pair.inventory, "--deep", "--only", "deep", env={**no_token(tmp_path), "HF_TOKEN": TOKEN})
    assert missing.code == 1 and "the rank on spark-b has no token" in missing.rows("deep.token", "pair", "FAIL")[0]["detail"]
    assert missing.rows("deep.mpi", "pair", "OK") and leftovers(pair) == []


def test_deep_names_the_mpi_failure_and_cleans_up(pair, tmp_path) -> None:
    pair.fault("peer-key-missing")
    report = doctor(pair.inventory, "--deep", "--only", "deep", env=no_token(tmp_path))
    assert report.code == 1
    detail = report.rows("deep.mpi", "pair", "FAIL")[0]["detail"]
    assert "Permission denied (publickey)" in detail and "ORTE was unable to reliably start" in detail
    assert [f["status"] for f in report.rows("deep")][1:] == ["SKIP"] * 4
    assert leftovers(pair) == []


def test_deep_is_cut_off_at_the_timeout(pair, tmp_path) -> None:
    pair.fault("link-down")  # OpenMPI waits on the dead twin: the job would hang
    report = doctor(pair.inventory, "--deep", "--only", "deep", "--timeout", "8", env=no_token(tmp_path))
    assert report.code == 1
    assert "timed out after 8 s" in report.rows("deep.mpi", "pair", "FAIL")[0]["detail"]
    assert json.loads(report.run.out)["elapsed_s"] < 8 + 25  # the job's limit plus container start and removal
    assert leftovers(pair) == []


def test_deep_runs_beside_a_serving_engine_without_disturbing_it(pair, tmp_path) -> None:
    assert run_sparkpair(pair.inventory, "launch", "--timeout", "120").code == 0
    try:
        report = doctor(pair.inventory, "--deep", "--only", "deep,docker.container", env=no_token(tmp_path))
        assert report.code == 0, report.bad()
        assert "in the running engine containers trtllm-multinode" in report.rows("deep.mpi", "pair", "OK")[0]["detail"]
        assert "the running engine holds the GPUs" in report.rows("deep.nccl", "pair", "SKIP")[0]["detail"]
        status = json.loads(run_sparkpair(pair.inventory, "status", "--json").out)
        assert status["state"] == "serving", status
        answer = OpenAI(base_url="http://198.18.0.11:8355/v1", api_key="none").completions.create(
            model=MODEL, prompt="still there", max_tokens=4)
        assert answer.usage.completion_tokens == 4
    finally:
        assert run_sparkpair(pair.inventory, "stop").code == 0
