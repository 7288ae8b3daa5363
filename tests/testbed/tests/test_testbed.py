"""Tests of the simulated Spark pair itself (scripts/testbed), against the running pair.

Order matters and is the file order: the fresh-state checks come first, then
the pair is cabled up (addresses, node keys) for MPI and the faults, and the
`down` test comes last (it brings the pair back up: later modules of the session use it).
"""
from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

NODES = ("spark-a", "spark-b")
IMAGE = "sparkpair/trtllm-sim:1.3.0rc12"
CABLED = ("enp1s0f1np1", "enP2p1s0f1np1")
TWINS = CABLED + ("enp1s0f0np0", "enP2p1s0f0np0")
LINKS = {"spark-a": {"enp1s0f1np1": "198.19.1.11/24", "enP2p1s0f1np1": "198.19.2.11/24"},
         "spark-b": {"enp1s0f1np1": "198.19.1.12/24", "enP2p1s0f1np1": "198.19.2.12/24"}}
TOOLS = ("ip", "ethtool", "ibdev2netdev", "nvidia-smi", "netplan", "docker", "ping", "ss")
MODEL_DIR = "~/.cache/huggingface/hub/models--nvidia--Qwen3-235B-A22B-FP4"


def link(bed, node, name) -> dict:
    """`ip -j link show NAME` inside NODE."""
    return json.loads(bed.exec(node, ["ip", "-j", "link", "show", name]).stdout)[0]


def has_carrier(bed, node, name) -> bool:
    """True when NAME has carrier (LOWER_UP) inside NODE."""
    return "LOWER_UP" in link(bed, node, name)["flags"]


def ibdev(bed, node) -> dict:
    """ibdev2netdev inside NODE as {netdev: 'Up'|'Down'}."""
    out = bed.exec(node, "ibdev2netdev", user="nvidia").stdout
    return {line.split()[4]: line.split()[5].strip("()") for line in out.splitlines()}


def ping(bed, node, address, size=56, count=1) -> bool:
    """True when NODE gets an answer from ADDRESS (don't-fragment, SIZE payload bytes)."""
    cmd = ["ping", "-c", str(count), "-W", "1", "-M", "do", "-s", str(size), address]
    return bed.exec(node, cmd, check=False).returncode == 0


def ipv4(bed, node, name) -> list:
    """Global IPv4 addresses of NAME inside NODE."""
    data = json.loads(bed.exec(node, ["ip", "-j", "-4", "addr", "show", "dev", name]).stdout)
    return [f"{a['local']}/{a['prefixlen']}" for entry in data for a in entry["addr_info"]
            if a["scope"] == "global"]


@pytest.fixture(scope="module")
def paired(testbed):
    """Both nodes cabled up by hand: QSFP addresses (MTU 9000) and each other's nvidia keys."""
    for node, addresses in LINKS.items():
        for twin, address in addresses.items():
            testbed.exec(node, f"ip link set {twin} mtu 9000 up && ip addr replace {address} dev {twin}")
    for node in NODES:
        testbed.wait_until(lambda n=node: all(ibdev(testbed, n)[t] == "Up" for t in CABLED), 10,
                           f"cabled twins Up on {node}")
    keys = {}
    for node in NODES:
        testbed.exec(node, "test -f ~/.ssh/id_ed25519 || ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/id_ed25519",
                     user="nvidia")
        keys[node] = testbed.exec(node, "cat ~/.ssh/id_ed25519.pub", user="nvidia").stdout.strip()
    for node, other in zip(NODES, reversed(NODES)):
        testbed.exec(node, f"grep -qxF '{keys[other]}' ~/.ssh/authorized_keys || "
                           f"echo '{keys[other]}' >> ~/.ssh/authorized_keys", user="nvidia")
    return keys


def test_fresh_nodes_look_like_unconfigured_sparks(pristine):
    """After `up` (or the `pristine` reset of what sparkpair configures) the twins are bare."""
    testbed = pristine
    for node in NODES:
        for twin in TWINS:
            assert "UP" not in link(testbed, node, twin)["flags"], f"{node}:{twin} should be DOWN"
            assert ipv4(testbed, node, twin) == []
        assert testbed.exec(node, "ls ~/.ssh", user="nvidia").stdout.split() == ["authorized_keys"]
        assert set(ibdev(testbed, node).values()) == {"Down"}


