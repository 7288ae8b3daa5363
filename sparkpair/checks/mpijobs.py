"""doctor --deep, the jobs: mpirun across both nodes inside the engine container, as launch runs it.

The jobs use what launch uses: the container spec and environment (recipe.container_env), the
hostfile and the rsh agent of the inventory's MPI transport (render.node_config_files) and
launch's own mpirun line. When the engine containers run, the jobs are exec'd in them: a short
MPI job beside the server and nothing else. Otherwise short-lived containers of the same spec,
named `<name>-doctor`, start with their own copy of the config (~/.sparkpair/doctor) and are
always removed, with that copy, afterwards. Each job is cut off after --timeout seconds.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from importlib import resources
from typing import Any

from sparkpair import containers, hftoken, recipe, render
from sparkpair.checks import Facts
from sparkpair.checks.deep import NCCL_ARGS, SUFFIX, DeepRun, parse_stages, telling
from sparkpair.errors import SparkpairError
from sparkpair.inventory import Inventory
from sparkpair.probes import ProbeFailure
from sparkpair.transport import NodeConnection, Pair, Shell

DOCTOR_DIR = f"{recipe.NODE_STATE_DIR}/doctor"
NCCL_BINARIES = ("all_gather_perf", "/opt/nccl-tests/build/all_gather_perf",
                 "/workspace/nccl-tests/build/all_gather_perf", "/root/nccl-tests/build/all_gather_perf")
KILL_GRACE_S = 5


def mpirun_prefix(inventory: Inventory, profile: str) -> list[str]:
    """Launch's mpirun line up to the program: hostfile, rsh agent, forwarded env (no rank log files)."""
    argv = recipe.mpirun_argv(inventory, inventory.profile(profile))
    prefix = argv[:argv.index("trtllm-llmapi-launch")]
    cut = prefix.index("--output-filename")
    return prefix[:cut] + prefix[cut + 2:]


def probe_program() -> str:
    return resources.files("sparkpair.data").joinpath("mpi_probe.py").read_text(encoding="utf-8")


def in_container(name: str, argv: list[str], timeout: float) -> list[str]:
    """docker exec of argv in container name, killed after timeout seconds."""
    return ["docker", "exec", name, "timeout", "-k", str(KILL_GRACE_S), f"{timeout:g}", *argv]


def blocker(facts: Facts) -> str:
    """Why the deep jobs cannot run on this pair (empty: they can)."""
    if not facts.inventory.profile(facts.profile).is_pair:
        return f"profile {facts.profile} runs one rank; the deep checks need a TP=2 profile"
    for name in facts.nodes:
        node = facts.nodes[name]
        if name in facts.unreachable:
            return f"needs reach.ssh on {name}"
        if isinstance(node.get("docker_info"), ProbeFailure):
            return f"needs docker.daemon on {name}"
        if not isinstance(node.get("image_id"), str):
            return f"needs docker.image on {name}"
        state = node.get("container")
        if getattr(state, "running", False) and "sparkpair.node" not in state.labels:
            return f"a container named {state.name} that sparkpair did not start runs on {name} (see docker.container)"
    return ""


def engine_nodes(facts: Facts) -> list[str]:
    """The nodes where sparkpair's engine container is running."""
    return [name for name in facts.nodes if facts.container_running(name)]


def run_deep(pair: Pair, facts: Facts, timeout: float) -> DeepRun:
    """Run the deep jobs (see the module docstring); problems become fields of the result, not raises."""
    token = hftoken.find_token()
    base = DeepRun(operator_sha256=hashlib.sha256(token.encode()).hexdigest() if token else None, timeout=timeout)
    if reason := blocker(facts):
        return replace(base, blocked=reason)
    running, name = engine_nodes(facts), facts.inventory.container.name
    if len(running) == len(facts.nodes):
        return _jobs(pair, facts, replace(base, where=f"in the running engine containers {name}"), name, False)
    if running:
        return replace(base, error=f"the engine container {name} runs on {', '.join(running)} only")
    error = start_short_lived(pair, facts.inventory, facts.profile)
    try:
        where = f"in short-lived containers {name}{SUFFIX}, removed afterwards"
        run = replace(base, error=error) if error else _jobs(pair, facts, replace(base, where=where), name + SUFFIX, True)
    finally:
        cleanup = remove_short_lived(pair, name + SUFFIX)
    return replace(run, cleanup=cleanup)


