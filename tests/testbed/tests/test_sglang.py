"""The stand-in SGLang (sparkpair/sglang-sim:0.5.23, `scripts/testbed sglang`) on the simulated pair: the
two traps users report, each on its own short start (one container per node, `docker exec ... python3 -m
sglang.launch_server --nnodes 2 --node-rank R --dist-init-addr HEAD_QSFP:PORT`): the MessageQueue advertised
on an address the peer cannot reach, and a leftover /etc/nccl.conf. The healthy TP=2 + Eagle3 start and the
rest of the stand-in's proofs run on sparkpair's own launch (tests/integration/test_launch_sglang.py).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sparkpair_testbed import sglang_pair, vllm_serve
from sparkpair_testbed.hostexec import node_prefix, node_run
from sparkpair_testbed.layout import HEAD, NODES, USER, WORKER, Node
from sparkpair_testbed.sglang_image import SGLANG_IMAGE_TAG
from sparkpair_testbed.vllm_models import hub_dir

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
TWIN = vllm_serve.TWIN
START_TIMEOUT = 300
# A healthy start prints the next line within one retry of the stand-in's store or message-queue connect
# (sglang_world.RETRY_SECONDS, 1 s) of the last one; ten of those without it is a hang, not a slow machine
HANG_WATCH_SECONDS = 10
REPOS = (sglang_pair.TARGET_REPO, sglang_pair.DRAFT_REPO)
SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", sglang_pair.DRAFT_REPO,
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
LEFTOVER_NCCL_CONF = "NCCL_IB_USE_INLINE=1\nNCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS=1\n"


@dataclass
class Start:
    """One multi-node start: a container per node, a `docker exec` client per node writing a log."""

    name: str
    port: int
    dist_port: int
    logs: dict = field(default_factory=dict)
    procs: dict = field(default_factory=dict)
    began: float = field(default_factory=time.monotonic)

    def text(self, node: Node) -> str:
        return self.logs[node.name].read_text(errors="replace") if node.name in self.logs else ""

    def alive(self, node: Node) -> bool:
        return self.procs[node.name].poll() is None


def argv(start: Start, rank: int) -> list:
    """`python3 -m sglang.launch_server` for node rank RANK of the TP=2 + Eagle3 job."""
    head = vllm_serve.qsfp_ip(HEAD)
    return ["python3", "-m", "sglang.launch_server", "--model-path", sglang_pair.TARGET_REPO, "--tp", "2",
            "--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr", f"{head}:{start.dist_port}",
            "--host", "0.0.0.0", "--port", str(start.port), "--enable-metrics", *SPEC]


def launch(start: Start, log_dir: Path, env: dict, extra_run=()) -> Start:
    """A container per node (host network, GPUs, nvidia's HF cache, ENV[node]) and the launch in each."""
    log_dir.mkdir(parents=True, exist_ok=True)
    for rank, node in enumerate(NODES[:2]):
        node_run(node, ["docker", "rm", "-f", start.name], user=USER, check=False, timeout=60)
        run = ["docker", "run", "-d", "--name", start.name, "--network", "host", "--gpus", "all", "--shm-size", "10g",
               "-v", f"/home/{USER}/.cache/huggingface:/root/.cache/huggingface", *extra_run]
        for key, value in env[node.name].items():
            run += ["-e", f"{key}={value}"]
        node_run(node, [*run, SGLANG_IMAGE_TAG, "sleep", "infinity"], user=USER, timeout=120)
        start.logs[node.name] = log_dir / f"{start.name}-{node.name}.log"
        with open(start.logs[node.name], "wb") as out:
            start.procs[node.name] = subprocess.Popen(
                node_prefix(node, USER) + ["docker", "exec", start.name, *argv(start, rank)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    return start


def stop(start: Start) -> None:
    """Remove both containers (the servers die with them) and reap the exec clients."""
    for node in NODES[:2]:
        node_run(node, ["docker", "rm", "-f", start.name], user=USER, check=False, timeout=120)
    for proc in start.procs.values():
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def node_env(node: Node, **extra) -> dict:
    """What a runtime gives each node's container: the QSFP interface for NCCL and gloo, offline hub."""
    return {"GLOO_SOCKET_IFNAME": TWIN, "NCCL_SOCKET_IFNAME": TWIN, "HF_HUB_OFFLINE": "1", "SIM_LOAD_SECONDS": "1",
            **extra}


def http(start: Start, method: str, path: str, body=None, timeout=60) -> tuple:
    """(status, text) of a request to START's head (0 and the error when nothing answers)."""
    url = f"http://{HEAD.mgmt_ip}:{start.port}{path}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read(4 << 20).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(4 << 20).decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)


def copy_models(present: bool) -> None:
    """The two repos copied from the head's HF cache to the worker's (or taken away again)."""
    for repo in REPOS:
        folder = "models--" + repo.replace("/", "--")
        there = hub_dir(WORKER) / folder
        shutil.rmtree(there, ignore_errors=True)
        if present:
            shutil.copytree(hub_dir(HEAD) / folder, there, symlinks=True)
            subprocess.run(["chown", "-R", "--reference", str(hub_dir(HEAD) / folder), str(there)], check=True)


@pytest.fixture(scope="module")
def serving(testbed):
    """The pair ready for the traps' own starts: the image, the links, the models on both nodes. The healthy
    TP=2 + Eagle3 start, the misspelt option, the metrics and the derived definitions are proven on sparkpair's
    own launch of this stand-in (tests/integration/test_launch_sglang.py), so the suite starts it once."""
    testbed.cli("sglang", timeout=1800)
    vllm_serve.configure_links()
    copy_models(True)
    try:
        yield
    finally:
        copy_models(False)
        vllm_serve.release_links()


def watch_hang(start: Start, last: str, never: str) -> None:
    """Both ranks print LAST, stay alive and silent, and neither prints NEVER within HANG_WATCH_SECONDS."""
    deadline = time.monotonic() + START_TIMEOUT
    while not all(last in start.text(node) for node in NODES[:2]):
        assert time.monotonic() < deadline, f"{last!r} not reached:\n{start.text(HEAD)[-2000:]}"
        time.sleep(1)
    time.sleep(HANG_WATCH_SECONDS)
    for node in NODES[:2]:
        assert start.alive(node) and never not in start.text(node), start.text(node)[-2000:]
    assert http(start, "GET", "/health", timeout=3)[0] == 0


def test_message_queue_on_an_unreachable_address_hangs_after_nccl(serving, tmp_path):
    """No SGLANG_HOST_IP: the head advertises its management (LAN) address, which this LAN keeps the
    worker from reaching (client isolation, as on the Wi-Fi of MiaAI-Lab/Qwen3.8-Flash-Next-Dual-DGX-Sparks#3)."""
    block = ["OUTPUT", "-d", HEAD.mgmt_ip, "-p", "tcp", "!", "--dport", "22", "-j", "DROP"]
    node_run(WORKER, ["iptables", "-I", *block])
    start = Start("sparkpair-testbed-sglang-hostip", 30001, 25001)
    try:
        launch(start, tmp_path, {node.name: node_env(node) for node in NODES[:2]})
        watch_hang(start, "CustomAllreduce is disabled because this process group spans across nodes.",
                   "Init torch distributed ends")
    finally:
        stop(start)
        node_run(WORKER, ["iptables", "-D", *block], check=False)


def test_leftover_nccl_conf_freezes_the_pynccl_warm_up(serving, tmp_path):
    """luxingcom/aicad-nccl-optimization#1: an image's /etc/nccl.conf with IB inline sends and preposted receives."""
    for node in NODES[:2]:  # where each node's dockerd finds it (a node's /tmp is its own)
        (node.dir / "home" / "nccl.conf").write_text(LEFTOVER_NCCL_CONF)
    start = Start("sparkpair-testbed-sglang-ncclconf", 30002, 25002)
    env = {node.name: node_env(node, SGLANG_HOST_IP=vllm_serve.qsfp_ip(node)) for node in NODES[:2]}
    try:
        launch(start, tmp_path, env, ("--device", "/dev/infiniband:/dev/infiniband",
                                      "-v", f"/home/{USER}/nccl.conf:/etc/nccl.conf:ro"))
        watch_hang(start, "sglang is using nccl==", "CustomAllreduce is disabled")
    finally:
        stop(start)
        for node in NODES[:2]:
            (node.dir / "home" / "nccl.conf").unlink(missing_ok=True)