def test_both_nodes_answer_ssh_as_nvidia_with_strict_host_keys(testbed, tmp_path):
    for node in NODES:
        out = testbed.ssh(node, "hostname; id -un; id -Gn").stdout.split("\n")
        assert out[0] == node and out[1] == "nvidia" and "docker" in out[2].split()
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    argv = [a.replace(str(testbed.known_hosts), str(empty)) for a in testbed.ssh_argv("spark-a")]
    refused = subprocess.run(argv + ["true"], capture_output=True, text=True, timeout=30)
    assert refused.returncode == 255 and "Host key verification failed" in refused.stderr
    password = subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", "PubkeyAuthentication=no",
                               "-o", f"UserKnownHostsFile={testbed.known_hosts}",
                               "nvidia@198.18.0.12", "true"], capture_output=True, text=True, timeout=30)
    assert password.returncode == 255 and "(publickey)" in password.stderr


def test_hostnames_and_host_keys_differ(testbed):
    names = {testbed.ssh(node, "hostname").stdout.strip() for node in NODES}
    assert names == set(NODES)
    keys = {node: testbed.exec(node, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1]
            for node in NODES}
    assert keys["spark-a"] != keys["spark-b"]
    known = testbed.known_hosts.read_text()
    assert f"198.18.0.11 ssh-ed25519 {keys['spark-a']}" in known
    assert f"198.18.0.12 ssh-ed25519 {keys['spark-b']}" in known


def test_tools_resolve_over_ssh_and_under_sudo(testbed):
    script = "for t in " + " ".join(TOOLS) + "; do command -v $t || echo MISSING $t; done"
    for node in NODES:
        plain = testbed.ssh(node, script).stdout
        sudo = testbed.ssh(node, f"sudo -n sh -c '{script}'").stdout
        assert "MISSING" not in plain + sudo
        assert "/usr/local/bin/ibdev2netdev" in plain and "/usr/local/bin/ethtool" in sudo


def test_node_identity_files_and_standins(testbed):
    for node in NODES:
        release = testbed.exec(node, "cat /etc/dgx-release").stdout
        assert 'DGX_NAME="DGX Spark"' in release
        hosts = testbed.exec(node, "cat /etc/hosts").stdout
        assert f"127.0.1.1\t{node}" in hosts and "198.18.0.12\tspark-b" in hosts
        query = testbed.ssh(node, "nvidia-smi --query-gpu=name,driver_version,memory.total,"
                                  "pci.bus_id --format=csv,noheader").stdout.strip()
        assert query.startswith("NVIDIA GB10, 580.95.05, [N/A], 0000000F:01:00.0")
        generated = testbed.exec(node, "netplan generate && cat /run/systemd/network/10-netplan-enP7s7.network")
        assert "Address=198.18.0.1" in generated.stdout
    uuids = {testbed.exec(n, "nvidia-smi -L").stdout for n in NODES}
    assert len(uuids) == 2


def test_roots_home_is_the_nodes_own_not_this_machines(testbed):
    """A Spark's /root holds root's dotfiles, not this machine's: a file put in this machine's /root is not in
    either node's, and what the node writes there stays out of this machine's (the node's own, mode 700)."""
    marker = Path("/root") / f".testbed-host-marker-{os.getpid()}"
    marker.write_text("this machine's\n")
    try:
        for node in NODES:
            shown = testbed.exec(node, f"test -e {marker} && echo SEEN; stat -c %a /root; ls -A /root").stdout.split()
            assert "SEEN" not in shown and shown[0] == "700", (node, shown)
            assert set(shown[1:]) <= {".bashrc", ".profile", ".ssh", ".cache", ".docker", ".config"}, (node, shown)
        testbed.exec("spark-a", "echo node > /root/.testbed-node-own")
        assert not Path("/root/.testbed-node-own").exists()
        assert testbed.exec("spark-b", "test -e /root/.testbed-node-own", check=False).returncode != 0
    finally:
        marker.unlink()
        testbed.exec("spark-a", "rm -f /root/.testbed-node-own")


def test_each_engine_runs_host_network_containers_seeing_its_twins(testbed):
    for node in NODES:
        out = testbed.ssh(node, f"docker run --rm --network host --gpus all {IMAGE} "
                                "sh -c 'hostname; ip -o link; nvidia-smi -L'").stdout
        assert out.splitlines()[0] == node
        assert all(f": {twin}@" in out for twin in TWINS)
        assert "NVIDIA GB10" in out
    ids = {testbed.exec(n, ["docker", "image", "inspect", "-f", "{{.Id}}", IMAGE]).stdout for n in NODES}
    assert len(ids) == 1