def _jobs(pair: Pair, facts: Facts, run: DeepRun, container: str, gpus_free: bool) -> DeepRun:
    """The mpi4py probe on both ranks, then all_gather_perf where the image has it."""
    head = pair.nodes[facts.inventory.head.name]
    prefix = mpirun_prefix(facts.inventory, facts.profile)
    argv = in_container(container, [*prefix, "python3", "-c", probe_program()], run.timeout)
    try:
        result = head.run(argv, timeout=run.timeout + 30)
    except SparkpairError as error:
        return replace(run, error=" ".join(error.lines()))
    run = replace(run, exit_code=result.exit_code, timed_out=result.exit_code in (124, 137),
                  stages=parse_stages(result.stdout), tail=telling(result.stdout + result.stderr))
    return replace(run, **_nccl(head, container, prefix, run, gpus_free))


def _nccl(head: NodeConnection, container: str, prefix: list[str], run: DeepRun, gpus_free: bool) -> dict[str, str]:
    """all_gather_perf across both ranks as NVIDIA's playbook runs it, or why it did not run."""
    if len(run.stages.get("hosts") or []) < 2:
        return {"nccl_skip": "needs deep.mpi"}
    find = "for p in " + " ".join(NCCL_BINARIES) + '; do command -v "$p" && exit 0; done; true'
    try:
        binary = head.run(["docker", "exec", container, "sh", "-c", find], timeout=30).stdout.strip()
        if not binary:
            return {"nccl_skip": "no all_gather_perf (nccl-tests) in the engine image"}
        if not gpus_free:
            return {"nccl_skip": "the running engine holds the GPUs; sparkpair stop, then doctor --deep --only deep.nccl"}
        argv = in_container(container, [*prefix, "-x", "LD_LIBRARY_PATH", binary, *NCCL_ARGS], run.timeout)
        result = head.run(argv, timeout=run.timeout + 30)
    except SparkpairError as error:
        return {"nccl": " ".join(error.lines())}
    timed_out = f"\ntimed out after {run.timeout:g} s" if result.exit_code in (124, 137) else ""
    return {"nccl": result.stdout + result.stderr + timed_out}


def start_short_lived(pair: Pair, inventory: Inventory, profile: str) -> str:
    """Start `<name>-doctor` on both nodes: launch's spec with a private copy of the config. Errors, or ""."""
    container = inventory.container.model_copy(update={"name": inventory.container.name + SUFFIX})
    doctor = inventory.model_copy(update={"container": container})
    files = render.node_config_files(doctor, profile)

    def start(connection: NodeConnection) -> None:
        directory = f"{connection.home}/{DOCTOR_DIR}/config"
        connection.check(Shell("mkdir -p -m 700 {} {}", f"{connection.home}/{DOCTOR_DIR}", directory))
        for item in files:
            connection.put(item.content, f"{directory}/{item.path}", mode=item.mode)
        spec = containers.node_spec(doctor, connection)
        spec = replace(spec, mounts={**spec.mounts, recipe.CONFIG_DIR: (directory, "ro")},
                       labels={**spec.labels, "sparkpair.doctor": "deep"})
        containers.ensure(connection, spec, replace=True)
        if inventory.container.mpi_transport == "sshd":
            _wait_listening(connection, inventory.container.sshd_port)

    return _errors(pair.each(start))


def _wait_listening(connection: NodeConnection, port: int, seconds: float = 15.0) -> None:
    """Wait until something listens on port (the container's sshd); SparkpairError after seconds."""
    script = Shell("i=0; while [ $i -lt {} ]; do ss -Htln \"sport = :{}\" | grep -q . && exit 0; "
                   "sleep 0.2; i=$((i+1)); done; exit 1", int(seconds * 5), port)
    if not connection.run(script, timeout=seconds + 10).ok:
        raise SparkpairError(f"the container's sshd did not listen on port {port} within {seconds:g} s",
                             node=connection.name)


def remove_short_lived(pair: Pair, name: str) -> str:
    """Remove `<name>-doctor` and ~/.sparkpair/doctor on both nodes (idempotent). Errors, or ""."""
    def remove(connection: NodeConnection) -> None:
        containers.remove(connection, name)
        connection.check(Shell("rm -rf {}", f"{connection.home}/{DOCTOR_DIR}"))

    return _errors(pair.each(remove))


def _errors(results: dict[str, Any]) -> str:
    problems = []
    for name, result in results.items():
        if isinstance(result, SparkpairError):
            problems.append(" ".join(result.lines()) if result.node else f"{name}: {' '.join(result.lines())}")
        elif isinstance(result, BaseException):
            problems.append(f"{name}: {type(result).__name__}: {result}")
    return "; ".join(problems)
