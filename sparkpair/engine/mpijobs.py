"""doctor --deep, the jobs: mpirun across both nodes inside the engine container, as launch runs it.

The jobs use what launch uses: the container spec and each node's own environment
(recipe.container_env with the node's NCCL_IB_HCA and GID index, checks.roce.node_fabric), the
hostfile and the rsh agent of the inventory's MPI transport (render.node_config_files) and
launch's own mpirun line. When the engine containers run, the jobs are exec'd in them: a short
MPI job beside the server and nothing else. Otherwise short-lived containers of the same spec,
named `<name>-doctor`, start with their own copy of the config (~/.sparkpair/doctor) and are
always removed, with that copy, afterwards. Each job is cut off after --timeout seconds.
all_gather_perf runs with NCCL_DEBUG=INFO, so that deep.nccl can tell what NCCL chose.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from importlib import resources

from sparkpair import paths, render
from sparkpair.checks import Facts, roce
from sparkpair.checks.deep import NCCL_ARGS, NCCL_DEBUG, SUFFIX, DeepRun, parse_stages, telling
from sparkpair.engine import containers
from sparkpair.errors import SparkpairError
from sparkpair.inventory import Inventory, hftoken
from sparkpair.inventory.profiles import Profile
from sparkpair.probes import docker
from sparkpair.render import recipe
from sparkpair.runtimes import fabric_prover, runtime_of
from sparkpair.transport import Node, Pair, PairResult, Shell, docker_cli

DOCTOR_DIR = paths.DOCTOR_DIR.removeprefix("~/")
NCCL_BINARIES = ("all_gather_perf", "/opt/nccl-tests/build/all_gather_perf",
                 "/workspace/nccl-tests/build/all_gather_perf", "/root/nccl-tests/build/all_gather_perf")
KILL_GRACE_S = 5


def mpirun_prefix(inventory: Inventory, profile: Profile) -> list[str]:
    """Launch's mpirun line up to the program: hostfile, rsh agent, forwarded env (no rank log files)."""
    argv = recipe.mpirun_argv(inventory, profile)
    prefix = argv[:argv.index("trtllm-llmapi-launch")]
    cut = prefix.index("--output-filename")
    return prefix[:cut] + prefix[cut + 2:]


def probe_program() -> str:
    return resources.files("sparkpair.data").joinpath("mpi_probe.py").read_text(encoding="utf-8")


def bounded(argv: list[str], timeout: float) -> list[str]:
    """argv killed after timeout seconds (coreutils timeout, inside the container)."""
    return ["timeout", "-k", str(KILL_GRACE_S), f"{timeout:g}", *argv]


def blocker(facts: Facts) -> str:
    """Why the deep jobs cannot run on this pair (empty: they can)."""
    if not facts.profile.is_pair:
        return f"profile {facts.profile.name} runs one rank; the deep checks need a TP=2 profile"
    if not runtime_of(facts.profile).fabric_proof:
        prover = fabric_prover()
        return (f"the deep checks run mpirun and nccl-tests in {prover.title}'s image; profile {facts.profile.name} "
                f"runs on {facts.profile.runtime} (sparkpair doctor --deep with --runtime {prover.name} proves the "
                "fabric)")
    for name in facts.nodes:
        node = facts.nodes[name]
        if name in facts.unreachable:
            return f"needs reach.ssh on {name}"
        if not isinstance(node.get(docker.DOCKER_INFO), docker.DockerInfo):
            return f"needs docker.daemon on {name}"
        if not isinstance(node.get(docker.image_id(facts.inventory.container.image)), str):
            return f"needs docker.image on {name}"
        state = node.value(docker.container(facts.inventory.container.name))
        if state is not None and state.running and "sparkpair.node" not in state.labels:
            return f"a container named {state.name} that sparkpair did not start runs on {name} (see docker.container)"
    return ""


def engine_nodes(facts: Facts) -> list[str]:
    """The nodes where sparkpair's engine container is running."""
    return [name for name in facts.nodes if facts.container_running(name)]


def nccl_tests_dir(path: str) -> str:
    """The directory to mount for --nccl-tests PATH (a build directory, or the all_gather_perf in it)."""
    clean = path.rstrip("/") or "/"
    return clean.rsplit("/", 1)[0] or "/" if clean.endswith("/all_gather_perf") else clean


def nccl_tests_binary(path: str) -> str:
    clean = path.rstrip("/")
    return clean if clean.endswith("/all_gather_perf") else f"{clean}/all_gather_perf"


def run_deep(pair: Pair, facts: Facts, timeout: float, nccl_tests: str | None = None) -> DeepRun:
    """Run the deep jobs (see the module docstring); problems become fields of the result, not raises.

    nccl_tests: an absolute path on the nodes to all_gather_perf or its build directory, mounted read-only
    at the same path into the short-lived containers (a running engine's containers must already have it)."""
    token = hftoken.find_token()
    base = DeepRun(operator_sha256=hashlib.sha256(token.encode()).hexdigest() if token else None, timeout=timeout)
    if reason := blocker(facts):
        return replace(base, blocked=reason)
    running, name = engine_nodes(facts), facts.inventory.container.name
    if len(running) == len(facts.nodes):
        return _jobs(pair, facts, replace(base, where=f"in the running engine containers {name}"), name, False,
                     nccl_tests)
    if running:
        return replace(base, error=f"the engine container {name} runs on {', '.join(running)} only")
    error = start_short_lived(pair, facts, nccl_tests)
    try:
        where = f"in short-lived containers {name}{SUFFIX}, removed afterwards"
        run = replace(base, error=error) if error else _jobs(pair, facts, replace(base, where=where), name + SUFFIX,
                                                             True, nccl_tests)
    finally:
        cleanup = remove_short_lived(pair, name + SUFFIX)
    return replace(run, cleanup=cleanup)


