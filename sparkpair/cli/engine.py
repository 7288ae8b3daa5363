"""`sparkpair launch` (and its lock: `--locked`, `--lock PATH`), `status`, `logs`, `stop` and `unlock`."""

from __future__ import annotations

from pathlib import Path

import click

from sparkpair.cli.app import App, cli, pass_app
from sparkpair.cli.options import (
    Seconds,
    StallAfterOption,
    catalog_option,
    known_node,
    known_profile,
    nccl_tests_path,
    read_catalog,
    resolved_profile,
    runtime_option,
)

DIAGNOSE_TAIL = 2000  # lines per rank `logs --diagnose` reads by default


@cli.command("launch")
@click.argument("profile", required=False)
@runtime_option
@click.option("--dry-run", is_flag=True, help="Preflight and show what would change; start nothing.")
@click.option("--timeout", type=Seconds(1, 86400), default=1800.0, show_default=True,
              help="Seconds to wait for the server to become ready.")
@click.option("--no-wait", is_flag=True, help="Return once the engine is started.")
@click.option("--stall-after", cls=StallAfterOption, metavar="SECONDS|STAGE=SECONDS,...")
@click.option("--model-source", default="hub", show_default=True, metavar="hub|cached|local:PATH",
              help="hub: download on the head, copy to the worker; cached: use what the caches hold; "
                   "local:PATH: copy from a staged HF cache on the head (air-gapped).")
@click.option("--split-download", is_flag=True,
              help="With --model-source hub, when both nodes reach the hub (doctor's models.hub): each downloads "
                   "half the files, then they exchange them over the QSFP link.")
@click.option("--copy-transport", type=click.Choice(["tcp", "ssh"]), default="tcp", show_default=True,
              help="How models go between the nodes over the QSFP twins: tcp (raw streams bound to the twins, "
                   "peer-only, one-time secret, content verified) or ssh (encrypted, slower; docs/security.md).")
@click.option("--replace", is_flag=True, help="Replace an engine container whose spec differs.")
@click.option("--keep-on-failure", is_flag=True, help="Leave a failed launch running for inspection.")
@click.option("--node", metavar="NAME", help="For single-node profiles: the node to serve on (default: head).")
@click.option("--check-fabric", is_flag=True, help="Before loading the model, prove NCCL runs over RoCE on every "
                                                  "rank node's twins at full speed (doctor --deep's all_gather_perf); stop if not.")
@click.option("--nccl-tests", metavar="PATH", help="With --check-fabric: all_gather_perf (or its build directory) at "
                                                 "this path on every node, when the image has no nccl-tests.")
@click.option("--locked", is_flag=True, help="Refuse to start when anything the lock names differs (image, engine "
                                             "version, driver, kernel, firmware, MTU, netplan, environment, rendered "
                                             "files, model files): one line per difference. docs/lock.md.")
@click.option("--lock", "lock_path", type=click.Path(dir_okay=False, path_type=Path), metavar="PATH",
              help="The lock to check and write (default: sparkpair.lock beside the inventory).")
@catalog_option
@pass_app
def launch_cmd(app: App, profile: str | None, runtime: str | None, dry_run: bool, timeout: float, no_wait: bool,
               stall_after: str | None, model_source: str, split_download: bool, copy_transport: str, replace: bool,
               keep_on_failure: bool,
               node: str | None, check_fabric: bool, nccl_tests: str | None, locked: bool,
               lock_path: Path | None, catalog_file: Path | None) -> int:
    """Start PROFILE (default: server.profile) on its rank nodes (every node, or one) and wait until it answers; a
    successful launch writes the lock (--lock PATH), and the differences from the last one are warnings (--locked:
    refusals)."""
    from sparkpair import report
    from sparkpair.engine import lockflow
    from sparkpair.engine.launch import LaunchOptions, launch, plan_launch
    from sparkpair.engine.watch import limits_of, parse_stall_after
    from sparkpair.lockfile import store
    from sparkpair.report import lock as lock_report
    from sparkpair.runtimes import checked_view, rank_nodes, runtime_of

    if model_source not in ("hub", "cached") and not (model_source.startswith("local:/") and len(model_source) > 7):
        raise click.BadParameter("expected hub, cached or local:/ABSOLUTE/PATH", param_hint="--model-source")
    if split_download and model_source != "hub":
        raise click.BadParameter("only with --model-source hub (both nodes download from the hub)",
                                 param_hint="--split-download")
    inv = app.inventory
    if split_download and len(inv.nodes) > 2:  # the hub's files are shared between two nodes (docs/cluster.md)
        raise click.BadParameter(f"works on two nodes only; the inventory has {len(inv.nodes)} ({inv.topology}): "
                                 "launch without --split-download (the head downloads, copies fan out to every node)",
                                 param_hint="--split-download")
    # An unknown profile, a missing variant, ranks that do not fit the nodes or a bad --node: a usage error
    chosen = resolved_profile(inv, profile, runtime)
    rank_nodes(inv, chosen, node)
    checked_view(inv, chosen)  # a setting the engine does not know is refused before any node is asked
    try:  # the stages of the start of the runtime that will run
        limits = tuple(parse_stall_after(stall_after, limits_of(runtime_of(chosen))).items()) if stall_after else ()
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--stall-after") from None
    options = LaunchOptions(profile=known_profile(inv, profile), runtime=runtime, timeout=timeout, wait=not no_wait,
                            model_source=model_source, replace=replace, keep_on_failure=keep_on_failure, node=node,
                            stall_after=limits, check_fabric=check_fabric,
                            nccl_tests=nccl_tests_path(nccl_tests, "--check-fabric", check_fabric),
                            copy_transport=copy_transport, split_download=split_download,
                            catalog=read_catalog(catalog_file))
    lock_file = lock_path or store.default_path(app.inventory_path)
    previous = store.read_lock(lock_file)  # a bad lock is refused before any node is asked
    if locked and previous is None:
        raise click.BadParameter(f"no lock at {lock_file}: launch once without --locked to write one, or name it "
                                 "with --lock PATH", param_hint="--locked")
    inventory_file, written = Path(app.inventory_path), None
    with app.pair() as pair:
        pair.connect(changing=not dry_run)
        with app.locked(pair, f"launch {options.profile}", dry_run=dry_run):
            differences = lockflow.drift(pair, inv, options, previous, inventory_file) if previous else []
            if locked and differences:
                lock_report.lock_refused(differences, lock_file)
                return 1
            lock_report.lock_warnings(differences, lock_file)
            if dry_run:
                plan = plan_launch(pair, inv, options)
                report.launch_plan(plan)
                return 1 if plan.preflight else 0
            result = launch(pair, inv, options, report.event)
            report.launch_result(result, len(inv.nodes))
            if result.ok:
                written = lockflow.launch_lock(pair, inv, options, inventory_file)
    if written is not None:
        store.write_lock(lock_file, written)
        lock_report.lock_written(lock_file, list(written.nodes))
    return 0 if result.ok else 1


