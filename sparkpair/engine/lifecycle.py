"""The running engine: start and stop its processes, read its logs, report its status.

Each of the runtime's start commands (`runtimes`: mpirun on the head for TensorRT-LLM, `vllm serve` on
every rank node for vLLM) runs detached in its node's container under a small shell that records its
pid and, when it ends, its exit code; output stays in log files inside the container. Which runtime
runs comes from the launch state; status, logs and stop read the inventory as that runtime sees it.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparkpair import paths, registry
from sparkpair.engine import containers, credentials, memguard
from sparkpair.engine.readiness import HEALTH_CAP, generate_one_token, served_model_ids
from sparkpair.engine.state import LaunchState, read_state, write_state
from sparkpair.errors import SparkpairError, last_line
from sparkpair.inventory import Inventory
from sparkpair.probes import ProbeFailure, docker, gather, prometheus, ranks
from sparkpair.render import recipe
from sparkpair.render.recipe import Start
from sparkpair.runtimes import Runtime, runtime_named
from sparkpair.transport import Node, Pair, Shell, docker_cli

LOG = recipe.LOG_DIR
SERVE_LOG = f"{LOG}/serve.log"


def serve_wrapper(argv: list[str], log: str = "serve", secret_env: tuple[str, ...] = ()) -> list[str]:
    """sh -c that runs argv with output to LOG/<log>.log, recording its pid (<log>.pid) and finally its exit code
    (exit_code for the serve command, <log>.exit_code for the others); secret_env, exported from their files."""
    done = f"{LOG}/{_exit_file(log)}"
    script = (f"mkdir -p {LOG} && rm -f {done} && echo $$ > {LOG}/{log}.pid && {recipe.secret_exports(secret_env)}"
              f"{shlex.join(argv)} > {LOG}/{log}.log 2>&1; echo $? > {done}")
    return ["sh", "-c", script]


def _exit_file(log: str) -> str:
    return "exit_code" if log == "serve" else f"{log}.exit_code"


def start(connection: Node, inventory: Inventory, command: Start) -> None:
    """Start one of the runtime's commands, detached, in the node's engine container."""
    docker_cli.exec_detached(connection, inventory.container.name,
                             serve_wrapper(command.argv, command.log, command.secret_env))


def wait_until(connection: Node, inventory: Inventory, command: Start, timeout_s: float = 120.0) -> None:
    """Poll command.until in the node's container until it succeeds; a SparkpairError naming what did not
    happen (and the command's last line) when it has not within timeout_s, or the command ended."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _in_engine(connection, inventory, command.until)[0] == 0:
            return
        ended_file = docker_cli.regular_head(f"{LOG}/{_exit_file(command.log)}")
        _, ended = _in_engine(connection, inventory, f"{ended_file} 2>/dev/null || true")
        if ended.strip():
            break
        time.sleep(1.0)
    _, tail = _in_engine(connection, inventory, docker_cli.tails([f"{LOG}/{command.log}.log"], 3))
    raise SparkpairError(f"not seen within {timeout_s:.0f} s: {command.until_means} "
                         f"({shlex.join(command.argv[:3])}: {last_line(tail, 'no output')})", node=connection.name,
                         hint="sparkpair logs; sparkpair bundle")


def first_exit(pair: Pair, inventory: Inventory, starts: list[Start]) -> int | None:
    """The exit code of the first start command that has ended (on any node), else None: a worker's `vllm serve`
    that dies ends the start as surely as the head's."""
    by_node: dict[str, list[str]] = {}
    for command in starts:
        by_node.setdefault(command.node, []).append(_exit_file(command.log))

    def read(connection: Node) -> int | None:
        files = "; ".join(docker_cli.regular_head(f"{LOG}/{name}") for name in by_node[connection.name])
        try:
            _, output = _in_engine(connection, inventory, f"{{ {files}; }} 2>/dev/null | head -n 1")
        except docker_cli.ContainerNotRunning:
            return 137
        text = output.strip()
        return int(text) if text.lstrip("-").isdigit() and len(text) < 8 else None

    found = pair.each(read, names=list(by_node))
    codes = [code for code in found.values.values() if code is not None]
    return codes[0] if codes else None


def _in_engine(connection: Node, inventory: Inventory, script: str) -> tuple[int, str]:
    """A shell script in the node's engine container: (exit code, output), read with exec_in's deadline and byte
    cap; the container must run."""
    return docker_cli.exec_in(connection, inventory.container.name, ["sh", "-c", script])


def exit_code(head: Node, inventory: Inventory) -> int | None:
    """The serve command's exit code once it has ended, else None."""
    _, output = _in_engine(head, inventory, f"{docker_cli.regular_head(f'{LOG}/exit_code')} 2>/dev/null || true")
    return int(output.strip()) if output.strip().lstrip("-").isdigit() else None


def engine_running(head: Node, inventory: Inventory) -> bool:
    """Whether the serve command started by sparkpair is still alive in the head container."""
    try:
        pid = docker_cli.regular_head(f"{LOG}/serve.pid")
        code, _ = _in_engine(head, inventory, f'test ! -e {LOG}/exit_code && kill -0 "$({pid})"')
    except docker_cli.ContainerNotRunning:
        return False
    return code == 0


def stop_engine(pair: Pair, inventory: Inventory, runtime: Runtime, nodes: list[str], grace_s: float = 20.0) -> None:
    """End the engine (SIGTERM as its runtime says: to mpirun, which takes the ranks down, or to every node's
    `vllm serve`), wait for the serving one, then kill what is left on every node."""
    head = pair.nodes[nodes[0]]
    if not engine_running(head, inventory):
        return
    for name in nodes:
        try:
            _in_engine(pair.nodes[name], inventory, runtime.stop_script())
        except docker_cli.ContainerNotRunning:
            continue
    deadline = time.monotonic() + grace_s
    while engine_running(head, inventory) and time.monotonic() < deadline:
        time.sleep(0.3)
    for name in nodes:
        try:
            _in_engine(pair.nodes[name], inventory, runtime.kill_script())
        except docker_cli.ContainerNotRunning:
            continue


def save_logs(pair: Pair, inventory: Inventory, nodes: list[str]) -> dict[str, str]:
    """Keep a failed launch's output on every rank node (paths.FAILED_LAUNCH_LOGS, replacing the last one's)
    before its containers go: mpirun's on the head, each rank's on its own node (Open MPI writes
    --output-filename files where the rank runs). Per node: where it is, or why it could not be kept."""
    def keep(connection: Node) -> str:
        target = paths.under_home(paths.FAILED_LAUNCH_LOGS, connection.home)
        result = connection.run(Shell("rm -rf {} && mkdir -p -m 700 {} && docker cp {} - | tar -x -C {} "
                                      "--strip-components 1", target, target, f"{inventory.container.name}:{LOG}",
                                      target))
        return paths.FAILED_LAUNCH_LOGS if result.ok else \
            f"not kept ({last_line(result.stderr, f'exit {result.exit_code}')})"
    kept = pair.each(keep, names=nodes)
    return {**dict(kept.values), **{name: f"not kept ({error})" for name, error in kept.failed.items()}}


def rank_logs(connection: Node, inventory: Inventory, runtime: Runtime, rank: int | None, tail: int) -> str:
    """The last lines of one rank's output (its runtime's files for it: stdout and stderr), read on the rank's
    own node, or of a one-node start (rank None); "" when its container is gone."""
    return tail_files(connection, inventory, runtime.rank_log_paths(rank), tail)


def tail_files(connection: Node, inventory: Inventory, files: list[str], tail: int) -> str:
    """The last tail lines of files in the node's engine container; "" when the container is gone."""
    try:
        _, output = _in_engine(connection, inventory, docker_cli.tails(files, tail))
    except docker_cli.ContainerNotRunning:
        return ""
    return output




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
    model_problem: str = ""   # why the server names no model (the OpenAI server's /v1/models): failed, malformed
    uptime_s: float | None = None
    requests: float | None = None
    acceptance_rate: float | None = None
    endpoint: str = ""
    reason: str = ""
    runtime: str = ""
    cluster: str = ""          # the cluster the engine runs on, when it runs on one (Ray: its node count)
    memory_guard: list[str] = field(default_factory=list)  # the memory guard's stops of this launch, one line each


def launched(pair: Pair, inventory: Inventory) -> tuple[LaunchState | None, Inventory, Runtime]:
    """The last launch's state, the inventory as its runtime sees it, and that runtime (the inventory's own
    runtime, or the registry's default, when nothing was launched)."""
    state = read_state(pair.head)
    runtime = runtime_named(state.runtime if state else (inventory.runtime or registry.DEFAULT))
    return state, inventory.for_runtime(runtime.name), runtime


def engine_container_names(inventory: Inventory) -> list[str]:
    """The engine container's name under every runtime (stop removes whichever is there)."""
    return list(dict.fromkeys(inventory.for_runtime(name).container.name for name in registry.NAMES))


def rank_processes(connection: Node, inventory: Inventory, runtime: Runtime,
                   container: docker.ContainerState | None) -> list[ranks.RankProcess]:
    """The engine's rank processes in the node's container (none when it does not run or cannot be read)."""
    if container is None or not container.running:
        return []
    probe = ranks.processes(inventory.container.name, recipe.HF_HOME, runtime.process_pattern)
    found = gather(connection, [probe], timeout=30).get(probe)
    return [] if found is None or isinstance(found, ProbeFailure) else found


def launch_nodes(inventory: Inventory, state: LaunchState | None) -> list[str]:
    """The nodes of the last launch that the inventory still has, serving node first; every node of the
    inventory when nothing was launched or none of them is left (a launch across a switch of four, then the
    inventory cut back to a pair: status, logs and stop act on the pair, never on nodes it no longer names)."""
    known = [node.name for node in inventory.nodes]
    kept = [name for name in state.nodes if name in known] if state else []
    return kept or known


def launched_target(inventory: Inventory, state: LaunchState | None) -> str:
    """The target model of the launched profile ("" when nothing was launched or the inventory lost it)."""
    try:
        return inventory.profile(state.profile).target if state else ""
    except KeyError:
        return ""


def status(pair: Pair, inventory: Inventory) -> Status:
    """Containers, ranks (alive, running), health, a one-token generation, model, uptime, requests, acceptance."""
    state, inventory, runtime = launched(pair, inventory)
    names = launch_nodes(inventory, state)
    result = Status(profile=state.profile if state else "", endpoint=state.endpoint if state else "",
                    runtime=runtime.name if state else "")
    for name in names:
        container = containers.find(pair.nodes[name], inventory.container.name)
        found = rank_processes(pair.nodes[name], inventory, runtime, container)
        rank_state = "stopped" if any(p.stopped for p in found) else ("running" if found else "gone")
        result.nodes[name] = {"container": container.status if container else "absent",
                              "ranks_alive": len(found), "rank_state": rank_state if container else "-"}
    serving = pair.nodes[names[0]]
    cluster = runtime.cluster_script(inventory)
    if cluster and result.nodes[names[0]]["container"] == "running":
        result.cluster = last_line(_in_engine(serving, inventory, cluster)[1], "")
    port, api = inventory.server.port, runtime.api
    auth = credentials.launched_headers(inventory, runtime, state.profile) if state else {}
    health = serving.http(port, "GET", api.health, timeout=5, cap=HEALTH_CAP)
    result.health = "down" if health is None else ("ok" if health.status == 200 else health.summary)
    if health is not None and health.status:
        listed, result.model_problem = served_model_ids(serving, port, launched_target(inventory, state), auth, api)
        result.model = ",".join(listed)
    generated = False
    if result.health == "ok" and result.model:
        generated, result.generation = generate_one_token(serving, port, result.model.split(",")[0], auth, api)
    names_of = runtime.metrics
    metrics = serving.http(runtime.metrics_port(inventory), "GET", names_of.path, timeout=5, cap=prometheus.TEXT_CAP) \
        if health is not None and health.status else None
    if metrics is not None and metrics.status == 200:
        counters = prometheus.parse(metrics.body.decode("utf-8", "replace"))
        result.requests = counters.get(names_of.requests) if names_of.requests else None
        drafted = counters.get(names_of.drafted) if names_of.drafted else None
        accepted = counters.get(names_of.accepted) if names_of.accepted else None
        result.acceptance_rate = accepted / drafted if drafted and accepted is not None else None
        if names_of.accept_rate and counters.get(names_of.drafts or names_of.accept_rate):
            result.acceptance_rate = counters.get(names_of.accept_rate)   # a gauge (SGLang's)
    result.state = _overall(result, names, generated)
    if result.state != "stopped" and state is not None and state.running:
        result.uptime_s = round(time.time() - float(state.started), 1)
    if result.state in ("degraded", "wedged"):
        result.reason = _why_not_serving(serving, inventory, result, names, api.health)
    if state is not None and state.running:  # the memory guard beside the launch's engine, and what it did
        words, result.memory_guard = memguard.status(pair, names, state.started)
        for name, text in words.items():
            result.nodes[name]["memory_guard"] = text
    if result.memory_guard:  # it stopped this launch's engine (whatever a probe read a moment before): never silent
        result.state = "degraded"
        result.reason = "; ".join([*result.memory_guard, *([result.reason] if result.reason else [])])
    return result


def _why_not_serving(head: Node, inventory: Inventory, result: Status, names: list[str], health: str) -> str:
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
        parts += [f"{health} answers 200 but {result.model_problem or 'it serves no model'}"]
    elif not result.generation.startswith("ok"):
        parts += [f"{health} answers 200 but a one-token generation got {result.generation}"]
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
    """Remove the engine container on both nodes, whichever runtime's it is (idempotent); models stay in the
    caches."""
    names = engine_container_names(inventory)

    def remove(connection: Node) -> str:
        guard = memguard.stop(connection)  # first, so that its log says sparkpair stop ended it
        done = [containers.remove(connection, name) for name in names]
        return "; ".join([item for item in done if item.startswith("removed")] or done[:1]) + (f"; {guard}" if guard else "")

    removed = pair.each(remove).raise_failures()
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
    names, _, inventory, runtime = _log_source(pair, inventory, node)
    chosen = [node] if node else names
    return [RankLog(name, names.index(name), rank_logs(pair.nodes[name], inventory, runtime,
                                                       None if len(names) == 1 else names.index(name), tail))
            for name in chosen]


def follow_logs(pair: Pair, inventory: Inventory, node: str | None, tail: int, on_line: Callable[[str], None]) -> None:
    """Hand each new line of the ranks' output to on_line until Ctrl-C (which ends it quietly): the launcher's
    output on the head (mpirun's: every rank's lines) or the serving rank's, or with node one rank's own files
    on its node."""
    names, head, inventory, runtime = _log_source(pair, inventory, node)
    if node and len(names) > 1:
        paths_ = runtime.rank_log_paths(names.index(node))
    else:
        paths_ = [runtime.launcher_log(len(names)) or runtime.rank_log_paths(0 if len(names) > 1 else None)[0]]
    argv = ["sh", "-c", f"tail -F -n {int(tail)} {' '.join(map(shlex.quote, paths_))} 2>/dev/null"]
    try:
        docker_cli.stream_in(pair.nodes[node] if node else head, inventory.container.name, argv, on_line)
    except KeyboardInterrupt:
        pass


def _log_source(pair: Pair, inventory: Inventory,
                node: str | None) -> tuple[list[str], Node, Inventory, Runtime]:
    state, inventory, runtime = launched(pair, inventory)
    names = launch_nodes(inventory, state)
    head = pair.nodes[names[0]]
    if node is not None and node not in names:
        raise SparkpairError(f"--node {node}: the launch runs on {', '.join(names)}")
    if containers.find(head, inventory.container.name) is None:
        raise SparkpairError("no engine container on the head: nothing is running", node=head.name,
                             hint="sparkpair launch")
    return names, head, inventory, runtime
