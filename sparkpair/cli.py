"""The `sparkpair` command line: a thin click layer over the library.

Only click is imported at start-up (so `--help` stays fast); each command imports what it needs.
Every expected failure ends as one-line errors and an exit code: 0 ok, 1 failure, 2 bad input
or usage, 130 interrupted. Never a traceback: unexpected errors go to a debug log.
"""

from __future__ import annotations

import enum
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import click


class ExitStatus(enum.IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    INTERRUPTED = 130


class App:
    """What every command shares: where the inventory is, and how chatty to be."""

    def __init__(self, inventory_path: str, verbose: int) -> None:
        self.inventory_path = inventory_path
        self.verbose = verbose
        self._inventory: Any = None

    @property
    def inventory(self) -> Any:
        if self._inventory is None:
            from sparkpair.inventory import read_inventory

            self._inventory = read_inventory(self.inventory_path)
        return self._inventory

    def locked(self, pair: Any, command: str, dry_run: bool = False) -> Any:
        """The pair's lock on the head (no lock for a dry run, which changes nothing)."""
        import contextlib

        from sparkpair import lock, report

        return contextlib.nullcontext() if dry_run else lock.held(pair.head, command, report.warning)

    def pair(self, **options: Any) -> Any:
        """Connections to both nodes (opened lazily); `-vv` traces every remote command."""
        from sparkpair import report
        from sparkpair.transport import Pair

        trace = (lambda node, text: report.note(f"{node}$ {text}")) if self.verbose >= 2 else None
        return Pair(self.inventory, trace=trace, **options)


pass_app = click.make_pass_decorator(App)


class Seconds(click.FloatRange):
    """A number of seconds within a range (click's FloatRange lets nan through every bound)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if number != number:
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return number


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-i", "--inventory", "inventory_path", envvar="SPARKPAIR_INVENTORY", default="inventory.yaml",
              show_default=True, metavar="PATH", help="Inventory file (also $SPARKPAIR_INVENTORY).")
@click.option("-v", "--verbose", count=True, help="More detail (repeat for more).")
@click.version_option(package_name="sparkpair", prog_name="sparkpair")
@click.pass_context
def cli(ctx: click.Context, inventory_path: str, verbose: int) -> None:
    """Run one model across two DGX Sparks cabled back-to-back, and say what is wrong when it fails."""
    ctx.obj = App(inventory_path, verbose)


@cli.group()
def inventory() -> None:
    """Validate, show or describe the inventory (no network)."""


@inventory.command("check")
@pass_app
def inventory_check(app: App) -> None:
    """Validate the inventory and render everything from it, without touching a node."""
    from sparkpair import render, report

    inv = app.inventory
    files = [f for name in inv.profiles for f in render.render_all(inv, name, app.inventory_path)]
    report.inventory_ok(app.inventory_path, {"nodes": [f"{inv.head.name} (head)", inv.worker.name],
                                             "profile": inv.server.profile, "files": len(files)})


@inventory.command("show")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of YAML.")
@pass_app
def inventory_show(app: App, as_json: bool) -> None:
    """Print the inventory with every default filled in and every profile resolved."""
    import yaml

    from sparkpair import report

    inv = app.inventory
    data = inv.model_dump(mode="json")
    data["models"] = {name: profile.model_dump(mode="json") for name, profile in inv.profiles.items()}
    if as_json:
        report.emit_json(data)
    else:
        report.emit_text(yaml.safe_dump(data, sort_keys=False))


@inventory.command("schema")
def inventory_schema() -> None:
    """Print the inventory's JSON Schema (for editors)."""
    from sparkpair import report
    from sparkpair.inventory import Inventory

    report.emit_json(Inventory.model_json_schema())


@cli.command("render")
@click.argument("profile", required=False)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write the files into.")
@pass_app
def render_cmd(app: App, profile: str | None, out_dir: Path) -> None:
    """Write every file sparkpair would put on the nodes for PROFILE, for review."""
    from sparkpair import render, report

    inv = app.inventory
    name = _known_profile(inv, profile)
    files = render.render_all(inv, name, app.inventory_path)
    report.written_files(out_dir, render.write_files(files, out_dir))


@cli.command("setup-network")
@click.option("--dry-run", is_flag=True, help="Show the plan and diffs; change nothing.")
@click.option("-y", "--yes", is_flag=True, help="Apply without asking.")
@click.option("--restore", is_flag=True, help="Return both nodes to the state before the last apply.")
@click.option("--skip-ssh", is_flag=True, help="Only the network; leave SSH trust between the nodes alone.")
@click.option("--replace", is_flag=True, help="Take over QSFP stanzas from other netplan files (backed up).")
@click.option("--accept-new-host-keys", is_flag=True, help="Record unknown host keys of the nodes (first contact).")
@pass_app
def setup_network_cmd(app: App, dry_run: bool, yes: bool, restore: bool, skip_ssh: bool, replace: bool,
                      accept_new_host_keys: bool) -> int:
    """Address the QSFP twins with netplan (MTU included), exchange SSH keys, verify both ways."""
    from sparkpair.setup_network import Options, setup_network

    if restore and dry_run:
        raise click.UsageError("--restore changes both nodes; it cannot be combined with --dry-run")
    options = Options(dry_run=dry_run, yes=yes, restore=restore, skip_ssh=skip_ssh, replace=replace)
    with app.pair(accept_new_host_keys=accept_new_host_keys) as pair:
        pair.connect()
        with app.locked(pair, "setup-network", dry_run):
            return setup_network(pair, app.inventory, options)


@cli.command("doctor")
@click.argument("profile", required=False)
@click.option("--json", "as_json", is_flag=True, help="Findings as JSON.")
@click.option("--deep", is_flag=True, help="Also run MPI across both nodes inside the engine container.")
@click.option("--only", metavar="ID,..", help="Only these check ids or groups (e.g. links,path).")
@click.option("--timeout", type=Seconds(1, 3600), default=60.0, show_default=True,
              help="Seconds for connecting and for each node's probes.")
@pass_app
def doctor_cmd(app: App, profile: str | None, as_json: bool, deep: bool, only: str | None, timeout: float) -> int:
    """Read-only preflight: every known failure of a Spark pair, each with its fix. Exit 1 on any FAIL."""
    import time

    from sparkpair import report
    from sparkpair.checks import Status
    from sparkpair.checks.doctor import doctor

    inv = app.inventory
    name = _known_profile(inv, profile)
    start = time.monotonic()
    with app.pair(connect_timeout=min(timeout, 30.0)) as pair:
        findings = doctor(pair, inv, name, _split(only), timeout=timeout, deep=deep)
    elapsed = time.monotonic() - start
    if as_json:
        report.emit_json({"profile": name, "elapsed_s": round(elapsed, 2),
                          "findings": [f.as_dict() for f in findings]})
    else:
        report.findings(findings, elapsed)
    return 1 if any(f.status is Status.FAIL for f in findings) else 0


@cli.command("launch")
@click.argument("profile", required=False)
@click.option("--dry-run", is_flag=True, help="Preflight and show what would change; start nothing.")
@click.option("--timeout", type=Seconds(1, 86400), default=1800.0, show_default=True,
              help="Seconds to wait for the server to become ready.")
@click.option("--no-wait", is_flag=True, help="Return once the engine is started.")
@click.option("--model-source", default="hub", show_default=True, metavar="hub|cached|local:PATH",
              help="hub: download on the head, copy to the worker; cached: use what the caches hold; "
                   "local:PATH: copy from a staged HF cache on the head (air-gapped).")
@click.option("--replace", is_flag=True, help="Replace an engine container whose spec differs.")
@click.option("--keep-on-failure", is_flag=True, help="Leave a failed launch running for inspection.")
@click.option("--node", metavar="NAME", help="For single-node profiles: the node to serve on (default: head).")
@pass_app
def launch_cmd(app: App, profile: str | None, dry_run: bool, timeout: float, no_wait: bool, model_source: str,
               replace: bool, keep_on_failure: bool, node: str | None) -> int:
    """Start PROFILE (default: server.profile) across the pair and wait until it answers."""
    from sparkpair.launch import LaunchOptions, launch

    if model_source not in ("hub", "cached") and not (model_source.startswith("local:/") and len(model_source) > 7):
        raise click.BadParameter("expected hub, cached or local:/ABSOLUTE/PATH", param_hint="--model-source")
    inv = app.inventory
    options = LaunchOptions(_known_profile(inv, profile), dry_run, timeout, not no_wait, model_source, replace,
                            keep_on_failure, node)
    with app.pair() as pair:
        pair.connect()
        with app.locked(pair, f"launch {options.profile}", dry_run):
            return launch(pair, inv, options)


@cli.command("status")
@click.option("--json", "as_json", is_flag=True, help="Status as JSON.")
@pass_app
def status_cmd(app: App, as_json: bool) -> int:
    """Containers and ranks on both nodes, health, model, uptime, requests and draft acceptance."""
    from dataclasses import asdict

    from sparkpair import lifecycle, report

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
@pass_app
def logs_cmd(app: App, node: str | None, tail: int, follow: bool) -> int:
    """The ranks' output, kept in log files inside the head container."""
    from sparkpair import lifecycle

    with app.pair() as pair:
        return lifecycle.print_logs(pair, app.inventory, node, tail, follow)


@cli.command("stop")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@pass_app
def stop_cmd(app: App, dry_run: bool) -> int:
    """Stop the engine on both nodes (idempotent); models stay in the caches."""
    from sparkpair import containers, lifecycle, report

    with app.pair() as pair:
        pair.connect()
        if dry_run:
            for name, connection in pair.nodes.items():
                found = containers.find(connection, app.inventory.container.name)
                report.line(f"{name}: " + (f"would remove {found.name} ({found.status})" if found else
                                           f"no {app.inventory.container.name} container"))
            return 0
        with app.locked(pair, "stop"):
            for name, outcome in lifecycle.stop(pair, app.inventory).items():
                report.line(f"{name}: {outcome}")
    return 0


@cli.command("bench")
@click.argument("profile", required=False)
@click.option("--concurrency", default="1", show_default=True, metavar="N,..", help="Concurrent streams to test.")
@click.option("--requests", "requests_", type=click.IntRange(1, 100000), default=20, show_default=True,
              help="Measured requests per concurrency level (after warm-up).")
@click.option("--max-tokens", type=click.IntRange(1, 32768), default=128, show_default=True)
@click.option("--prompts", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="JSONL prompts ({\"prompt\": ...} or {\"messages\": [...]}) instead of the bundled set.")
@click.option("--compare-baseline", is_flag=True, help="Also relaunch without the draft and report the speedup.")
@click.option("--draft-len", metavar="N,..", help="Relaunch for each max_draft_len and measure each.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("bench-results"),
              show_default=True, help="Where results.json, results.csv, plots and summary.md go.")
@click.option("--json", "as_json", is_flag=True, help="Results as JSON on stdout.")
@pass_app
def bench_cmd(app: App, profile: str | None, concurrency: str, requests_: int, max_tokens: int, prompts: Path | None,
              compare_baseline: bool, draft_len: str | None, out_dir: Path, as_json: bool) -> int:
    """Measure what speculative decoding buys: TTFT, tokens/s, latency percentiles, draft acceptance."""
    from sparkpair.bench import BenchOptions, run_bench

    inv = app.inventory
    options = BenchOptions(profile=_known_profile(inv, profile), concurrency=_int_list(concurrency, "--concurrency"),
                           requests=requests_, max_tokens=max_tokens, prompts=prompts,
                           compare_baseline=compare_baseline,
                           draft_lengths=_int_list(draft_len, "--draft-len") if draft_len else [],
                           out_dir=out_dir, as_json=as_json, inventory_path=Path(app.inventory_path))
    with app.pair() as pair:
        pair.connect()
        with app.locked(pair, f"bench {options.profile}", dry_run=not (compare_baseline or draft_len)):
            return run_bench(pair, inv, options)


def _int_list(value: str, option: str) -> list[int]:
    try:
        numbers = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}", param_hint=option) from None
    if not numbers or any(n < 1 or n > 4096 for n in numbers):
        raise click.BadParameter(f"expected integers from 1 to 4096, got {value!r}", param_hint=option)
    return numbers


