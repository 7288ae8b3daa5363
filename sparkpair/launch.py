"""sparkpair launch: from an inventory to an OpenAI-compatible endpoint on the head node.

Preflight (doctor's launch-critical checks) -> engine config on the nodes -> containers on both
nodes -> models on both nodes -> mpirun in the head container -> readiness. A failure names its
cause from the ranks' logs and tears the partial launch down unless --keep-on-failure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sparkpair import containers, diagnose, hftoken, lifecycle, modelsync, recipe, render, report, steps
from sparkpair.checks import Finding, Status, selected
from sparkpair.checks.catalog import is_launch_critical
from sparkpair.checks.doctor import doctor
from sparkpair.errors import Interrupted, SparkpairError, UsageError
from sparkpair.inventory import Inventory
from sparkpair.profiles import Profile
from sparkpair.readiness import Readiness, wait_ready
from sparkpair.transport import NodeConnection, Pair, Shell

JOURNAL = "launch"
SINGLE_NODE_CHECKS = ("reach.ssh", "reach.sudo", "platform.gpu", "docker", "ports.serving", "models.writable",
                      "models.disk", "memory")


@dataclass(frozen=True)
class LaunchOptions:
    profile: str
    dry_run: bool = False
    timeout: float = 1800.0
    wait: bool = True
    model_source: str = "hub"
    replace: bool = False
    keep_on_failure: bool = False
    node: str | None = None


def rank_nodes(inventory: Inventory, profile: Profile, node: str | None) -> list[str]:
    """Node names in rank order: both for TP=2 (head first), the chosen one for TP=1."""
    if profile.is_pair:
        if node is not None:
            raise UsageError(f"--node: this profile runs on both nodes (tp_size {profile.tp_size})")
        return [n.name for n in inventory.nodes]
    if node is not None and node not in [n.name for n in inventory.nodes]:
        raise UsageError(f"--node: no node {node!r}; the inventory has {', '.join(n.name for n in inventory.nodes)}")
    return [node or inventory.head.name]


def preflight(pair: Pair, inventory: Inventory, options: LaunchOptions, nodes: list[str]) -> list[Finding]:
    """The launch-critical doctor findings that FAIL (empty: go)."""
    findings = doctor(pair, inventory, options.profile, serving_node=nodes[0])
    relevant = [f for f in findings if f.status is Status.FAIL and is_launch_critical(f.check)]
    if len(nodes) == 1:
        relevant = [f for f in relevant if f.node == nodes[0] and selected(f.check, set(SINGLE_NODE_CHECKS))]
    return relevant


def config_changes(pair: Pair, files: list[render.RenderedFile], nodes: list[str]) -> list[steps.Change]:
    """Rendered engine files that differ from what each node holds in ~/.sparkpair/config (nodes at once)."""
    def node_changes(connection: NodeConnection) -> list[steps.Change]:
        changes = []
        for item in files:
            current = connection.read(f"{connection.home}/{recipe.NODE_CONFIG_DIR}/{item.path}")
            change = steps.write_change(connection.name, f"~/{recipe.NODE_CONFIG_DIR}/{item.path}",
                                        current.decode() if current is not None else None, item.content,
                                        mode=item.mode)
            changes += [change] if change else []
        return changes

    results = pair.each(node_changes, names=nodes)
    for name in nodes:
        if isinstance(results[name], BaseException):
            raise results[name]
    return [change for name in nodes for change in results[name]]


@dataclass
class Stage:
    """The launch step under way, named in the report when Ctrl-C stops it."""

    now: str = "writing the engine configuration"


def launch(pair: Pair, inventory: Inventory, options: LaunchOptions) -> int:
    """The whole launch; the exit status."""
    profile = inventory.profile(options.profile)
    nodes = rank_nodes(inventory, profile, options.node)
    files = render.node_config_files(inventory, options.profile)  # a bad profile fails here, before any node is touched
    start = time.monotonic()
    failures = preflight(pair, inventory, options, nodes)
    if failures:
        report.findings(failures)
        report.error_lines([f"preflight: {len(failures)} launch-critical check(s) FAIL; nothing was started"])
        return 1
    changes = config_changes(pair, files, nodes)
    if options.dry_run:
        return _show_plan(pair, inventory, options, nodes, changes)
    stage = Stage()
    try:
        return _apply(pair, inventory, options, profile, nodes, changes, start, stage)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted while {stage.now}; {_holdings(pair, inventory, nodes)}; every file sparkpair "
                          f"wrote is whole. Continue with: sparkpair launch {options.profile}; undo with: "
                          "sparkpair stop") from None


def _apply(pair: Pair, inventory: Inventory, options: LaunchOptions, profile: Profile, nodes: list[str],
           changes: list[steps.Change], start: float, stage: Stage) -> int:
    """Everything launch changes, in order; stage.now names the step under way (for Ctrl-C)."""
    for name in nodes:
        pair.nodes[name].check(Shell("mkdir -p -m 700 {}", f"{pair.nodes[name].home}/{recipe.NODE_CONFIG_DIR}"))
    if changes:
        outcomes = steps.apply_changes(pair, changes, JOURNAL, progress=report.progress)
        if not all(outcome.ok for outcome in outcomes.values()):
            report.outcomes(outcomes)
            if any(outcome.interrupted for outcome in outcomes.values()):
                raise KeyboardInterrupt
            return 1
    stage.now = "placing the HF token"
    _place_token(pair, nodes)
    stage.now = "starting the engine containers"
    _start_containers(pair, inventory, options, nodes)
    argv = recipe.mpirun_argv(inventory, profile)
    if lifecycle.engine_running(pair.nodes[nodes[0]], inventory):
        state = lifecycle.read_state(pair.head) or {}
        if not changes and state.get("command") == recipe.shell_line(argv) and state.get("nodes") == nodes:
            report.line("the engine is already running with this configuration")
            stage.now = "waiting for the engine to become ready"
            return _finish(pair, inventory, profile, nodes, options, start)
        stage.now = "stopping the engine that ran the old configuration"
        report.progress(nodes[0], "configuration or serve command changed: stopping the running engine")
        lifecycle.stop_engine(pair, inventory, nodes)
    stage.now = "getting the models onto every node (a rerun resumes)"
    revisions = modelsync.ensure_models(pair, inventory, profile.repos, nodes, options.model_source,
                                        report.progress)
    head = pair.nodes[nodes[0]]
    stage.now = "starting the engine"
    report.progress(head.name, "starting: " + recipe.shell_line(argv))
    lifecycle.start_engine(head, inventory, argv)
    lifecycle.write_state(pair.head, {"profile": options.profile, "nodes": nodes, "started": time.time(),
                                      "command": recipe.shell_line(argv),
                                      "revisions": revisions, "transport": inventory.container.mpi_transport,
                                      "image_id": containers.image_id(head, inventory.container.image),
                                      "endpoint": f"http://{inventory.node(nodes[0]).host}:{inventory.server.port}/v1"})
    stage.now = "waiting for the engine to become ready"
    return _finish(pair, inventory, profile, nodes, options, start)


def _holdings(pair: Pair, inventory: Inventory, nodes: list[str]) -> str:
    """What each rank node holds now, in words (after Ctrl-C: best effort, never raises)."""
    name = inventory.container.name
    parts = []
    for index, node in enumerate(nodes):
        try:
            container = containers.find(pair.nodes[node], name)
            if container is None:
                parts.append(f"{node}: no engine container")
                continue
            engine = ""
            if index == 0 and container.status == "running":
                engine = ", engine running" if lifecycle.engine_running(pair.nodes[node], inventory) \
                    else ", engine not started"
            parts.append(f"{node}: engine container {name} {container.status}{engine}")
        except Exception as error:  # noqa: BLE001 (a report after Ctrl-C must not hide the interrupt)
            parts.append(f"{node}: state unknown ({type(error).__name__}; sparkpair status shows it)")
    return "; ".join(parts)


def _finish(pair: Pair, inventory: Inventory, profile: Profile, nodes: list[str], options: LaunchOptions,
            start: float) -> int:
    head = pair.nodes[nodes[0]]
    endpoint = f"http://{inventory.node(nodes[0]).host}:{inventory.server.port}/v1"
    if not options.wait:
        report.endpoint(endpoint, profile.target, ready=False)
        return 0
    result = _wait(head, inventory, profile, options)
    if result.ready:
        report.line(f"ready in {time.monotonic() - start:.1f} s")
        report.endpoint(endpoint, profile.target, ready=True)
        return 0
    _explain_failure(pair, inventory, nodes, result.detail)
    if options.keep_on_failure:
        report.note("left running for inspection (--keep-on-failure); sparkpair logs / sparkpair stop")
    else:
        for name, outcome in lifecycle.stop(pair, inventory).items():
            report.note(f"{name}: {outcome}")
    return 1


def _wait(head: NodeConnection, inventory: Inventory, profile: Profile, options: LaunchOptions) -> Readiness:
    return wait_ready(head, inventory.server.port, profile.target, options.timeout,
                      lambda: lifecycle.exit_code(head, inventory), lambda text: report.progress(head.name, text))


def _explain_failure(pair: Pair, inventory: Inventory, nodes: list[str], detail: str) -> None:
    head = pair.nodes[nodes[0]]
    report.error_lines([f"launch failed: {detail}"])
    texts = {}
    for rank, name in enumerate(nodes):
        texts[name] = lifecycle.rank_logs(head, inventory, rank if len(nodes) > 1 else None, 400)
    texts["mpirun"] = lifecycle.rank_logs(head, inventory, None, 400) if len(nodes) > 1 else ""
    report.log_tails({name: "\n".join(text.splitlines()[-20:]) for name, text in texts.items()})
    report.causes(diagnose.classify("\n".join(texts.values())))


def _place_token(pair: Pair, nodes: list[str]) -> None:
    """The operator's HF token, as a 0600 file on every rank node (never in argv or the environment)."""
    token = hftoken.find_token()
    for name in nodes:
        connection = pair.nodes[name]
        directory = f"{connection.home}/{recipe.NODE_SECRETS_DIR}"
        connection.check(Shell("mkdir -p -m 700 {} && chmod 700 {}", directory, directory))
        if token:
            connection.put(token + "\n", f"{directory}/hf_token", mode=0o600)


def _start_containers(pair: Pair, inventory: Inventory, options: LaunchOptions, nodes: list[str]) -> None:
    def start(connection: NodeConnection) -> str:
        return containers.ensure(connection, containers.node_spec(inventory, connection), options.replace)
    results = pair.each(start, names=nodes)
    for name, result in results.items():
        if isinstance(result, BaseException):
            raise result if isinstance(result, SparkpairError) else SparkpairError(str(result), node=name)
        report.progress(name, f"engine container {inventory.container.name}: {result}")


def _show_plan(pair: Pair, inventory: Inventory, options: LaunchOptions, nodes: list[str],
               changes: list[steps.Change]) -> int:
    report.plan(changes, [])
    for name in nodes:
        existing = containers.find(pair.nodes[name], inventory.container.name)
        state = "none" if existing is None else existing.status
        report.line(f"{name}: engine container {inventory.container.name} (now: {state}) from {inventory.container.image}")
    profile = inventory.profile(options.profile)
    report.line(f"models ({options.model_source}): {', '.join(profile.repos)} on {', '.join(nodes)}")
    report.line("serve: " + recipe.shell_line(recipe.mpirun_argv(inventory, profile)))
    return 0