def test_docker_cli_over_ssh(testbed, tmp_path):
    """The operator's docker CLI reaches a node's engine through SSH (DOCKER_HOST=ssh://), as a peer tool would.

    OpenSSH reads root's real home, not $HOME, so an `ssh` shim first on PATH names the key and known_hosts.
    """
    shim = tmp_path / "ssh"
    shim.write_text(f"#!/bin/sh\nexec /usr/bin/ssh -i {testbed.operator_key} -o IdentitiesOnly=yes "
                    f"-o UserKnownHostsFile={testbed.known_hosts} -o StrictHostKeyChecking=yes \"$@\"\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "DOCKER_HOST": "ssh://nvidia@198.18.0.12"}
    version = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], env=env,
                             capture_output=True, text=True, timeout=60, check=True).stdout
    assert version.startswith("20.10")
    out = subprocess.run(["docker", "run", "--rm", "--network", "host", IMAGE, "hostname"], env=env,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "spark-b"


def test_netplan_apply_configures_twins_and_is_idempotent(testbed):
    config = ("network:\n  version: 2\n  ethernets:\n    enp1s0f1np1:\n      mtu: 9000\n"
              "      addresses: [198.19.1.11/24]\n")
    testbed.exec("spark-a", f"printf '{config}' > /etc/netplan/40-cx7.yaml && chmod 600 /etc/netplan/40-cx7.yaml")
    for _ in range(2):
        testbed.ssh("spark-a", "sudo netplan apply")
        assert ipv4(testbed, "spark-a", "enp1s0f1np1") == ["198.19.1.11/24"]
        assert link(testbed, "spark-a", "enp1s0f1np1")["mtu"] == 9000
    testbed.exec("spark-a", "printf 'network: [oops' > /etc/netplan/40-cx7.yaml")
    bad = testbed.ssh("spark-a", "sudo netplan apply", check=False)
    assert bad.returncode != 0 and "40-cx7.yaml" in bad.stderr
    testbed.exec("spark-a", "rm /etc/netplan/40-cx7.yaml")
    testbed.ssh("spark-a", "sudo netplan apply")
    assert ipv4(testbed, "spark-a", "enp1s0f1np1") == []


def test_jumbo_frames_cross_the_cable(testbed, paired):
    for twin, subnet in zip(CABLED, ("198.19.1", "198.19.2")):
        assert ping(testbed, "spark-a", f"{subnet}.12", size=8972)
        out = testbed.exec("spark-b", f"ethtool {twin}").stdout
        assert "Speed: 200000Mb/s" in out and "Link detected: yes" in out


MPI_HELLO = """
import socket
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1, op=MPI.SUM)
names = comm.allgather(socket.gethostname())
if comm.Get_rank() == 0:
    print("RESULT", comm.Get_size(), total, ",".join(sorted(names)))
"""
CONTAINER_SSHD = ("cp -R /tmp/.ssh /root/ && chown -R root:root /root/.ssh && chmod 700 /root/.ssh "
                  "&& chmod 600 /root/.ssh/* && printf 'Host *\\n StrictHostKeyChecking no\\n "
                  "UserKnownHostsFile /dev/null\\n Port 2233\\n LogLevel ERROR\\n' "
                  "> /etc/ssh/ssh_config.d/mpi.conf && sed -i 's/^session.*required.*pam_loginuid.so/"
                  "session optional pam_loginuid.so/' /etc/pam.d/sshd && exec /usr/sbin/sshd -D -p 2233")


MPIRUN = ("docker exec -e OMPI_ALLOW_RUN_AS_ROOT=1 -e OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 {flags} tb-mpi "
          "mpirun -np 2 -H 198.19.1.11:1,198.19.1.12:1 -mca btl tcp,self "
          "-mca btl_tcp_if_include enp1s0f1np1 -mca oob_tcp_if_include enp1s0f1np1 ")
MODEL = "nvidia/Qwen3-235B-A22B-FP4"


@pytest.fixture
def mpi_containers(testbed, paired):
    """An engine container per node, host networking, sshd on 2233 with the nodes' keys
    (removed after the test: port 2233 must be free again)."""
    try:
        for node in NODES:
            testbed.ssh(node, f"docker run -d --rm --name tb-mpi --network host -v ~/.ssh:/tmp/.ssh:ro "
                              f"{IMAGE} bash -c \"{CONTAINER_SSHD}\"")
        testbed.wait_until(lambda: ":2233" in testbed.exec("spark-b", "ss -Hltn").stdout, 15,
                           "the container sshd on spark-b")
        yield
    finally:
        for node in NODES:
            testbed.ssh(node, "docker rm -f tb-mpi >/dev/null 2>&1 || true", check=False)


def test_mpi_allreduce_spans_both_nodes(testbed, mpi_containers):
    for node in NODES:
        testbed.ssh(node, f"docker exec -i tb-mpi sh -c 'cat > /tmp/hello.py' <<'EOF'\n{MPI_HELLO}\nEOF")
    out = testbed.ssh("spark-a", MPIRUN.format(flags="") + "python3 /tmp/hello.py", timeout=120).stdout
    assert "RESULT 2 3 spark-a,spark-b" in out


def http(method, url, body=None, timeout=10):
    """(status, text) of an HTTP request from the operator's namespace; (0, error) when it fails."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def test_engine_under_mpirun_serves_from_both_nodes(testbed, mpi_containers):
    for node in NODES:
        testbed.ssh(node, f"docker exec tb-mpi hf download {MODEL} --quiet", timeout=120)
    flags = "-d -e SIM_LOAD_SECONDS=1 -e SIM_COLLECTIVE_TIMEOUT_S=3"
    testbed.ssh("spark-a", MPIRUN.format(flags=flags) + "-x SIM_LOAD_SECONDS -x SIM_COLLECTIVE_TIMEOUT_S "
                f"trtllm-llmapi-launch trtllm-serve {MODEL} --backend pytorch --tp_size 2 "
                "--host 0.0.0.0 --port 8355")
    base = "http://198.18.0.11:8355"
    testbed.wait_until(lambda: http("GET", f"{base}/health")[0] == 200, 60, "the engine to be ready")
    status, text = http("POST", f"{base}/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 4})
    assert status == 200 and json.loads(text)["choices"][0]["text"]
    testbed.ssh("spark-b", "docker rm -f tb-mpi")  # the worker rank's node loses its container
    testbed.wait_until(lambda: http("POST", f"{base}/v1/completions",
                                    {"model": MODEL, "prompt": "Hi", "max_tokens": 4})[0] != 200,
                       60, "requests to fail without the worker rank")


def test_link_down_and_cable_unplugged_drop_carrier_on_both_ends(testbed, paired):
    testbed.fault("link-down")
    for node in NODES:
        state = link(testbed, node, "enP2p1s0f1np1")
        assert "NO-CARRIER" in state["flags"] and "UP" in state["flags"]  # admin state kept
        assert ibdev(testbed, node) == {"enp1s0f0np0": "Down", "enp1s0f1np1": "Up",
                                        "enP2p1s0f0np0": "Down", "enP2p1s0f1np1": "Down"}
    assert "Link detected: no" in testbed.exec("spark-b", "ethtool enP2p1s0f1np1").stdout
    testbed.fault("cable-unplugged")
    assert not any(has_carrier(testbed, n, t) for n in NODES for t in CABLED)
    assert not ping(testbed, "spark-a", "198.19.1.12")
    testbed.heal("cable-unplugged")
    assert has_carrier(testbed, "spark-a", "enp1s0f1np1")
    assert not has_carrier(testbed, "spark-b", "enP2p1s0f1np1"), "link-down is still active"
    testbed.heal()
    for node in NODES:
        testbed.wait_until(lambda n=node: set(ibdev(testbed, n)[t] for t in CABLED) == {"Up"}, 10,
                           f"carrier back on {node}")
    assert ping(testbed, "spark-a", "198.19.2.12", size=8972)


def peer_mac(bed, twin, address) -> str:
    """MAC that answers for ADDRESS out of spark-a's TWIN (fresh neighbour entry)."""
    bed.exec("spark-a", f"ip neigh flush dev {twin}")
    bed.exec("spark-a", ["ping", "-c", "1", "-W", "1", "-I", twin, address], check=False)
    entries = json.loads(bed.exec("spark-a", f"ip -j neigh show dev {twin} {address.split('/')[0]}").stdout)
    return entries[0].get("lladdr", "") if entries else ""


def test_crossed_cables_swap_the_twins(testbed, paired):
    straight = link(testbed, "spark-b", "enp1s0f1np1")["address"]
    crossed = link(testbed, "spark-b", "enP2p1s0f1np1")["address"]
    assert peer_mac(testbed, "enp1s0f1np1", "198.19.1.12") == straight
    testbed.fault("crossed-cables")
    assert "cabling:crossed" in testbed.cli("status", check=False).stdout
    assert peer_mac(testbed, "enp1s0f1np1", "198.19.1.12") == crossed
    testbed.heal()
    assert peer_mac(testbed, "enp1s0f1np1", "198.19.1.12") == straight


def test_mtu_mismatch_and_wrong_ip(testbed, paired):
    testbed.fault("mtu-mismatch")
    assert link(testbed, "spark-b", "enp1s0f1np1")["mtu"] == 1500
    assert not ping(testbed, "spark-a", "198.19.1.12", size=8972)
    assert ping(testbed, "spark-a", "198.19.1.12")
    testbed.heal()
    assert link(testbed, "spark-b", "enp1s0f1np1")["mtu"] == 9000
    assert ping(testbed, "spark-a", "198.19.1.12", size=8972)
    testbed.fault("wrong-ip")
    wrong = ipv4(testbed, "spark-b", "enp1s0f1np1")
    assert len(wrong) == 1 and wrong[0] != "198.19.1.12/24" and wrong[0].startswith("198.19.1.")
    assert not ping(testbed, "spark-a", "198.19.1.12")
    testbed.heal()
    assert ipv4(testbed, "spark-b", "enp1s0f1np1") == ["198.19.1.12/24"]
    assert ping(testbed, "spark-a", "198.19.1.12")


def test_port_busy_binds_real_ports(testbed):
    testbed.fault("port-busy")
    testbed.fault("port-busy", port=2233)
    listening = testbed.exec("spark-a", "ss -Hltn").stdout
    assert "0.0.0.0:8355" in listening and "0.0.0.0:2233" in listening
    reply = testbed.exec("spark-a", "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8355/health",
                         check=False).stdout
    assert reply == "404"
    testbed.heal("port-busy")
    testbed.wait_until(lambda: ":8355" not in testbed.exec("spark-a", "ss -Hltn").stdout, 10, "8355 free")
    assert ":2233" not in testbed.exec("spark-a", "ss -Hltn").stdout


def test_sshd_down_and_docker_down_stop_real_daemons(testbed):
    testbed.fault("sshd-down")
    refused = testbed.ssh("spark-b", "true", check=False)
    assert refused.returncode == 255 and "Connection refused" in refused.stderr
    testbed.fault("docker-down")
    info = testbed.exec("spark-b", "docker ps", user="nvidia", check=False)
    assert info.returncode != 0 and "Cannot connect" in info.stderr
    testbed.heal("sshd-down")
    assert testbed.ssh("spark-b", "hostname").stdout.strip() == "spark-b"
    testbed.heal()
    assert testbed.ssh("spark-b", "docker image inspect -f '{{.Id}}' " + IMAGE).returncode == 0


def test_peer_key_missing_breaks_node_to_node_ssh(testbed, paired):
    hop = "ssh -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null 198.18.0.12 hostname"
    assert testbed.exec("spark-a", hop, user="nvidia").stdout.strip() == "spark-b"
    before = testbed.exec("spark-b", "sha256sum ~/.ssh/authorized_keys", user="nvidia").stdout
    testbed.fault("peer-key-missing")
    denied = testbed.exec("spark-a", hop, user="nvidia", check=False)
    assert denied.returncode == 255 and "Permission denied" in denied.stderr
    testbed.heal()
    assert testbed.exec("spark-b", "sha256sum ~/.ssh/authorized_keys", user="nvidia").stdout == before
    assert testbed.exec("spark-a", hop, user="nvidia").stdout.strip() == "spark-b"


def image_id(bed, node) -> str:
    """ID of the engine image on NODE ('' when absent)."""
    return bed.exec(node, ["docker", "image", "inspect", "-f", "{{.Id}}", IMAGE], check=False).stdout.strip()


def test_image_missing_and_image_mismatch(testbed):
    original = image_id(testbed, "spark-a")
    testbed.fault("image-missing")
    assert image_id(testbed, "spark-b") == ""
    testbed.heal()
    assert image_id(testbed, "spark-b") == original
    testbed.fault("image-mismatch")
    assert image_id(testbed, "spark-b") not in ("", original)
    marker = testbed.exec("spark-b", f"docker run --rm {IMAGE} cat /etc/sparkpair-testbed-mismatch", check=False)
    assert marker.returncode == 0
    testbed.heal()
    assert image_id(testbed, "spark-b") == original


def test_model_missing_hf_cache_root_owned_and_disk_full(testbed):
    make = f"mkdir -p {MODEL_DIR}/snapshots/abc && echo weights > {MODEL_DIR}/snapshots/abc/model.safetensors"
    testbed.exec("spark-b", make, user="nvidia")
    read = f"cat {MODEL_DIR}/snapshots/abc/model.safetensors"
    testbed.fault("model-missing-on-worker")
    assert testbed.exec("spark-b", f"test -e {MODEL_DIR}", user="nvidia", check=False).returncode == 1
    testbed.heal()
    assert testbed.exec("spark-b", read, user="nvidia").stdout == "weights\n"
    testbed.fault("hf-cache-root-owned")
    owners = testbed.exec("spark-b", f"stat -c %U ~/.cache/huggingface {MODEL_DIR}", user="nvidia").stdout
    assert owners.split() == ["root", "root"]
    assert testbed.exec("spark-b", "touch ~/.cache/huggingface/x", user="nvidia", check=False).returncode != 0
    testbed.heal()
    assert testbed.exec("spark-b", f"stat -c %U {MODEL_DIR}/snapshots/abc/model.safetensors",
                        user="nvidia").stdout.strip() == "nvidia"
    before = testbed.exec("spark-b", "ls -A ~/.cache/huggingface", user="nvidia").stdout.split()
    testbed.fault("disk-full")
    full = testbed.exec("spark-b", "head -c 200000 /dev/zero > ~/.cache/huggingface/hub/blob",
                        user="nvidia", check=False)
    assert full.returncode != 0 and "No space left on device" in full.stderr
    assert testbed.exec("spark-b", read, user="nvidia").stdout == "weights\n"
    testbed.heal()
    testbed.exec("spark-b", "head -c 200000 /dev/zero > ~/.cache/huggingface/hub/blob && "
                            "rm ~/.cache/huggingface/hub/blob", user="nvidia")
    assert testbed.exec("spark-b", "ls -A ~/.cache/huggingface", user="nvidia").stdout.split() == before


def test_gpu_missing(testbed):
    testbed.fault("gpu-missing")
    gone = testbed.ssh("spark-b", "nvidia-smi", check=False)
    assert gone.returncode == 6 and "No devices were found" in gone.stdout
    run = testbed.ssh("spark-b", f"docker run --rm --gpus all {IMAGE} true", check=False)
    assert run.returncode != 0 and "nvidia-container-cli" in run.stderr
    testbed.heal()
    assert "NVIDIA GB10" in testbed.ssh("spark-b", "nvidia-smi -L").stdout


def test_up_is_idempotent_and_fast(testbed):
    testbed.cli("up")  # settles: rebuilds the image only if its sources changed meanwhile
    pids = testbed.exec("spark-a", "cat /run/sshd.pid /run/docker.pid").stdout
    began = time.monotonic()
    out = testbed.cli("up").stdout
    assert time.monotonic() - began < 30
    assert "already running" in out and "already present" in out
    assert testbed.exec("spark-a", "cat /run/sshd.pid /run/docker.pid").stdout == pids
    assert testbed.cli("status").returncode == 0


def leftovers() -> list:
    """Everything of the pair still present on this machine."""
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {n}" for n in ("spark-a", "spark-b", "spark-cable") if n in netns.split()]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [f"link {n}" for n in ("spk-mgmt", "mgmt-spark-a", "mgmt-spark-b") if f" {n}" in links]
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    found += [f"process {p}" for p in procs.splitlines() if "sparkpair-testbed" in p or "holder.py" in p]
    rules = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True).stdout
    found += [f"iptables {r}" for r in rules.splitlines() if "spk-mgmt" in r]
    mounts = open("/proc/mounts").read()
    found += [f"mount {m}" for m in mounts.splitlines() if "sparkpair" in m]
    for path in ("/var/lib/sparkpair-testbed", "/etc/sudoers.d/sparkpair-testbed", "/dev/infiniband"):
        if subprocess.run(["test", "-e", path]).returncode == 0:
            found.append(f"path {path}")
    return found


@pytest.mark.takes_the_pair_down
def test_down_leaves_nothing(testbed):
    testbed.cli("down")
    assert leftovers() == []
    assert testbed.cli("status", check=False).returncode == 1
    # Last of the session (the plugin's order): up again only for whoever had it up before the session; a session
    # that brought it up would take it down again at its end (an up and a down of about 30 s for nothing).
    if not testbed.brought_up:
        testbed.cli("up")
