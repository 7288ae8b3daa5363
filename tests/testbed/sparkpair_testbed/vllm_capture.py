"""Capture real logs of the real vLLM (CPU build) on the pair: a healthy TP=2 + Eagle3 start and
induced faults, head and worker each, for sparkpair's log fixtures (tests/fixtures/logs/vllm/,
whose README.md says how each was made). By hand, holding the pair, after `scripts/testbed vllm`:

    flock /tmp/simpair.lock .venv/bin/python -m sparkpair_testbed.vllm_capture OUT_DIR [SCENARIO...]

Writes OUT_DIR/SCENARIO.head.log and .worker.log (the `docker exec ... vllm serve` output, as
it came) for each scenario (all when none is named), the healthy run's /metrics, /v1/models and
a completion, and OUT_DIR/capture.json: per scenario the commands, environments, what was
waited for and the seconds it took. Faults are stopped soon after their error shows (two cores).
"""
from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import faults, vllm_serve, vllm_wheels
from .hostexec import node_run
from .layout import HEAD, NODES, STATE_DIR, USER, VLLM_TARGET_REPO, WORKER
from .vllm_serve import container_env, qsfp_ip, serve_argv

UNREACHABLE_MASTER = "198.19.1.99"   # in the twin's /24, no node has it
MISSING_INTERFACE = "enp9s9f9np9"
MISSING_DRAFT = "/root/.cache/huggingface/no-such-eagle3-draft"
READY_TIMEOUT = 900
RAY_PORT = 6379
WORK = STATE_DIR / "vllm-capture"  # the nodes see it (their /tmp is their own)
RAY_PLAYBOOK_ARGV = ["vllm", "serve", VLLM_TARGET_REPO, "--tensor-parallel-size", "2", "--distributed-executor-backend",
                     "ray", "--port", str(vllm_serve.API_PORT), "--speculative-config", vllm_serve.speculative_config()]


@dataclass(frozen=True)
class Scenario:
    """One vLLM start on the pair and what to wait for before stopping it."""

    name: str
    what: str
    head_argv: list
    worker_argv: list
    needles: tuple = ()            # stop once one shows in a log (after LINGER more seconds)
    timeout: float = 180           # ... or after this long, or once both processes ended
    linger: float = 15
    exec_env: dict = field(default_factory=dict)       # docker exec -e, both nodes
    shm_size: str | None = vllm_serve.SHM_SIZE
    ifname: str = vllm_serve.TWIN
    busy_port: bool = False        # the testbed's port-busy fault on the head's API port first
    # Once the healthy run's files are saved: the scenario name, the request and its needles of a
    # second capture from the same run (a request that kills the running engine).
    then: tuple = ()
    ray_cluster: bool = False      # Ray in both containers and a two-node Ray cluster before vllm serve


