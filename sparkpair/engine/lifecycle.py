"""The running engine: start and stop its processes, read its logs, report its status.

The serve command runs detached in the head container under a small shell that records its pid
and, when mpirun ends, its exit code; rank output stays in log files inside the container.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparkpair import paths
from sparkpair.engine import containers
from sparkpair.engine.readiness import listed_models
from sparkpair.engine.state import LaunchState, read_state, write_state
from sparkpair.errors import SparkpairError, last_line
from sparkpair.inventory import Inventory
from sparkpair.probes import ProbeFailure, docker, gather, prometheus, ranks
from sparkpair.render import recipe
from sparkpair.transport import NodeConnection, Pair, Shell
from sparkpair.transport import docker as docker_cli

LOG = recipe.LOG_DIR
SERVE_LOG = f"{LOG}/serve.log"


def serve_wrapper(argv: list[str]) -> list[str]:
    """sh -c that runs argv with output to serve.log, recording its pid and finally its exit code."""
    script = (f"mkdir -p {LOG} && rm -f {LOG}/exit_code && echo $$ > {LOG}/serve.pid && "
              f"{shlex.join(argv)} > {SERVE_LOG} 2>&1; echo $? > {LOG}/exit_code")
    return ["sh", "-c", script]


def start_engine(head: NodeConnection, inventory: Inventory, argv: list[str]) -> None:
    docker_cli.exec_detached(head, inventory.container.name, serve_wrapper(argv))


def _in_engine(connection: NodeConnection, inventory: Inventory, script: str) -> tuple[int, str]:
    """A shell script in the node's engine container: (exit code, output); the container must run."""
    return docker_cli.exec_in(connection, inventory.container.name, ["sh", "-c", script])


def exit_code(head: NodeConnection, inventory: Inventory) -> int | None:
    """The serve command's exit code once it has ended, else None."""
    _, output = _in_engine(head, inventory, f"cat {LOG}/exit_code 2>/dev/null || true")
    return int(output.strip()) if output.strip().lstrip("-").isdigit() else None


def engine_running(head: NodeConnection, inventory: Inventory) -> bool:
    """Whether the serve command started by sparkpair is still alive in the head container."""
    try:
        code, _ = _in_engine(head, inventory, f"test ! -e {LOG}/exit_code && kill -0 $(cat {LOG}/serve.pid)")
    except docker_cli.ContainerNotRunning:
        return False
    return code == 0


def stop_engine(pair: Pair, inventory: Inventory, nodes: list[str], grace_s: float = 20.0) -> None:
    """End the serve command (SIGTERM to mpirun, which takes the ranks down) and wait for it."""
    head = pair.nodes[nodes[0]]
    if not engine_running(head, inventory):
        return
    _in_engine(head, inventory, "pkill -TERM -x mpirun || pkill -TERM -f '[t]rtllm-serve'; true")
    deadline = time.monotonic() + grace_s
    while engine_running(head, inventory) and time.monotonic() < deadline:
        time.sleep(0.3)
    for name in nodes:
        try:
            _in_engine(pair.nodes[name], inventory, "pkill -KILL -f '[t]rtllm-|[m]pirun|[o]rted'; true")
        except docker_cli.ContainerNotRunning:
            continue


def rank_log_paths(rank: int | None) -> list[str]:
    """The files holding one rank's output (stdout and stderr; mpirun --output-filename), or the serve log."""
    return [SERVE_LOG] if rank is None else [f"{LOG}/ranks/1/rank.{rank}/stdout", f"{LOG}/ranks/1/rank.{rank}/stderr"]


def rank_log_files(rank: int | None) -> str:
    """rank_log_paths as shell words."""
    return " ".join(rank_log_paths(rank))


def save_logs(pair: Pair, inventory: Inventory, nodes: list[str]) -> dict[str, str]:
    """Keep a failed launch's output on every rank node (paths.FAILED_LAUNCH_LOGS, replacing the last one's)
    before its containers go: mpirun's on the head, each rank's on its own node (Open MPI writes
    --output-filename files where the rank runs). Per node: where it is, or why it could not be kept."""
    def keep(connection: NodeConnection) -> str:
        target = paths.under_home(paths.FAILED_LAUNCH_LOGS, connection.home)
        result = connection.run(Shell("rm -rf {} && mkdir -p -m 700 {} && docker cp {} - | tar -x -C {} "
                                      "--strip-components 1", target, target, f"{inventory.container.name}:{LOG}",
                                      target))
        return paths.FAILED_LAUNCH_LOGS if result.ok else \
            f"not kept ({last_line(result.stderr, f'exit {result.exit_code}')})"
    kept = pair.each(keep, names=nodes)
    return {**dict(kept.values), **{name: f"not kept ({error})" for name, error in kept.failed.items()}}