def _jobs(pair: Pair, facts: Facts, run: DeepRun, container: str, gpus_free: bool,
          nccl_tests: str | None = None) -> DeepRun:
    """The mpi4py probe on both ranks, then all_gather_perf where the image has it."""
    head = pair.nodes[facts.inventory.head.name]
    prefix = mpirun_prefix(facts.inventory, facts.profile)
    argv = bounded([*prefix, "python3", "-c", probe_program()], run.timeout)
    try:
        code, output = docker_cli.exec_in(head, container, argv, timeout=run.timeout + 30)
    except SparkpairError as error:
        return replace(run, error=" ".join(error.lines()))
    run = replace(run, exit_code=code, timed_out=code in (124, 137), stages=parse_stages(output),
                  tail=telling(output))
    return _nccl(head, container, prefix, run, gpus_free, nccl_tests)


def _nccl(head: Node, container: str, prefix: list[str], run: DeepRun, gpus_free: bool,
          nccl_tests: str | None) -> DeepRun:
    """all_gather_perf across both ranks as NVIDIA's playbook runs it, with NCCL's INFO lines, or why it did not run."""
    if len(run.stages.get("hosts") or []) < 2:
        return replace(run, nccl_skip="needs deep.mpi")
    candidates = [nccl_tests_binary(nccl_tests)] if nccl_tests else list(NCCL_BINARIES)
    find = "for p in " + " ".join(candidates) + '; do command -v "$p" && exit 0; done; true'
    try:
        binary = docker_cli.exec_in(head, container, ["sh", "-c", find], timeout=30)[1].strip()
        if not binary:
            return replace(run, nccl_skip=f"no all_gather_perf at {candidates[0]} in the engine container" if nccl_tests
                           else "no all_gather_perf (nccl-tests) in the engine image (--nccl-tests PATH names a build)")
        if not gpus_free:
            return replace(run, nccl_skip="the running engine holds the GPUs; sparkpair stop, then doctor --deep --only deep.nccl")
        debug = [item for setting in NCCL_DEBUG for item in ("-x", setting)]
        argv = bounded([*prefix, "-x", "LD_LIBRARY_PATH", *debug, binary, *NCCL_ARGS], run.timeout)
        code, output = docker_cli.exec_in(head, container, argv, timeout=run.timeout + 30)
    except SparkpairError as error:
        return replace(run, nccl=" ".join(error.lines()))
    timed_out = f"\ntimed out after {run.timeout:g} s" if code in (124, 137) else ""
    return replace(run, nccl=output + timed_out)


def start_short_lived(pair: Pair, facts: Facts, nccl_tests: str | None = None) -> str:
    """Start `<name>-doctor` on both nodes: launch's spec, each node with its own environment (its NCCL_IB_HCA
    and GID index) and a private copy of the config. Errors, or ""."""
    inventory = facts.inventory
    doctor = replace(inventory, container=replace(inventory.container, name=inventory.container.name + SUFFIX))
    fabrics = roce.pair_fabric(facts)
    files = {name: render.node_config_files(doctor, facts.profile, fabrics.get(name)) for name in pair.nodes}
    extra = {nccl_tests_dir(nccl_tests): (nccl_tests_dir(nccl_tests), "ro")} if nccl_tests else {}

    def start(connection: Node) -> None:
        if nccl_tests and not connection.run(Shell("test -e {}", nccl_tests)).ok:
            raise SparkpairError(f"--nccl-tests {nccl_tests}: no such file or directory", node=connection.name,
                                 hint="build nccl-tests on both nodes at the same path")
        directory = f"{connection.home}/{DOCTOR_DIR}/config"
        connection.check(Shell("mkdir -p -m 700 {} {}", f"{connection.home}/{DOCTOR_DIR}", directory))
        for item in files[connection.name]:
            connection.put(item.content, f"{directory}/{item.path}", mode=item.mode)
        spec = containers.node_spec(doctor, fabric_prover(), connection, fabrics.get(connection.name))
        spec = replace(spec, mounts={**spec.mounts, recipe.CONFIG_DIR: (directory, "ro"), **extra},
                       labels={**spec.labels, "sparkpair.doctor": "deep"})
        containers.ensure(connection, spec, replace_existing=True)
        if inventory.container.mpi_transport == "sshd":
            _wait_listening(connection, inventory.container.sshd_port)

    return _errors(pair.each(start))


def _wait_listening(connection: Node, port: int, seconds: float = 15.0) -> None:
    """Wait until something listens on port (the container's sshd); SparkpairError after seconds."""
    script = Shell("i=0; while [ $i -lt {} ]; do ss -Htln \"sport = :{}\" | grep -q . && exit 0; "
                   "sleep 0.2; i=$((i+1)); done; exit 1", int(seconds * 5), port)
    if not connection.run(script, timeout=seconds + 10).ok:
        raise SparkpairError(f"the container's sshd did not listen on port {port} within {seconds:g} s",
                             node=connection.name)


def remove_short_lived(pair: Pair, name: str) -> str:
    """Remove `<name>-doctor` and ~/.sparkpair/doctor on both nodes (idempotent). Errors, or ""."""
    def remove(connection: Node) -> None:
        containers.remove(connection, name)
        connection.check(Shell("rm -rf {}", f"{connection.home}/{DOCTOR_DIR}"))

    return _errors(pair.each(remove))


def _errors(result: PairResult[None]) -> str:
    return "; ".join(result.error_lines())