SCENARIOS = {s.name: s for s in (
    Scenario("healthy-tp2-eagle3", "TP=2 over both nodes with the Eagle3 draft; requests served",
             serve_argv(0), serve_argv(1),
             then=("fault-top-k-engine-dead",
                   {"model": VLLM_TARGET_REPO, "prompt": "Hello spark pair", "max_tokens": 16, "top_k": 20},
                   ("EngineDeadError",))),
    Scenario("fault-master-unreachable", f"the worker's --master-addr is {UNREACHABLE_MASTER} (no such host)",
             serve_argv(0), serve_argv(1, master_addr=UNREACHABLE_MASTER), timeout=150, linger=0),
    Scenario("fault-gloo-ifname-missing", f"GLOO_SOCKET_IFNAME={MISSING_INTERFACE} (no such interface) on both nodes",
             serve_argv(0), serve_argv(1), needles=("Unable to find address for",), ifname=MISSING_INTERFACE),
    Scenario("fault-draft-missing", f"the draft is {MISSING_DRAFT}, which does not exist, on both nodes",
             serve_argv(0, draft=MISSING_DRAFT), serve_argv(1, draft=MISSING_DRAFT), timeout=150),
    Scenario("fault-port-taken", f"a stray listener holds the head's port {vllm_serve.API_PORT} (testbed fault port-busy)",
             serve_argv(0), serve_argv(1), needles=("Address already in use",), timeout=300, linger=30,
             busy_port=True),
    Scenario("fault-kv-cache-too-small", "--max-model-len 1048576 (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1) with the image's "
             "VLLM_CPU_KVCACHE_SPACE=1 (GiB)", serve_argv(0, extra=("--max-model-len", "1048576")),
             serve_argv(1, extra=("--max-model-len", "1048576")), needles=("KV cache is needed",), timeout=500,
             exec_env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}),
    Scenario("fault-ray-backend-nnodes", "--distributed-executor-backend ray with the native multi-node flags, both nodes",
             serve_argv(0, backend="ray"), serve_argv(1, backend="ray"), timeout=150),
    Scenario("fault-ray-not-installed", "NVIDIA's playbook form on the head (`vllm serve TARGET --tensor-parallel-size 2 "
             "--distributed-executor-backend ray`, no --nnodes) in an image without Ray (NVIDIA's has none either: "
             "the playbook pip-installs it); no vllm on the worker in Ray mode", RAY_PLAYBOOK_ARGV, [], timeout=150),
    Scenario("fault-ray-backend", "the playbook's Ray mode: Ray installed in both containers (offline, as the playbook's "
             "pip install), `ray start --head` on the head and `ray start --address HEAD:6379` on the worker (the "
             "worker log is its output), then the playbook's vllm serve on the head: the CPU platform refuses Ray",
             RAY_PLAYBOOK_ARGV, [], needles=("does not support ray",), timeout=240, linger=5, ray_cluster=True),
    Scenario("fault-shm-too-small", "the containers without --shm-size (Docker's 64 MiB /dev/shm)",
             serve_argv(0), serve_argv(1), needles=("Insufficient space in /dev/shm",), timeout=300, linger=30,
             shm_size=None),
)}


def save_http(out: Path, prefix: str) -> dict:
    """The running server's /metrics, /v1/models and one completion, as files; returns statuses."""
    status = {}
    request = {"model": VLLM_TARGET_REPO, "prompt": "Hello spark pair", "max_tokens": 16}
    status["completion"], text = vllm_serve.http("POST", "/v1/completions", request)
    (out / f"{prefix}.completion.json").write_text(text)
    status["models"], text = vllm_serve.http("GET", "/v1/models")
    (out / f"{prefix}.models.json").write_text(text)
    status["metrics"], text = vllm_serve.http("GET", "/metrics")
    (out / f"{prefix}.metrics.txt").write_text(text)
    return status


def ray_cluster(work: Path, worker_log: Path) -> dict:
    """Ray into both running containers from wheels pip downloads here (the image has the rest of
    its requirements), `ray start --head` on the head, `ray start --address` on the worker (its
    output to WORKER_LOG); returns the commands."""
    wheels = work / "ray-wheels"
    if not wheels.is_dir():
        wheels.mkdir()
        vllm_wheels.pip_download(["--no-deps", "ray", "msgpack"], wheels)
    head_ip = qsfp_ip(HEAD)
    starts = {HEAD.name: ["ray", "start", "--head", f"--node-ip-address={head_ip}", f"--port={RAY_PORT}"],
              WORKER.name: ["ray", "start", f"--address={head_ip}:{RAY_PORT}", f"--node-ip-address={qsfp_ip(WORKER)}"]}
    for node in NODES:
        node_run(node, ["docker", "cp", str(wheels), f"{vllm_serve.CONTAINER}:/tmp/ray-wheels"], user=USER)
        node_run(node, ["docker", "exec", vllm_serve.CONTAINER, "pip", "install", "-q", "--no-index", "--find-links",
                        "/tmp/ray-wheels", "ray"], user=USER, timeout=300)
    node_run(HEAD, ["docker", "exec", vllm_serve.CONTAINER, *starts[HEAD.name]], user=USER, timeout=120)
    joined = node_run(WORKER, ["docker", "exec", vllm_serve.CONTAINER, *starts[WORKER.name]], user=USER, timeout=120,
                      check=False)
    worker_log.write_text(joined.stdout + joined.stderr)
    return starts