def rank_logs(connection: NodeConnection, inventory: Inventory, rank: int | None, tail: int) -> str:
    """The last lines of one rank's output (stdout and stderr), read on the rank's own node, or of the whole
    serve log (rank None, on the head: mpirun's output, every rank's lines); "" when its container is gone."""
    try:
        _, output = _in_engine(connection, inventory,
                               f"tail -q -n {int(tail)} {rank_log_files(rank)} 2>/dev/null || true")
    except docker_cli.ContainerNotRunning:
        return ""
    return output


GENERATION_TIMEOUT_S = 5.0   # a one-token generation of a serving engine answers well within this


@dataclass
class Status:
    """What `sparkpair status` reports. state: serving (both ranks alive and running, /health 200, a one-token
    generation answered), wedged (/health answers but the engine cannot generate: a rank stopped, or
    generation hangs), degraded (a container or rank gone, or /health failing), stopped (no container)."""

    state: str = "stopped"
    profile: str = ""
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    health: str = "down"
    generation: str = "not tried"
    model: str = ""
    uptime_s: float | None = None
    requests: float | None = None
    acceptance_rate: float | None = None
    endpoint: str = ""
    reason: str = ""


def rank_processes(connection: NodeConnection, inventory: Inventory,
                   container: docker.ContainerState | None) -> list[ranks.RankProcess]:
    """The engine's rank processes in the node's container (none when it does not run or cannot be read)."""
    if container is None or not container.running:
        return []
    probe = ranks.processes(inventory.container.name, recipe.HF_HOME)
    found = gather(connection, [probe], timeout=30).get(probe)
    return [] if found is None or isinstance(found, ProbeFailure) else found


def launch_nodes(inventory: Inventory, state: LaunchState | None) -> list[str]:
    """The nodes of the last launch, serving node first; both nodes when nothing was launched."""
    return list(state.nodes) if state and state.nodes else [node.name for node in inventory.nodes]


def generate_one_token(serving: NodeConnection, port: int, model: str) -> tuple[bool, str]:
    """A one-token completion through every rank: (answered, what happened)."""
    body = json.dumps({"model": model, "prompt": "ping", "max_tokens": 1, "temperature": 0}).encode()
    started = time.monotonic()
    answer = serving.http(port, "POST", "/v1/completions", body=body, timeout=GENERATION_TIMEOUT_S)
    took = time.monotonic() - started
    if answer is None:
        return False, (f"no answer within {GENERATION_TIMEOUT_S:.0f} s" if took >= GENERATION_TIMEOUT_S * 0.9
                       else "the connection failed")
    if answer[0] != 200:
        return False, f"http {answer[0]}"
    return True, f"ok in {took:.2f} s"


def status(pair: Pair, inventory: Inventory) -> Status:
    """Containers, ranks (alive, running), health, a one-token generation, model, uptime, requests, acceptance."""
    state = read_state(pair.head)
    names = launch_nodes(inventory, state)
    result = Status(profile=state.profile if state else "", endpoint=state.endpoint if state else "")
    for name in names:
        container = containers.find(pair.nodes[name], inventory.container.name)
        found = rank_processes(pair.nodes[name], inventory, container)
        rank_state = "stopped" if any(p.stopped for p in found) else ("running" if found else "gone")
        result.nodes[name] = {"container": container.status if container else "absent",
                              "ranks_alive": len(found), "rank_state": rank_state if container else "-"}
    serving = pair.nodes[names[0]]
    port = inventory.server.port
    health = serving.http(port, "GET", "/health", timeout=5)
    result.health = "ok" if health and health[0] == 200 else ("down" if health is None else f"http {health[0]}")
    models = serving.http(port, "GET", "/v1/models", timeout=5) if health else None
    if models and models[0] == 200:
        result.model = ",".join(listed_models(models[1]))
    generated = False
    if result.health == "ok" and result.model:
        generated, result.generation = generate_one_token(serving, port, result.model.split(",")[0])
    metrics = serving.http(port, "GET", "/prometheus/metrics", timeout=5) if health else None
    if metrics and metrics[0] == 200:
        counters = prometheus.parse(metrics[1].decode("utf-8", "replace"))
        result.requests = counters.get("trtllm_request_success_total")
        drafted = counters.get("trtllm_spec_decode_num_draft_tokens_total")
        accepted = counters.get("trtllm_spec_decode_num_accepted_tokens_total")
        result.acceptance_rate = accepted / drafted if drafted and accepted is not None else None
    result.state = _overall(result, names, generated)
    if result.state != "stopped" and state is not None and state.running:
        result.uptime_s = round(time.time() - float(state.started), 1)
    if result.state in ("degraded", "wedged"):
        result.reason = _why_not_serving(serving, inventory, result, names)
    return result


