"""The running engine: start and stop its processes, read its logs, report its status.

The serve command runs detached in the head container under a small shell that records its pid
and, when mpirun ends, its exit code; rank output stays in log files inside the container.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from sparkpair import containers, recipe
from sparkpair.errors import SparkpairError
from sparkpair.inventory import Inventory
from sparkpair.probes import prometheus
from sparkpair.readiness import listed_models
from sparkpair.transport import NodeConnection, Pair, Shell

LOG = recipe.LOG_DIR
SERVE_LOG = f"{LOG}/serve.log"
STATE_FILE = f"{recipe.NODE_STATE_DIR}/state/launch.json"


def serve_wrapper(argv: list[str]) -> list[str]:
    """sh -c that runs argv with output to serve.log, recording its pid and finally its exit code."""
    script = (f"mkdir -p {LOG} && rm -f {LOG}/exit_code && echo $$ > {LOG}/serve.pid && "
              f"{shlex.join(argv)} > {SERVE_LOG} 2>&1; echo $? > {LOG}/exit_code")
    return ["sh", "-c", script]


def start_engine(head: NodeConnection, inventory: Inventory, argv: list[str]) -> None:
    containers.exec_in(head, inventory.container.name, serve_wrapper(argv), detach=True)


def exit_code(head: NodeConnection, inventory: Inventory) -> int | None:
    """The serve command's exit code once it has ended, else None."""
    code, output = containers.exec_in(head, inventory.container.name,
                                      ["sh", "-c", f"cat {LOG}/exit_code 2>/dev/null || true"])
    return int(output.strip()) if output.strip().lstrip("-").isdigit() else None


def engine_running(head: NodeConnection, inventory: Inventory) -> bool:
    """Whether the serve command started by sparkpair is still alive in the head container."""
    container = containers.find(head, inventory.container.name)
    if container is None or container.status != "running":
        return False
    code, _ = containers.exec_in(head, inventory.container.name,
                                 ["sh", "-c", f"test ! -e {LOG}/exit_code && kill -0 $(cat {LOG}/serve.pid)"],
                                 container=container)
    return code == 0


def stop_engine(pair: Pair, inventory: Inventory, nodes: list[str], grace_s: float = 20.0) -> None:
    """End the serve command (SIGTERM to mpirun, which takes the ranks down) and wait for it."""
    head = pair.nodes[nodes[0]]
    if not engine_running(head, inventory):
        return
    containers.exec_in(head, inventory.container.name,
                       ["sh", "-c", "pkill -TERM -x mpirun || pkill -TERM -f '[t]rtllm-serve'; true"])
    deadline = time.monotonic() + grace_s
    while engine_running(head, inventory) and time.monotonic() < deadline:
        time.sleep(0.3)
    for name in nodes:
        container = containers.find(pair.nodes[name], inventory.container.name)
        if container is not None and container.status == "running":
            containers.exec_in(pair.nodes[name], inventory.container.name,
                               ["sh", "-c", "pkill -KILL -f '[t]rtllm-|[m]pirun|[o]rted'; true"], container=container)


def rank_logs(head: NodeConnection, inventory: Inventory, rank: int | None, tail: int) -> str:
    """The last lines of one rank's output (stdout and stderr), or of the whole serve log."""
    paths = f"{SERVE_LOG}" if rank is None else \
        f"{LOG}/ranks/1/rank.{rank}/stdout {LOG}/ranks/1/rank.{rank}/stderr"
    _, output = containers.exec_in(head, inventory.container.name,
                                   ["sh", "-c", f"tail -q -n {int(tail)} {paths} 2>/dev/null || true"])
    return output


def write_state(head: NodeConnection, state: dict[str, Any]) -> None:
    head.check(Shell("mkdir -p {}", f"{head.home}/{recipe.NODE_STATE_DIR}/state"))
    head.put(json.dumps(state, indent=1), f"{head.home}/{STATE_FILE}", mode=0o600)


def read_state(head: NodeConnection) -> dict[str, Any] | None:
    raw = head.read(f"{head.home}/{STATE_FILE}")
    return json.loads(raw) if raw else None


@dataclass
class Status:
    """What `sparkpair status` reports."""

    state: str = "stopped"
    profile: str = ""
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    health: str = "down"
    model: str = ""
    uptime_s: float | None = None
    requests: float | None = None
    acceptance_rate: float | None = None
    endpoint: str = ""
    reason: str = ""


def _ranks_alive(connection: NodeConnection, inventory: Inventory, container: Any) -> int:
    """Serve processes in the node's engine container (0 when it is not running)."""
    if container is None or container.status != "running":
        return 0
    _, output = containers.exec_in(connection, inventory.container.name,
                                   ["sh", "-c", "pgrep -f '[t]rtllm-serve|[t]rtllm-llmapi-launch' | wc -l"],
                                   container=container)
    return int(output.strip() or 0)