def run(scenario: Scenario, out: Path, work: Path) -> dict:
    """Run SCENARIO on the pair, keep its logs in OUT; returns what happened (for capture.json)."""
    record = {"what": scenario.what, "head": scenario.head_argv, "worker": scenario.worker_argv,
              "exec_env": scenario.exec_env, "shm_size": scenario.shm_size,
              "container_env": {node.name: container_env(node, scenario.ifname) for node in NODES},
              "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    if scenario.busy_port:
        faults.inject("port-busy", HEAD.name, port=vllm_serve.API_PORT)
    serving = None
    try:
        for node in NODES:
            vllm_serve.start_container(node, container_env(node, scenario.ifname), scenario.shm_size)
        if scenario.ray_cluster:
            record["ray"] = ray_cluster(work, out / f"{scenario.name}.worker.log")
        serving = vllm_serve.serve(work / scenario.name, scenario.head_argv, scenario.worker_argv,
                                   scenario.exec_env, scenario.exec_env)
        if scenario.name.startswith("healthy"):
            record["ready_s"] = round(vllm_serve.wait_ready(serving, READY_TIMEOUT), 1)
            record["http"] = save_http(out, scenario.name)
            keep_logs(serving, out, scenario.name)
            if scenario.then:
                name, request, needles = scenario.then
                record[name] = {"request": request, "status": vllm_serve.http("POST", "/v1/completions", request)[0],
                                "seen": vllm_serve.wait_for(serving, needles, 60)}
                time.sleep(scenario.linger)
                keep_logs(serving, out, name)
        else:
            record["seen"] = vllm_serve.wait_for(serving, scenario.needles, scenario.timeout)
            time.sleep(scenario.linger if record["seen"] else 0)
        record["alive_at_stop"] = {node.name: serving.alive(node) for node in NODES}
        record["seconds"] = round(time.monotonic() - serving.started, 1)
    finally:
        vllm_serve.stop(serving)
        if scenario.busy_port:
            faults.heal("port-busy")
    if not scenario.name.startswith("healthy") and serving is not None:
        keep_logs(serving, out, scenario.name)
    return record


def keep_logs(serving: vllm_serve.Serving, out: Path, name: str) -> None:
    """Copy both nodes' logs as they are now to OUT/NAME.head.log and NAME.worker.log."""
    for node, role in ((HEAD, "head"), (WORKER, "worker")):
        if node.name in serving.procs:
            shutil.copyfile(serving.logs[node.name], out / f"{name}.{role}.log")


def main(argv: list) -> int:
    """Capture the named scenarios (all when none) into argv[0]; 0 when every one ran."""
    if not argv or any(name not in SCENARIOS for name in argv[1:]):
        print(f"usage: vllm_capture OUT_DIR [{' | '.join(SCENARIOS)}]...", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    meta_path = out / "capture.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    vllm_serve.configure_links()
    vllm_serve.copy_models()
    try:
        shutil.rmtree(WORK, ignore_errors=True)
        WORK.mkdir(parents=True)
        for name in argv[1:] or list(SCENARIOS):
            print(f"vllm_capture: {name} ...", flush=True)
            meta[name] = run(SCENARIOS[name], out, WORK)
            meta_path.write_text(json.dumps(meta, indent=2) + "\n")
            print(f"vllm_capture: {name}: {json.dumps({k: meta[name].get(k) for k in ('seen', 'ready_s', 'seconds')})}",
                  flush=True)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
        vllm_serve.remove_models()
        vllm_serve.release_links()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