def _why_not_serving(head: NodeConnection, inventory: Inventory, result: Status, names: list[str]) -> str:
    down = [n for n in names if result.nodes[n]["container"] != "running"]
    if down:
        return f"engine container not running on {', '.join(down)} (sparkpair launch restarts it)"
    code = exit_code(head, inventory)
    dead = [n for n in names if not result.nodes[n]["ranks_alive"]]
    stopped = [n for n in names if result.nodes[n]["rank_state"] == "stopped"]
    parts = [f"rank gone on {', '.join(dead)}"] if dead else []
    parts += [f"rank stopped (process state T: SIGSTOP or a debugger) on {', '.join(stopped)}"] if stopped else []
    parts += [f"serve command exited with code {code}"] if code is not None else []
    if result.health != "ok":
        parts += [f"health {result.health}"]
    elif not result.model:
        parts += ["/health answers 200 but /v1/models lists no model"]
    elif not result.generation.startswith("ok"):
        parts += [f"/health answers 200 but a one-token generation got {result.generation}"]
    return "; ".join(parts) + " (sparkpair logs; sparkpair bundle; sparkpair stop, then sparkpair launch)"


def _overall(result: Status, names: list[str], generated: bool) -> str:
    containers_up = [result.nodes[n]["container"] == "running" for n in names]
    if not any(containers_up):
        return "stopped"
    alive = all(containers_up) and all(result.nodes[n]["ranks_alive"] > 0 for n in names)
    stopped = any(result.nodes[n]["rank_state"] == "stopped" for n in names)
    if alive and not stopped and result.health == "ok" and generated:
        return "serving"
    if alive and result.health == "ok":
        return "wedged"
    return "degraded"


def stop(pair: Pair, inventory: Inventory) -> dict[str, str]:
    """Remove the engine container on both nodes (idempotent); models stay in the caches."""
    removed = pair.each(lambda connection: containers.remove(connection, inventory.container.name)).raise_first()
    state = read_state(pair.head)
    if state is not None and state.running:
        write_state(pair.head, LaunchState(**{**state.__dict__, "stopped": time.time()}))
    return dict(removed.values)


@dataclass(frozen=True)
class RankLog:
    """The last lines of one rank's output."""

    node: str
    rank: int
    text: str


def logs(pair: Pair, inventory: Inventory, node: str | None, tail: int) -> list[RankLog]:
    """Each rank's last lines (ranks numbered in the launch's node order); node: only that one."""
    names, _ = _log_source(pair, inventory, node)
    chosen = [node] if node else names
    return [RankLog(name, names.index(name), rank_logs(pair.nodes[name], inventory,
                                                       None if len(names) == 1 else names.index(name), tail))
            for name in chosen]


def follow_logs(pair: Pair, inventory: Inventory, node: str | None, tail: int, on_line: Callable[[str], None]) -> None:
    """Hand each new line of the ranks' output to on_line until Ctrl-C (which ends it quietly): mpirun's output
    on the head (every rank's lines), or with node one rank's own files on its node."""
    names, head = _log_source(pair, inventory, node)
    files = rank_log_files(names.index(node)) if node and len(names) > 1 else SERVE_LOG
    argv = ["sh", "-c", f"tail -F -n {int(tail)} {files} 2>/dev/null"]
    try:
        docker_cli.stream_in(pair.nodes[node] if node else head, inventory.container.name, argv, on_line)
    except KeyboardInterrupt:
        pass


def _log_source(pair: Pair, inventory: Inventory, node: str | None) -> tuple[list[str], NodeConnection]:
    names = launch_nodes(inventory, read_state(pair.head))
    head = pair.nodes[names[0]]
    if node is not None and node not in names:
        raise SparkpairError(f"--node {node}: the launch runs on {', '.join(names)}")
    if containers.find(head, inventory.container.name) is None:
        raise SparkpairError("no engine container on the head: nothing is running", node=head.name,
                             hint="sparkpair launch")
    return names, head
