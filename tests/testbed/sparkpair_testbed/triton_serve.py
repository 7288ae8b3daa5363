"""Running the real Triton Inference Server across the pair by hand, in seed 003's shape at TP=2: on the
head, `tritonserver --model-repository R --model-control-mode explicit --load-model M` as the container's
command (as NVIDIA's tutorial runs nvcr.io/nvidia/tritonserver:<yy.mm>-vllm-python-py3), the model's
model.json holding vLLM's engine arguments for rank 0 of vLLM's native multi-node start (nnodes 2,
node_rank 0, master_addr/master_port on the cabled QSFP twin); on the worker, the same image's
`vllm serve --headless --node-rank 1`, started as vllm_serve.py starts it. For the testbed's own test
(tests/test_triton.py); sparkpair's runtime does the same with its own code.

Needs `scripts/testbed triton` first (the image in both engines, the models on the head).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from . import vllm_serve
from .hostexec import CommandError, node_run
from .layout import HEAD, STATE_DIR, USER, VLLM_DRAFT_REPO, VLLM_TARGET_REPO, WORKER
from .triton_image import TRITON_IMAGE_TAG

CONTAINER = "sparkpair-testbed-triton"
MODEL = "eagle_model"                       # seed 003's model name
HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002   # Triton's defaults
REPOSITORY = STATE_DIR / "triton-repository"          # on this machine; the nodes see the same path
HTTP_CAP = 4 << 20
CONFIG_PBTXT = """backend: "vllm"
instance_group [
  {
    count: 1
    kind: KIND_MODEL
  }
]
parameters: {
  key: "REPORT_CUSTOM_METRICS"
  value: {
    string_value: "true"
  }
}
"""


# Eager mode (no torch.compile: about 80 s less of a start on two cores), as the vLLM backend's own sample
# model.json has it; the worker gets the same flag (WORKER_EXTRA).
WORKER_EXTRA = ("--enforce-eager",)


def engine_args(rank: int = 0) -> dict:
    """model.json: the same engine arguments as vllm_serve.serve_argv(RANK, extra=WORKER_EXTRA), in vLLM's own
    (Python) names."""
    return {"model": VLLM_TARGET_REPO, "tensor_parallel_size": 2, "distributed_executor_backend": "mp",
            "nnodes": 2, "node_rank": rank, "master_addr": vllm_serve.qsfp_ip(HEAD),
            "master_port": vllm_serve.MASTER_PORT, "enforce_eager": True, "disable_log_stats": False,
            "speculative_config": json.loads(vllm_serve.speculative_config(VLLM_DRAFT_REPO))}


def write_repository(args: dict, root: Path = REPOSITORY, model: str = MODEL) -> Path:
    """A model repository with one model: MODEL/config.pbtxt (the vllm backend) and MODEL/1/model.json."""
    shutil.rmtree(root, ignore_errors=True)
    (root / model / "1").mkdir(parents=True)
    (root / model / "config.pbtxt").write_text(CONFIG_PBTXT)
    (root / model / "1" / "model.json").write_text(json.dumps(args, indent=2) + "\n")
    for path in (root, root / model, root / model / "1"):
        path.chmod(0o755)
    return root


def server_argv(model: str = MODEL) -> list:
    """The tritonserver command line of seed 003 (explicit model control, one model loaded)."""
    return ["tritonserver", "--model-repository", "/models", "--model-control-mode", "explicit",
            "--load-model", model, "--http-port", str(HTTP_PORT), "--grpc-port", str(GRPC_PORT),
            "--metrics-port", str(METRICS_PORT)]


def head_run_argv(argv: list, root: Path = REPOSITORY) -> list:
    """`docker run -d` of Triton on the head: host network, GPUs, nvidia's HF cache, the repository at /models."""
    env = vllm_serve.container_env(HEAD)
    flags = [item for key, value in env.items() for item in ("-e", f"{key}={value}")]
    return ["docker", "run", "-d", "--name", CONTAINER, "--network", "host", "--gpus", "all",
            "--shm-size", vllm_serve.SHM_SIZE, "-v", f"/home/{USER}/.cache/huggingface:/root/.cache/huggingface",
            "-v", f"{root}:/models:ro", *flags, TRITON_IMAGE_TAG, *argv]


def start_worker(log: Path) -> vllm_serve.Serving:
    """The worker's container of the Triton image and its `vllm serve --headless` (rank 1)."""
    vllm_serve.start_container(WORKER, vllm_serve.container_env(WORKER), image=TRITON_IMAGE_TAG)
    serving = vllm_serve.Serving(logs={WORKER.name: log})
    serving.procs[WORKER.name] = vllm_serve.spawn(WORKER, vllm_serve.serve_argv(1, extra=WORKER_EXTRA), log)
    return serving


def start_head(argv: list | None = None, root: Path = REPOSITORY) -> float:
    """Triton on the head as its container's command; returns when it started (time.monotonic())."""
    remove_head()
    node_run(HEAD, head_run_argv(argv or server_argv(), root), user=USER, timeout=120)
    return time.monotonic()


def head_log() -> str:
    """What Triton (on stderr) and the vLLM engine inside it (on stdout) printed so far, in the order printed."""
    proc = node_run(HEAD, ["sh", "-c", f"docker logs {CONTAINER} 2>&1"], user=USER, check=False, timeout=60)
    return proc.stdout


def head_running() -> bool:
    """Whether the head's Triton container still runs."""
    proc = node_run(HEAD, ["docker", "inspect", "--format", "{{.State.Running}}", CONTAINER], user=USER, check=False)
    return proc.stdout.strip() == "true"


def remove_head() -> None:
    node_run(HEAD, ["docker", "rm", "-f", CONTAINER], user=USER, check=False, timeout=120)


def stop(worker: vllm_serve.Serving | None = None) -> None:
    """Remove the head's Triton container and the worker's container (what runs in them dies with them)."""
    remove_head()
    vllm_serve.remove_container(WORKER)
    for proc in (worker.procs.values() if worker else ()):
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def http(method: str, path: str, body: dict | None = None, port: int = HTTP_PORT, timeout: float = 120) -> tuple:
    """(status, text) of a request to the head's Triton (0 and the error when it does not answer)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://{HEAD.mgmt_ip}:{port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read(HTTP_CAP).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(HTTP_CAP).decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)


def events(text: str) -> list:
    """The JSON objects of a server-sent event stream (generate_stream's `data: {...}` lines)."""
    return [json.loads(line[len("data:"):]) for line in text.splitlines() if line.startswith("data:")]


def wait_ready(started: float, timeout: float, model: str = MODEL) -> float:
    """Seconds from STARTED until /v2/health/ready and the model's /ready answer 200; CommandError when the
    head's container ends first or TIMEOUT passes."""
    while time.monotonic() < started + timeout:
        if http("GET", "/v2/health/ready", timeout=3)[0] == 200 and http("GET", f"/v2/models/{model}/ready",
                                                                             timeout=3)[0] == 200:
            return time.monotonic() - started
        if not head_running():
            raise CommandError(f"Triton on the head ended before the model was ready:\n{head_log()[-4000:]}")
        time.sleep(2)
    raise CommandError(f"Triton's model was not ready within {timeout}s:\n{head_log()[-4000:]}")