@cli.command("unlock")
@pass_app
def unlock_cmd(app: App) -> int:
    """Remove the pair's lock left by a sparkpair run that is gone (it names the holder)."""
    from sparkpair import lock, report

    with app.pair() as pair:
        report.line(f"{pair.head.name}: {lock.force_unlock(pair.head)}")
    return 0


def _split(value: str | None) -> set[str] | None:
    return {part.strip() for part in value.split(",") if part.strip()} if value else None


def _known_profile(inv: Any, name: str | None) -> str:
    """The profile to use: the one named, or the inventory's server.profile."""
    name = name or inv.server.profile
    if name not in inv.profiles:
        raise click.BadParameter(f"no profile {name!r}; known: {', '.join(sorted(inv.profiles))}",
                                 param_hint="PROFILE")
    return name


def _debug_log(error: BaseException) -> Path:
    path = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sparkpair" / "debug.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write("".join(traceback.format_exception(error)) + "\n")
    except OSError:
        pass
    return path


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI and turn every outcome into an exit status."""
    from sparkpair.errors import SparkpairError

    try:
        result = cli.main(args=argv, prog_name="sparkpair", standalone_mode=False)
        return int(result) if isinstance(result, int) else ExitStatus.OK
    except click.exceptions.Exit as done:
        return done.exit_code
    except click.ClickException as error:
        from sparkpair.report import one_line

        if not isinstance(error, getattr(click.exceptions, "NoArgsIsHelpError", ())):  # that one is the help
            error.message = one_line(error.message)  # click quotes the operator's words verbatim
        error.show()
        return error.exit_code
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        return ExitStatus.INTERRUPTED
    except SparkpairError as error:
        from sparkpair import report

        report.error_lines(error.lines())
        return error.exit_code
    except BrokenPipeError:
        return ExitStatus.OK
    except Exception as error:  # noqa: BLE001 (the one place that catches everything)
        path = _debug_log(error)
        from sparkpair.report import one_line

        click.echo(one_line(f"error: internal error ({type(error).__name__}: {error}); details in {path}"), err=True)
        return ExitStatus.FAILURE


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