@cli.command("status")
@click.option("--json", "as_json", is_flag=True, help="Status as JSON.")
@pass_app
def status_cmd(app: App, as_json: bool) -> int:
    """Containers and ranks on every rank node, health, model, uptime, requests and draft acceptance."""
    from dataclasses import asdict

    from sparkpair import report
    from sparkpair.engine import lifecycle

    with app.pair() as pair:
        pair.connect()
        result = lifecycle.status(pair, app.inventory)
    if as_json:
        report.emit_json(asdict(result))
    else:
        report.status(result)
    return 0 if result.state in ("serving", "stopped") else 1


@cli.command("logs")
@click.option("--node", metavar="NAME", help="Only this node's rank.")
@click.option("--tail", type=click.IntRange(1, 100000), default=100, show_default=True, help="Lines per rank.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until Ctrl-C.")
@click.option("--diagnose", "classify", is_flag=True,
              help=f"Name why the start failed from the ranks' last {DIAGNOSE_TAIL} lines (or --tail, if more) "
                   "instead of printing them; exit 1 when a failure is found.")
@pass_app
def logs_cmd(app: App, node: str | None, tail: int, follow: bool, classify: bool) -> int:
    """The ranks' output, kept in log files inside the head container."""
    from sparkpair import report
    from sparkpair.engine import lifecycle

    if follow and classify:
        raise click.UsageError("--diagnose reads the logs once; it cannot be combined with --follow")
    known_node(app.inventory, node)   # a typo is refused before any node is asked
    with app.pair() as pair:
        if follow:
            lifecycle.follow_logs(pair, app.inventory, node, tail, report.line)
        elif classify:
            from sparkpair.engine import diagnose, memguard
            from sparkpair.report import diagnose as shown

            state, view, _ = lifecycle.launched(pair, app.inventory)
            guard = memguard.stop_lines(pair, lifecycle.launch_nodes(view, state), state.started) if state else []
            text = "\n".join([*guard, *(item.text for item in lifecycle.logs(pair, app.inventory, node,
                                                                             max(tail, DIAGNOSE_TAIL)))])
            result = diagnose.examine(text)
            shown.examination(result)
            return 1 if result.findings else 0
        else:
            report.rank_logs(lifecycle.logs(pair, app.inventory, node, tail))
    return 0


@cli.command("stop")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@pass_app
def stop_cmd(app: App, dry_run: bool) -> int:
    """Stop the engine on every node (idempotent); models stay in the caches."""
    from sparkpair import report
    from sparkpair.engine import containers, lifecycle

    with app.pair() as pair:
        pair.connect(changing=not dry_run)
        if dry_run:
            names = lifecycle.engine_container_names(app.inventory)
            for name, connection in pair.nodes.items():
                found = [item for item in (containers.find(connection, each) for each in names) if item]
                report.line(f"{name}: " + ("; ".join(f"would remove {item.name} ({item.status})" for item in found)
                                           or f"no {' or '.join(names)} container"))
            return 0
        with app.locked(pair, "stop"):
            for name, outcome in lifecycle.stop(pair, app.inventory).items():
                report.line(f"{name}: {outcome}")
    return 0


@cli.command("unlock")
@click.option("--dry-run", is_flag=True, help="Say whose lock would be removed; remove nothing.")
@pass_app
def unlock_cmd(app: App, dry_run: bool) -> int:
    """Remove the pair's lock left by a sparkpair run that is gone (it names the holder)."""
    from sparkpair import report
    from sparkpair.transport import lock

    with app.pair() as pair:
        if dry_run:
            held = lock.held_by(pair.head)
            report.line(f"{pair.head.name}: " + ("no lock; nothing to remove" if held == "no lock" else
                                                 f"would remove {held}; nothing was removed (--dry-run)"))
            return 0
        report.line(f"{pair.head.name}: {lock.force_unlock(pair.head)}")
    return 0
