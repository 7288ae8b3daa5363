"""sparkpair launch: from an inventory to an OpenAI-compatible endpoint on the head node.

Preflight (doctor's launch-critical checks) -> engine config on the nodes -> containers on both nodes -> models on
both nodes -> the runtime's start commands (TensorRT-LLM: mpirun in the head container; vLLM: `vllm serve` on every
rank node, or a Ray cluster first) -> readiness. A failure names its cause from the ranks' logs (a stall by the watch's
own clock) and tears the partial launch down unless --keep-on-failure. Progress goes to a callback; the caller gets a
`LaunchResult` (`plan_launch`'s `LaunchPlan`: the dry run). The profile is resolved on its runtime once (`resolve`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from sparkpair import apply, paths, probes, registry, render
from sparkpair.checks import Facts, Finding, Status, selected
from sparkpair.checks.catalog import is_launch_critical
from sparkpair.checks.knowncatalog import Catalog
from sparkpair.engine import containers, credentials, diagnose, fabric, lifecycle, memguard, modelsync, stages, watch
from sparkpair.engine.doctor import examine
from sparkpair.engine.readiness import Readiness, wait_ready
from sparkpair.engine.state import LaunchState, read_state, write_state
from sparkpair.errors import Interrupted, SparkpairError, UsageError
from sparkpair.inventory import Inventory, hftoken
from sparkpair.inventory.profiles import Profile, split_note
from sparkpair.probes import models
from sparkpair.progress import Event, Progress
from sparkpair.render import recipe
from sparkpair.runtimes import Runtime, checked_view, rank_nodes, runtime_of
from sparkpair.transport import Node, Pair, Shell

JOURNAL = "launch"
SINGLE_NODE_CHECKS = ("reach.ssh", "reach.sudo", "platform.gpu", "docker", "ports.serving", "models.writable",
                      "models.disk", "memory", "known")


@dataclass(frozen=True, kw_only=True)
class LaunchOptions:
    """What the operator asked of a launch (the CLI's options)."""

    profile: str
    runtime: str | None = None          # None: the profile's own (--runtime)
    timeout: float = 1800.0
    wait: bool = True
    model_source: str = "hub"
    replace: bool = False
    keep_on_failure: bool = False
    node: str | None = None
    check_fabric: bool = False          # prove NCCL over RoCE (doctor --deep's NCCL job) before loading the model
    nccl_tests: str | None = None       # all_gather_perf on the nodes, when the image has none
    stall_after: tuple[tuple[str, float], ...] = ()  # stage -> seconds without progress (watch.limits_of)
    copy_transport: str = "tcp"         # how models go to the worker: modelcopy.TRANSPORTS
    split_download: bool = False        # both nodes download half each when both reach the hub
    catalog: Catalog | None = None      # the known-bad catalog the preflight judges by (None: sparkpair's own)


@dataclass(frozen=True)
class LaunchFailure:
    """Why the engine did not become ready: what was seen, the ranks' last lines, the recognised causes."""

    detail: str
    log_tails: dict[str, str] = field(default_factory=dict)
    causes: list[diagnose.Diagnosis] = field(default_factory=list)  # most likely first


@dataclass
class LaunchResult:
    """How a launch ended."""

    ok: bool = False
    preflight: list[Finding] = field(default_factory=list)  # the launch-critical FAILs that stopped it
    fabric: list[Finding] = field(default_factory=list)     # --check-fabric: what stopped it before any model loaded
    outcomes: dict[str, apply.NodeOutcome] = field(default_factory=dict)  # set when writing the config failed
    endpoint: str = ""
    model: str = ""
    ready: bool = False
    already_running: bool = False
    seconds: float = 0.0
    failure: LaunchFailure | None = None
    kept: bool = False                                       # --keep-on-failure left it running
    teardown: dict[str, str] = field(default_factory=dict)   # what stopping the failed launch did, per node
    logs_kept: str = ""                                      # where the failed launch's rank output was kept


@dataclass(frozen=True)
class LaunchPlan:
    """What a launch would do (the dry run): config changes, containers, models, the serve command."""

    nodes: list[str]
    changes: list[apply.Change]
    containers: dict[str, str]      # node -> the engine container's state now ("none" when absent)
    image: str
    repos: list[str]
    model_source: str
    serve: str
    preflight: list[Finding] = field(default_factory=list)
    runtime: str = registry.DEFAULT
    split: str = ""   # the tensor and pipeline parallel sizes, and how they were reached (profiles.split_note)


def resolve(inventory: Inventory, options: LaunchOptions) -> tuple[Inventory, Profile]:
    """The profile on the runtime asked for, and the inventory as that runtime sees it; a profile without that
    runtime's variant, or a setting the engine does not know, is refused before any node is asked."""
    try:
        profile = inventory.profile(options.profile, options.runtime)
    except KeyError as error:
        raise UsageError(str(error.args[0]), hint=f"sparkpair launch {options.profile} without --runtime") from None
    return checked_view(inventory, profile), profile


def command_line(starts: list[recipe.Start]) -> str:
    """The start commands as the launch state records them: one shell line, or each node's line."""
    if len(starts) == 1:
        return recipe.shell_line(starts[0].argv)
    return "\n".join(f"[{start.node}] {recipe.shell_line(start.argv)}" for start in starts)


def examined(pair: Pair, inventory: Inventory, profile: Profile, nodes: list[str],
             catalog: Catalog | None = None) -> tuple[Facts, list[Finding]]:
    """The facts doctor gathered (each node's NCCL settings come from them), and the launch-critical FAILs."""
    facts, findings = examine(pair, inventory, profile, serving_node=nodes[0], catalog=catalog)
    relevant = [f for f in findings if f.status is Status.FAIL and is_launch_critical(f.check)]
    if len(nodes) == 1:
        relevant = [f for f in relevant if f.node == nodes[0] and selected(f.check, set(SINGLE_NODE_CHECKS))]
    return facts, relevant


def config_changes(pair: Pair, files: dict[str, list[render.RenderedFile]], nodes: list[str]) -> list[apply.Change]:
    """Rendered engine files (node -> its files) that differ from what each node holds in ~/.sparkpair/config."""
    def node_changes(connection: Node) -> list[apply.Change]:
        changes = []
        for item in files[connection.name]:
            current = connection.read(paths.under_home(fabric.config_path(item), connection.home))
            change = apply.write_change(connection.name, fabric.config_path(item),
                                        current.decode() if current is not None else None, item.content,
                                        mode=item.mode)
            changes += [change] if change else []
        return changes

    found = pair.each(node_changes, names=nodes).raise_failures()
    return [change for name in nodes for change in found[name]]


def plan_launch(pair: Pair, inventory: Inventory, options: LaunchOptions) -> LaunchPlan:
    """Preflight and what a launch would change; starts nothing."""
    inventory, profile = resolve(inventory, options)  # a bad profile fails here, before any node is asked
    nodes = rank_nodes(inventory, profile, options.node)
    facts, failures = examined(pair, inventory, profile, nodes, options.catalog)
    files = fabric.node_files(inventory, profile, fabric.node_fabrics(facts, nodes))
    states = {name: getattr(containers.find(pair.nodes[name], inventory.container.name), "status", "none")
              for name in nodes}
    return LaunchPlan(nodes, [] if failures else config_changes(pair, files, nodes), states, inventory.container.image,
                      profile.repos, options.model_source,
                      command_line(runtime_of(profile).starts(inventory, profile, nodes)), failures, profile.runtime,
                      split_note(profile, inventory.models, len(inventory.nodes)))


@dataclass
class _Run:
    """One launch under way: what it needs to say where it is when Ctrl-C stops it."""

    pair: Pair
    inventory: Inventory
    options: LaunchOptions
    profile: Profile
    runtime: Runtime
    nodes: list[str]
    progress: Progress
    fabrics: dict[str, recipe.NodeFabric | None] = field(default_factory=dict)
    facts: Facts | None = None  # the preflight's, reused where still true (the pair lock keeps others out)
    proof: fabric.FabricProof | None = None
    start: float = field(default_factory=time.monotonic)
    started_at: float = field(default_factory=time.time)  # the memory guard's stops since then are this launch's
    stage: str = "writing the engine configuration"
    dirs: dict[str, list[str]] = field(default_factory=dict)   # per node: the directories its config files need
    stalled_s: float | None = None   # how long the watch saw the start without progress, when it stopped it

    def say(self, node: str, text: str) -> None:
        self.progress(Event(node, text))

    def interrupted(self) -> Interrupted:
        return Interrupted(f"interrupted while {self.stage}; {_holdings(self)}; every file sparkpair wrote is whole. "
                           f"Continue with: sparkpair launch {self.options.profile}; undo with: sparkpair stop")


def launch(pair: Pair, inventory: Inventory, options: LaunchOptions, progress: Progress) -> LaunchResult:
    """The whole launch, reporting progress as it goes."""
    inventory, profile = resolve(inventory, options)  # a bad profile fails here, before any node is touched
    nodes = rank_nodes(inventory, profile, options.node)
    run = _Run(pair, inventory, options, profile, runtime_of(profile), nodes, progress)
    progress(Event("", "split: " + split_note(profile, inventory.models, len(inventory.nodes))))
    facts, failures = examined(pair, inventory, profile, nodes, options.catalog)
    if failures:
        return LaunchResult(preflight=failures)
    run.fabrics = fabric.node_fabrics(facts, nodes)
    run.facts = facts
    if options.check_fabric:
        progress(Event("", "proving the fabric: all_gather_perf across the ranks with NCCL_DEBUG=INFO"))
        run.proof = fabric.prove(pair, facts, options.nccl_tests)
        if not run.proof.ok:
            return LaunchResult(fabric=run.proof.failures)
        progress(Event("", "fabric: " + next(f.detail for f in run.proof.findings if f.check == "deep.nccl"), "result"))
    files = fabric.node_files(inventory, profile, run.fabrics)
    changes = config_changes(pair, files, nodes)
    run.dirs = {name: fabric.config_dirs(files[name]) for name in nodes}
    try:
        return _apply(run, changes)
    except KeyboardInterrupt:
        raise run.interrupted() from None


def _apply(run: _Run, changes: list[apply.Change]) -> LaunchResult:
    """Everything launch changes, in order; run.stage names the step under way (for Ctrl-C)."""
    pair, inventory, nodes = run.pair, run.inventory, run.nodes
    pair.each(lambda connection: _private_dirs(connection, run.dirs.get(connection.name, [])),
              names=nodes).raise_failures()
    if changes:
        outcomes = apply.apply_changes(pair, changes, JOURNAL, progress=run.progress)
        if any(outcome.interrupted for outcome in outcomes.values()):
            raise run.interrupted()
        if not all(outcome.ok for outcome in outcomes.values()):
            return LaunchResult(outcomes=outcomes)
    run.stage = "placing the HF token and the engine's secrets"
    _place_token(pair, nodes)
    credentials.place(pair, nodes, credentials.values(run.runtime, run.profile))
    run.stage = "starting the engine containers"
    started = _start_containers(run)
    run.stage = "starting the memory guard"
    memguard.start_all(pair, inventory, nodes, run.progress)
    starts = run.runtime.starts(inventory, run.profile, nodes)
    command = command_line(starts)
    fresh = all(action in ("started", "replaced") for action in started.values())  # no engine runs in a new one
    if not fresh and lifecycle.engine_running(pair.nodes[nodes[0]], inventory):
        state = read_state(pair.head)
        if not changes and state is not None and state.command == command and state.nodes == nodes:
            run.progress(Event("", "the engine is already running with this configuration", "result"))
            run.stage = "waiting for the engine to become ready"
            return replace(_finish(run), already_running=True)
        run.stage = "stopping the engine that ran the old configuration"
        run.say(nodes[0], "configuration or serve command changed: stopping the running engine")
        lifecycle.stop_engine(pair, inventory, run.runtime, nodes)
    run.stage = "getting the models onto every node (a rerun resumes)"
    revisions = modelsync.ensure_models(pair, inventory, run.profile.repos, nodes, run.options.model_source,
                                        run.progress, modelsync.ModelOptions(run.options.model_source,
                                                                             run.options.copy_transport,
                                                                             run.options.split_download))
    head = pair.nodes[nodes[0]]
    run.stage = "starting the engine"
    for start in starts:
        run.say(start.node, "starting: " + recipe.shell_line(start.argv))
        lifecycle.start(pair.nodes[start.node], inventory, start)
        if start.until:
            try:
                lifecycle.wait_until(pair.nodes[start.node], inventory, start)
            except SparkpairError as error:  # a step of the start did not happen: fail as a start that stops
                return _failed(run, LaunchResult(endpoint=_endpoint(run), model=run.profile.target), error.lines()[0])
            run.say(start.node, start.until_means)
    write_state(pair.head, LaunchState(
        profile=run.options.profile, nodes=nodes, started=time.time(), command=command,
        endpoint=_endpoint(run), revisions=revisions, transport=inventory.container.mpi_transport,
        image_id=containers.image_id(head, inventory.container.image), fabric=fabric.record(run.fabrics, run.proof),
        runtime=run.runtime.name))
    run.stage = "waiting for the engine to become ready"
    return _finish(run)


def _endpoint(run: _Run) -> str:
    return f"http://{run.inventory.node(run.nodes[0]).host}:{run.inventory.server.port}{run.runtime.api.base}"


def _holdings(run: _Run) -> str:
    """What each rank node holds now, in words (after Ctrl-C: best effort, never raises)."""
    name = run.inventory.container.name
    parts = []
    for index, node in enumerate(run.nodes):
        try:
            container = containers.find(run.pair.nodes[node], name)
            if container is None:
                parts.append(f"{node}: no engine container")
                continue
            engine = ""
            if index == 0 and container.running:
                engine = ", engine running" if lifecycle.engine_running(run.pair.nodes[node], run.inventory) \
                    else ", engine not started"
            parts.append(f"{node}: engine container {name} {container.status}{engine}")
        except Exception as error:  # noqa: BLE001 (a report after Ctrl-C must not hide the interrupt)
            parts.append(f"{node}: state unknown ({type(error).__name__}; sparkpair status shows it)")
    return "; ".join(parts)


def _finish(run: _Run) -> LaunchResult:
    result = LaunchResult(endpoint=_endpoint(run), model=run.profile.target)
    if not run.options.wait:
        result.ok = True
        return result
    head = run.pair.nodes[run.nodes[0]]
    readiness = _wait(head, run)
    result.seconds = time.monotonic() - run.start
    if readiness.ready:
        result.ok = result.ready = True
        return result
    return _failed(run, result, readiness.detail)


def _failed(run: _Run, result: LaunchResult, detail: str) -> LaunchResult:
    """result as a failed start: why (detail, the ranks' last lines and their causes), then the partial launch
    kept (--keep-on-failure) or torn down with its output saved."""
    result.failure = _explain_failure(run, detail)
    if run.options.keep_on_failure:
        result.kept = True
    else:
        kept = lifecycle.save_logs(run.pair, run.inventory, run.nodes)
        result.logs_kept = "the launch's output is kept for sparkpair bundle: " + "; ".join(
            f"{name}: {where}" for name, where in kept.items())
        result.teardown = lifecycle.stop(run.pair, run.inventory)
    return result


def _wait(head: Node, run: _Run) -> Readiness:
    """Readiness, with the watchdog reporting each rank's progress and ending the wait when the start stalls."""
    watchdog = _watchdog(run)

    def stalled() -> str | None:
        return stall.detail() if (stall := watchdog.poll()) else None

    starts = run.runtime.starts(run.inventory, run.profile, run.nodes)
    readiness = wait_ready(head, run.inventory.server.port, run.profile.target, run.options.timeout,
                           lambda: lifecycle.first_exit(run.pair, run.inventory, starts),
                           lambda text: run.say(head.name, text), run.runtime.watch, watch=stalled, api=run.runtime.api,
                           headers=credentials.api_headers(run.runtime, run.profile))
    watchdog.finish("ready" if readiness.ready else "stalled" if readiness.stalled else "stopped waiting")
    run.stalled_s = watchdog.stall.seconds if readiness.stalled and watchdog.stall else None
    return readiness


def _watchdog(run: _Run) -> watch.Watchdog:
    """The watchdog for this start: each rank's output files, and what each rank holds once loaded (from the
    preflight's manifests where they were complete, else asked now)."""
    asked = [models.manifest(run.inventory.container.hf_cache, repo) for repo in run.profile.repos]
    known = run.facts.nodes if run.facts is not None else {}
    complete = {name: known[name] for name in run.nodes if name in known and all(
        getattr(known[name].value(probe), "complete", False) for probe in asked)}
    others = [name for name in run.nodes if name not in complete]
    found = {**complete, **(run.pair.each(lambda connection: probes.gather(connection, asked), names=others).values
                            if others else {})}
    expected = {}
    for name, facts in found.items():
        target = facts.value(asked[0])
        draft = facts.value(asked[1]) if len(asked) > 1 else None
        expected[name] = watch.expected_bytes(target, draft, run.profile.ranks) if target else 0
    files = [run.runtime.rank_log_paths(index if len(run.nodes) > 1 else None) for index in range(len(run.nodes))]
    return watch.Watchdog(run.pair, run.inventory.container.name, run.nodes, recipe.HF_HOME, files, expected,
                          dict(run.options.stall_after), run.progress, run.runtime,
                          floor=run.inventory.memory_guard.floor_gib << 30)


def _explain_failure(run: _Run, detail: str) -> LaunchFailure:
    head = run.pair.nodes[run.nodes[0]]
    texts = {}
    for rank, name in enumerate(run.nodes):
        texts[name] = lifecycle.rank_logs(run.pair.nodes[name], run.inventory, run.runtime,
                                          rank if len(run.nodes) > 1 else None, 400)
    launcher = run.runtime.launcher_log(len(run.nodes))
    texts["mpirun"] = lifecycle.tail_files(head, run.inventory, [launcher], 400) if launcher else ""
    tails = {name: "\n".join(stages.clean_lines(text)[-20:]) for name, text in texts.items()}  # a redrawn bar: once
    guard = memguard.stop_lines(run.pair, run.nodes, run.started_at) + memguard.own_lines(detail)
    return LaunchFailure(detail, tails, diagnose.classify("\n".join([*guard, *texts.values()]), run.runtime, run.stalled_s))


def _private_dirs(connection: Node, config_dirs: list[str]) -> None:
    """~/.sparkpair/config and ~/.sparkpair/secrets on a node, both 0700 (the secrets one made so even if it
    was there), and the directories under config that the runtime's files need, in one round trip."""
    dirs = [paths.under_home(directory, connection.home) for directory in (paths.CONFIG_DIR, paths.SECRETS_DIR, *config_dirs)]
    connection.check(Shell("mkdir -p -m 700 " + " ".join(["{}"] * len(dirs)) + " && chmod 700 {}", *dirs, dirs[1]))


def _place_token(pair: Pair, nodes: list[str]) -> None:
    """The operator's HF token, as a 0600 file in every rank node's ~/.sparkpair/secrets (made by
    _private_dirs first; never in argv or the environment)."""
    token = hftoken.find_token()
    if not token:
        return

    def place(connection: Node) -> None:
        connection.put(token + "\n", f"{paths.under_home(paths.SECRETS_DIR, connection.home)}/hf_token", mode=0o600)

    pair.each(place, names=nodes).raise_failures()


def _start_containers(run: _Run) -> dict[str, str]:
    """Each rank node's engine container as the spec says; what was done on each (started, reused, replaced)."""
    def start(connection: Node) -> str:
        known = run.facts.nodes.get(connection.name) if run.facts is not None else None
        spec = containers.node_spec(run.inventory, run.runtime, connection, run.fabrics.get(connection.name), known)
        return containers.ensure(connection, spec, run.options.replace, known)
    started = run.pair.each(start, names=run.nodes).raise_failures()
    for name, outcome in started.values.items():
        run.say(name, f"engine container {run.inventory.container.name}: {outcome}")
    return {name: outcome.split(" ")[0] for name, outcome in started.values.items()}
