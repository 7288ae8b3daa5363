"""Running the real vLLM across the pair by hand, the way NVIDIA's vLLM container is run: one
long-lived container per node (`docker run -d --network host --gpus all ... sleep infinity`),
then `docker exec CONTAINER vllm serve ...` on each, the head with `--node-rank 0` (API server),
the worker with `--node-rank 1 --headless`, both over the cabled QSFP twin (GLOO_SOCKET_IFNAME,
VLLM_HOST_IP). For the testbed's own test (tests/test_vllm.py) and the log capture
(vllm_capture.py); sparkpair's runtime does the same with its own code.

Needs `scripts/testbed vllm` first (the image in both engines, the models on the head).
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

from .hostexec import CommandError, node_prefix, node_run
from .layout import HEAD, NODES, USER, VLLM_DRAFT_REPO, VLLM_IMAGE_TAG, VLLM_TARGET_REPO, WORKER, Node
from .reset import ResetSpec, reset
from .vllm_models import hub_dir

TWIN = "enp1s0f1np1"
CONTAINER = "sparkpair-testbed-vllm"
MASTER_PORT = 29501
API_PORT = 8355
SHM_SIZE = "10.24g"  # what vLLM's run_cluster.sh (NVIDIA's playbook) gives the container
API_URL = f"http://{HEAD.mgmt_ip}:{API_PORT}"
REPO_FOLDERS = tuple("models--" + repo.replace("/", "--") for repo in (VLLM_TARGET_REPO, VLLM_DRAFT_REPO))
HTTP_CAP = 4 << 20  # bytes read from any answer


def qsfp_ip(node: Node) -> str:
    """NODE's address on the cabled twin (198.19.1.x)."""
    return node.links[TWIN].split("/")[0]


def speculative_config(draft: str = VLLM_DRAFT_REPO) -> str:
    """The --speculative-config JSON for an Eagle3 draft proposing 3 tokens."""
    return json.dumps({"method": "eagle3", "model": draft, "num_speculative_tokens": 3})


def serve_argv(rank: int, master_addr: str | None = None, draft: str = VLLM_DRAFT_REPO, extra=(),
               backend: str = "mp") -> list:
    """`vllm serve TARGET` for node rank RANK of a TP=2 job over two nodes (native multi-node: mp)."""
    argv = ["vllm", "serve", VLLM_TARGET_REPO, "--tensor-parallel-size", "2", "--distributed-executor-backend", backend,
            "--nnodes", "2", "--node-rank", str(rank), "--master-addr", master_addr or qsfp_ip(HEAD),
            "--master-port", str(MASTER_PORT)]
    argv += ["--port", str(API_PORT)] if rank == 0 else ["--headless"]
    return argv + ["--speculative-config", speculative_config(draft), *extra]


def container_env(node: Node, ifname: str = TWIN) -> dict:
    """The environment each node's container gets: its QSFP address and interface, offline hub."""
    return {"VLLM_HOST_IP": qsfp_ip(node), "GLOO_SOCKET_IFNAME": ifname, "HF_HUB_OFFLINE": "1"}


def run_argv(env: dict, shm_size: str | None = SHM_SIZE, image: str = VLLM_IMAGE_TAG) -> list:
    """`docker run -d` of the long-lived vLLM container (host network, GPUs, nvidia's HF cache) of IMAGE."""
    argv = ["docker", "run", "-d", "--name", CONTAINER, "--network", "host", "--gpus", "all"]
    argv += ["--shm-size", shm_size] if shm_size else []
    argv += ["-v", f"/home/{USER}/.cache/huggingface:/root/.cache/huggingface"]
    for key, value in env.items():
        argv += ["-e", f"{key}={value}"]
    return argv + [image, "sleep", "infinity"]


def configure_links() -> None:
    """The cabled twin up on both nodes, MTU 9000, with the 198.19.1.x addresses of layout.py."""
    for node in NODES:
        node_run(node, ["sh", "-c", f"ip link set {TWIN} mtu 9000 up && ip addr replace {node.links[TWIN]} dev {TWIN}"])


def release_links() -> None:
    """The cabled twin as `up` left it on both nodes (the testbed's reset of an interface)."""
    reset(ResetSpec(interfaces=(TWIN,)), NODES)


def copy_models(source: Node = HEAD, target: Node = WORKER) -> None:
    """Copy both repos from SOURCE's HF cache to TARGET's, as they are (symlinks, owners)."""
    for folder in REPO_FOLDERS:
        there = hub_dir(target) / folder
        shutil.rmtree(there, ignore_errors=True)
        shutil.copytree(hub_dir(source) / folder, there, symlinks=True)
        shutil.copystat(hub_dir(source) / folder, there)
        subprocess.run(["chown", "-R", "--reference", str(hub_dir(source) / folder), str(there)], check=True)