def status(pair: Pair, inventory: Inventory) -> Status:
    """Containers, ranks, health, served model, uptime, requests and acceptance of the running engine."""
    head = pair.head
    state = read_state(head) or {}
    names = state.get("nodes") or [node.name for node in inventory.nodes]
    result = Status(profile=state.get("profile", ""), endpoint=state.get("endpoint", ""))
    for name in names:
        container = containers.find(pair.nodes[name], inventory.container.name)
        result.nodes[name] = {"container": container.status if container else "absent",
                              "ranks_alive": _ranks_alive(pair.nodes[name], inventory, container)}
    port = inventory.server.port
    health = pair.nodes[names[0]].http(port, "GET", "/health", timeout=5)
    result.health = "ok" if health and health[0] == 200 else ("down" if health is None else f"http {health[0]}")
    models = pair.nodes[names[0]].http(port, "GET", "/v1/models", timeout=5) if health else None
    if models and models[0] == 200:
        result.model = ",".join(listed_models(models[1]))
    metrics = pair.nodes[names[0]].http(port, "GET", "/prometheus/metrics", timeout=5) if health else None
    if metrics and metrics[0] == 200:
        counters = prometheus.parse(metrics[1].decode("utf-8", "replace"))
        result.requests = counters.get("trtllm_request_success_total")
        drafted = counters.get("trtllm_spec_decode_num_draft_tokens_total")
        accepted = counters.get("trtllm_spec_decode_num_accepted_tokens_total")
        result.acceptance_rate = accepted / drafted if drafted and accepted is not None else None
    result.state = _overall(result, names)
    if result.state != "stopped" and state.get("started") and not state.get("stopped"):
        result.uptime_s = round(time.time() - float(state["started"]), 1)
    if result.state == "degraded":
        result.reason = _why_degraded(pair.nodes[names[0]], inventory, result, names)
    return result


def _why_degraded(head: NodeConnection, inventory: Inventory, result: Status, names: list[str]) -> str:
    down = [n for n in names if result.nodes[n]["container"] != "running"]
    if down:
        return f"engine container not running on {', '.join(down)}"
    code = exit_code(head, inventory)
    dead = [n for n in names if not result.nodes[n]["ranks_alive"]]
    parts = [f"rank gone on {', '.join(dead)}"] if dead else []
    parts += [f"serve command exited with code {code}"] if code is not None else []
    parts += [f"health {result.health}"] if result.health != "ok" else []
    return "; ".join(parts) + " (sparkpair logs; sparkpair launch restarts it)"


def _overall(result: Status, names: list[str]) -> str:
    containers_up = [result.nodes[n]["container"] == "running" for n in names]
    ranks_up = [result.nodes[n]["ranks_alive"] > 0 for n in names]
    if not any(containers_up):
        return "stopped"
    if all(containers_up) and all(ranks_up) and result.health == "ok":
        return "serving"
    return "degraded"


def stop(pair: Pair, inventory: Inventory) -> dict[str, str]:
    """Remove the engine container on both nodes (idempotent); models stay in the caches."""
    def remove(connection: NodeConnection) -> str:
        return containers.remove(connection, inventory.container.name)
    results = pair.each(remove)
    for name, result in results.items():
        if isinstance(result, BaseException):
            raise result if isinstance(result, SparkpairError) else SparkpairError(str(result), node=name)
    state = read_state(pair.head)
    if state is not None:
        write_state(pair.head, {**state, "stopped": time.time()})
    return results  # type: ignore[return-value]


def print_logs(pair: Pair, inventory: Inventory, node: str | None, tail: int, follow: bool) -> int:
    """Print each rank's last lines (or follow them); ranks are numbered in the launch's node order."""
    from sparkpair import report

    state = read_state(pair.head) or {}
    names = state.get("nodes") or [n.name for n in inventory.nodes]
    head = pair.nodes[names[0]]
    if node is not None and node not in names:
        raise SparkpairError(f"--node {node}: the launch runs on {', '.join(names)}")
    chosen = [node] if node else names
    if containers.find(head, inventory.container.name) is None:
        raise SparkpairError("no engine container on the head: nothing is running", node=head.name,
                             hint="sparkpair launch")
    files = [SERVE_LOG] if len(names) == 1 else \
        [f"{LOG}/ranks/1/rank.{names.index(n)}/{stream}" for n in chosen for stream in ("stdout", "stderr")]
    if follow:
        argv = ["sh", "-c", f"tail -F -n {int(tail)} " + " ".join(files) + " 2>/dev/null"]
        try:
            containers.stream_in(head, inventory.container.name, argv, report.line)
        except KeyboardInterrupt:
            pass
        return 0
    for name in chosen:
        rank = None if len(names) == 1 else names.index(name)
        report.line(f"==> {name} (rank {rank if rank is not None else 0}) <==")
        for text in rank_logs(head, inventory, rank, tail).splitlines():
            report.line(text)
    return 0