def remove_models(node: Node = WORKER) -> None:
    """Take the copied repos away from NODE's HF cache again."""
    for folder in REPO_FOLDERS:
        shutil.rmtree(hub_dir(node) / folder, ignore_errors=True)


def start_container(node: Node, env: dict, shm_size: str | None = SHM_SIZE, image: str = VLLM_IMAGE_TAG) -> None:
    """A fresh vLLM container of IMAGE on NODE (an old one of the same name removed first)."""
    remove_container(node)
    node_run(node, run_argv(env, shm_size, image), user=USER, timeout=120)


def remove_container(node: Node) -> None:
    """`docker rm -f` of the vLLM container on NODE (what it runs dies with it)."""
    node_run(node, ["docker", "rm", "-f", CONTAINER], user=USER, check=False, timeout=120)


@dataclass
class Serving:
    """One `docker exec ... vllm serve` per node, their output going to a log file each."""

    logs: dict                                   # node name -> log path
    procs: dict = field(default_factory=dict)    # node name -> the docker exec client process
    started: float = field(default_factory=time.monotonic)

    def alive(self, node: Node) -> bool:
        """True while NODE's vllm serve (its docker exec) runs (False for a node that runs none)."""
        return node.name in self.procs and self.procs[node.name].poll() is None

    def text(self, node: Node) -> str:
        """What NODE's vllm serve printed so far ('' for a node that runs none)."""
        return self.logs[node.name].read_text(errors="replace") if node.name in self.procs else ""


def spawn(node: Node, argv: list, log: Path, env: dict | None = None) -> subprocess.Popen:
    """`docker exec [-e K=V] CONTAINER ARGV` on NODE as nvidia, its output into LOG."""
    flags = [item for key, value in (env or {}).items() for item in ("-e", f"{key}={value}")]
    with open(log, "wb") as out:
        return subprocess.Popen(node_prefix(node, USER) + ["docker", "exec", *flags, CONTAINER, *argv],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)


def serve(log_dir: Path, head_argv: list, worker_argv: list, head_env=None, worker_env=None) -> Serving:
    """Start the head's and (unless WORKER_ARGV is empty) the worker's vllm serve in their
    (running) containers."""
    log_dir.mkdir(parents=True, exist_ok=True)
    serving = Serving(logs={HEAD.name: log_dir / "head.log", WORKER.name: log_dir / "worker.log"})
    serving.procs[HEAD.name] = spawn(HEAD, head_argv, serving.logs[HEAD.name], head_env)
    if worker_argv:
        serving.procs[WORKER.name] = spawn(WORKER, worker_argv, serving.logs[WORKER.name], worker_env)
    return serving


def stop(serving: Serving | None = None) -> None:
    """Remove both containers (their vllm processes die with them) and reap the exec clients."""
    for node in NODES:
        remove_container(node)
    for proc in (serving.procs.values() if serving else ()):
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def http(method: str, path: str, body: dict | None = None, timeout: float = 120) -> tuple:
    """(status, text) of a request to the head's API (0 and the error when it does not answer)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(API_URL + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read(HTTP_CAP).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(HTTP_CAP).decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)


def wait_ready(serving: Serving, timeout: float) -> float:
    """Seconds from the start until GET /v1/models answers 200; CommandError when the head's
    vllm serve ends first or TIMEOUT passes."""
    deadline = serving.started + timeout
    while time.monotonic() < deadline:
        if http("GET", "/v1/models", timeout=3)[0] == 200:
            return time.monotonic() - serving.started
        if not serving.alive(HEAD):
            raise CommandError(f"the head's vllm serve ended before answering:\n{serving.text(HEAD)[-3000:]}")
        time.sleep(2)
    raise CommandError(f"vllm serve did not answer within {timeout}s:\n{serving.text(HEAD)[-3000:]}")


def wait_for(serving: Serving, needles: tuple, timeout: float) -> str:
    """The first of NEEDLES either node's log shows (or '' once both processes ended or TIMEOUT
    passed), polled every second."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for node in NODES:
            text = serving.text(node)
            for needle in needles:
                if needle in text:
                    return needle
        if not any(serving.alive(node) for node in NODES):
            return ""
        time.sleep(1)
    return ""


def rss_mib(node: Node) -> float:
    """Resident memory of NODE's vLLM processes (API server, engine core, rank workers), in MiB."""
    out = node_run(node, ["ps", "-eo", "rss=,args="]).stdout
    return sum(int(line.split(None, 1)[0]) for line in out.splitlines()
               if len(line.split(None, 1)) == 2 and ("vllm serve" in line or "VLLM::" in line)
               and "docker exec" not in line) / 1024
