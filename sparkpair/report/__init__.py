"""All terminal output: plain lines, tables, diffs and JSON, every value through `safetext.visible`. Nothing else prints.

Data goes to stdout; errors and progress go to stderr, so `--json` output can be piped. Plain lines and doctor's
findings tables (`table`) are written directly; styled output (errors, diffs, status, bench) goes through rich. Holds
the printing here, `table` (doctor's tables laid out), `holdpoint` (a test's hold on a stderr line), `lock` (the
lock's differences, the nodes side by side), `draft` (what `sparkpair train-draft` prints) and `diagnose` (what
`sparkpair diagnose` and `logs --diagnose` print). May import: only the layers below its own in pyproject.toml's
`[tool.importlinter]`, and at run time only rich, `progress`, `safetext` and `inventory.messages`: what it prints
(findings, launch and bundle results, status) is typed through TYPE_CHECKING imports, so `--json` and `--help` load no
flow (tests/unit/test_performance_invariants.py).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from sparkpair.inventory.messages import one_line
from sparkpair.progress import Event
from sparkpair.report import holdpoint, table
from sparkpair.safetext import visible

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from rich.console import Console
    from rich.progress import Progress, TaskID

    from sparkpair.apply import Change
    from sparkpair.checks import Finding
    from sparkpair.engine.bundle import BundleResult
    from sparkpair.engine.diagnose import Diagnosis
    from sparkpair.engine.launch import LaunchPlan, LaunchResult
    from sparkpair.engine.lifecycle import RankLog
    from sparkpair.engine.lifecycle import Status as EngineStatus

# rich is imported on first use: `--json` output (doctor --json, status --json) never needs it.


def escape(text: str) -> str:
    """text with rich markup escaped and anything that could act on a terminal shown inert (`safetext.visible`)."""
    from rich.markup import escape as rich_escape

    return rich_escape(visible(text))


@cache
def out() -> Console:
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal:  # piped or captured: wide lines beat a table folded to 80 columns
        console.width = 160
    return console


@cache
def err() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


_WRITING = threading.Lock()  # progress lines come from several threads


def _write(stream: TextIO, text: str) -> None:
    with _WRITING:
        stream.write(text + "\n")
        stream.flush()


def line(text: str = "") -> None:
    """A plain line on stdout; whatever in it could act on the terminal is shown as its escape (`safetext.visible`)."""
    _write(sys.stdout, visible(text))


def note(text: str) -> None:
    """A progress or status line on stderr (shown as `line` shows it)."""
    shown_text = visible(text)
    _write(sys.stderr, shown_text)
    holdpoint.reached(shown_text, lambda shown: _write(sys.stderr, shown))


def error_lines(lines: list[str]) -> None:
    """Each problem as one `error:` line on stderr (values from the input cannot break the line)."""
    for text in lines:
        err().print(f"[bold red]error:[/] {escape(one_line(text))}")


def warning(text: str) -> None:
    err().print(f"[yellow]warning:[/] {escape(one_line(text))}")
    holdpoint.reached(f"warning: {text}", lambda shown: _write(sys.stderr, shown))


def emit_json(data: object) -> None:
    """Machine-readable output: exactly one JSON document on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def emit_text(text: str) -> None:
    """Text as it is on stdout (YAML, schema, file contents), anything that could act on a terminal shown inert."""
    sys.stdout.write(visible(text if text.endswith("\n") else text + "\n"))
    sys.stdout.flush()


def inventory_ok(source: str, nodes: Sequence[str], profile: str, files: int) -> None:
    """`inventory check` passed: the nodes, the default profile and how many files render."""
    line(f"{source}: OK ({', '.join(nodes)}; profile {profile}; {files} files render cleanly)")


def written_files(out_dir: Path, paths: list[Path]) -> None:
    line(f"wrote {len(paths)} files under {out_dir}:")
    for path in paths:
        line(f"  {path.relative_to(out_dir)}")


def diff(text: str) -> None:
    """A unified diff, coloured, indented under its change."""
    colours = {"+": "green", "-": "red", "@": "cyan"}
    for raw in text.splitlines():
        colour = colours.get(raw[:1]) if not raw.startswith(("+++", "---")) else "bold"
        out().print(f"    [{colour}]{escape(raw)}[/]" if colour else f"    {escape(raw)}")


def plan(changes: Sequence[Change], refusals: list[str], show_diffs: bool = True, nodes: int = 2) -> None:
    """What a command would change, node by node, with diffs; refusals as errors (nodes: the inventory's)."""
    error_lines(refusals)
    if not changes:
        if not refusals:
            line(f"nothing to change on {'any node' if nodes > 2 else 'either node'}")
        return
    for node in dict.fromkeys(change.node for change in changes):
        line(f"{node}:")
        for change in (c for c in changes if c.node == node):
            line(f"  * {change.summary}")
            if show_diffs and change.diff:
                diff(change.diff)


def progress(node: str, text: str) -> None:
    note(f"{node}: {text}")


def event(item: Event) -> None:
    """One flow event: results on stdout, errors and warnings as such, the rest as progress on stderr.

    Events with a key describe one evolving thing (a transfer, a node's loading stage): on a
    terminal they update one live line each; elsewhere a plain line is printed when the thing
    finishes or at most every PLAIN_EVERY_S seconds."""
    text = f"{item.node}: {item.text}" if item.node else item.text
    if item.key:
        _LIVE.show(item, text)
    elif item.level == "result":
        line(text)
    elif item.level == "error":
        error_lines([text])
    elif item.level == "warning":
        warning(text)
    else:
        note(text)


PLAIN_EVERY_S = float(os.environ.get("SPARKPAIR_PROGRESS_EVERY", "") or 10.0)  # plain progress lines, off a terminal


class _LiveLines:
    """The live lines of keyed events: rich progress bars on a terminal, throttled plain lines otherwise."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._printed: dict[str, float] = {}
        self._bars: Progress | None = None
        self._tasks: dict[str, TaskID] = {}

    def show(self, item: Event, text: str) -> None:
        finished = item.total is not None and item.done is not None and item.done >= item.total
        with self._lock:
            if err().is_terminal:
                self._bar(item, text, finished)
                return
            now = time.monotonic()
            if finished or now - self._printed.get(item.key, 0.0) >= PLAIN_EVERY_S:
                self._printed[item.key] = now
                note(f"{text}{_amount(item)}")

    def _bar(self, item: Event, text: str, finished: bool) -> None:
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

        if self._bars is None:
            self._bars = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                                  TextColumn("{task.fields[amount]}"), TimeElapsedColumn(), console=err(),
                                  transient=True)
            self._bars.start()
        if item.key not in self._tasks:
            self._tasks[item.key] = self._bars.add_task(escape(text), total=item.total, amount="")
        self._bars.update(self._tasks[item.key], description=escape(text), completed=item.done or 0,
                          total=item.total, amount=_amount(item))
        if finished:
            self._bars.remove_task(self._tasks.pop(item.key))
            if not self._tasks:
                self._bars.stop()
                self._bars = None


def _amount(item: Event) -> str:
    if item.done is None or item.unit in ("B", ""):  # byte transfers (and unitless lines) say it in the text
        return ""
    total = f"/{item.total:g}" if item.total is not None else ""
    return f" ({item.done:g}{total} {item.unit})".rstrip()


_LIVE = _LiveLines()


def confirm(question: str) -> bool:
    from rich.prompt import Confirm

    return Confirm.ask(question, console=err(), default=False)


STATUS_STYLE = {"OK": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim", "INFO": "cyan"}


def findings(items: Sequence[Finding], elapsed: float | None = None) -> None:
    """Doctor findings as one table per node (then the one of every node: `pair`, `cluster`), and a summary
    line. On a terminal the detail and fix columns fold to its width; piped, each one stays on one line (grep)."""
    import shutil

    terminal = sys.stdout.isatty()
    width = shutil.get_terminal_size().columns if terminal else None
    paint = table.ansi if table.wants_colour(sys.stdout) else table.plain
    order = list(dict.fromkeys([f.node for f in items if f.node not in ("pair", "cluster")] + ["pair", "cluster"]))
    for node in order:
        rows = [[f.check, f.status.value, f.detail, f.fix] for f in items if f.node == node]
        if rows:
            for text in table.render(node, ("check", "status", "detail", "fix"), rows, width=width,
                                     wrapped=(False, False, True, True), paint=paint,
                                     cell_style=lambda column, cell: STATUS_STYLE[cell] if column == 1 else ""):
                _write(sys.stdout, text)  # laid out from sanitized cells (table.render), with report's colours
    counts = {s: sum(1 for f in items if f.status.value == s) for s in STATUS_STYLE}
    timing = f" in {elapsed:.1f} s" if elapsed is not None else ""
    explained = f", {counts['INFO']} INFO" if counts["INFO"] else ""
    line(f"{counts['FAIL']} FAIL, {counts['WARN']} WARN, {counts['OK']} OK, {counts['SKIP']} SKIP{explained}{timing}")


def launch_plan(planned: LaunchPlan) -> None:
    """launch --dry-run: the preflight's FAILs, or the config diffs, containers, models and serve line."""
    if planned.preflight:
        preflight_failed(planned.preflight)
        return
    plan(planned.changes, [], nodes=len(planned.nodes))
    for name, state in planned.containers.items():
        line(f"{name}: engine container (now: {state}) from {planned.image}")
    line(f"models ({planned.model_source}): {', '.join(planned.repos)} on {', '.join(planned.nodes)}")
    if planned.split:
        line("split: " + planned.split)
    line("serve: " + planned.serve)


def preflight_failed(failures: Sequence[Finding]) -> None:
    findings(failures)
    error_lines([f"preflight: {len(failures)} launch-critical check(s) FAIL; nothing was started"])


def launch_result(result: LaunchResult, nodes: int = 2) -> None:
    """How a launch ended: the endpoint, or what failed with the ranks' last lines and the causes."""
    if result.preflight:
        preflight_failed(result.preflight)
        return
    if result.fabric:
        findings(result.fabric)
        error_lines(["--check-fabric: NCCL over RoCE is not proven (above); no model was loaded and no engine "
                     "container started"])
        return
    if result.outcomes:
        for node, outcome in result.outcomes.items():
            if not outcome.ok and outcome.failed:
                error_lines([f"{node}: {outcome.failed_change or 'apply'} failed: {outcome.failed}"])
        return
    if result.failure is None:
        if result.ready:
            line(f"ready in {result.seconds:.1f} s")
        endpoint(result.endpoint, result.model, ready=result.ready)
        return
    error_lines([f"launch failed: {result.failure.detail}"])
    log_tails(result.failure.log_tails)
    causes(result.failure.causes)
    if result.kept:
        note("left running for inspection (--keep-on-failure); sparkpair logs / sparkpair stop")
    for name, stopped in result.teardown.items():
        note(f"{name}: {stopped}")
    if result.logs_kept:
        note(result.logs_kept)
    note(f"evidence from {'every node' if nodes > 2 else 'both nodes'} for a report (logs, versions, state; "
         "no secrets): sparkpair bundle")


def bundle_result(result: BundleResult) -> None:
    """Where `sparkpair bundle` wrote the archive, what it holds, and what it could not collect."""
    size = sum(item[1] for item in result.files)
    line(f"wrote {result.path}: {len(result.files)} files, {size / 1024:.0f} KiB before compression, "
         f"{result.redactions} secret value(s) redacted (MANIFEST.txt lists every file and each redaction)")
    for item in result.missing:
        note(f"not collected: {item}")


def rank_logs(items: Sequence[RankLog]) -> None:
    """Each rank's last lines under a header naming the node and rank."""
    for item in items:
        line(f"==> {item.node} (rank {item.rank}) <==")
        for text in item.text.splitlines():
            line(text)


def endpoint(url: str, model: str, ready: bool) -> None:
    """Where the server is, how to call it with curl, and with the OpenAI client."""
    base = url.removesuffix("/v1")
    line(("serving" if ready else "starting (sparkpair status shows when it is ready)") + f": {url}")
    line(f"  curl -s {base}/v1/chat/completions -H 'Content-Type: application/json' \\")
    line(f"    -d '{{\"model\": \"{model}\", \"messages\": [{{\"role\": \"user\", \"content\": \"Hello\"}}]}}'")
    line("  python3 -c 'from openai import OpenAI; c = OpenAI(base_url=\"" + url + "\", api_key=\"none\"); "
         f"print(c.chat.completions.create(model=\"{model}\", messages=[{{\"role\": \"user\", "
         "\"content\": \"Hello\"}]).choices[0].message.content)'")


def log_tails(texts: Mapping[str, str]) -> None:
    """The last lines each rank printed."""
    for name, text in texts.items():
        if text.strip():
            note(f"--- last lines from {name}:")
            for raw in text.rstrip().splitlines():
                note(f"  {raw}")


def causes(items: Sequence[Diagnosis]) -> None:
    """Recognised causes of a failed launch, most likely first, each with its fix, first evidence line
    and runbook section; or say that none was recognised."""
    if not items:
        error_lines(["cause not recognised from the logs; see the lines above and "
                     "docs/runbooks.md#reading-diagnose-output"])
    for item in items:
        error_lines([f"cause {item.cause}: {item.summary}"])
        for text in item.evidence[:2]:
            note(f"  evidence: {one_line(text)}")
        note(f"  fix: {item.fix} ({item.runbook})")


def status(result: EngineStatus) -> None:
    """The engine's status as a short table."""
    from rich.table import Table

    colour = {"serving": "green", "degraded": "bold red", "wedged": "bold red", "stopped": "dim"}[result.state]
    out().print(f"state: [{colour}]{result.state}[/]")
    rows = [("profile", f"{result.profile} on {result.runtime}" if result.profile and result.runtime else
             result.profile or "-"), ("model", result.model or "-"), ("endpoint", result.endpoint or "-"),
            ("health", result.health), ("generation", result.generation),
            ("uptime", f"{result.uptime_s:.0f} s" if result.uptime_s is not None else "-"),
            ("requests", f"{result.requests:.0f}" if result.requests is not None else "-"),
            ("draft acceptance", f"{result.acceptance_rate:.1%}" if result.acceptance_rate is not None else "-")]
    if result.reason:
        rows.insert(0, ("why", result.reason))
    rows += [("cluster", result.cluster)] if result.cluster else []
    for name, node in result.nodes.items():
        rank = {"stopped": "rank stopped"}.get(node.get("rank_state", ""), "rank up" if node["ranks_alive"] else "rank down")
        guard = f", memory guard {node['memory_guard']}" if node.get("memory_guard") else ""
        rows.append((name, f"container {node['container']}, {rank}{guard}"))
    table = Table(show_header=False, box=None)
    for key, value in rows:
        table.add_row(escape(key), escape(str(value)))  # node names come from the launch state: a node's file
    out().print(table)


def bench_results(headers: list[str], cells: list[list[str]]) -> None:
    """The benchmark's results table on stdout."""
    from rich.table import Table

    table = Table(title="sparkpair bench", title_justify="left")
    for header in headers:
        table.add_column(header, justify="left" if header == "config" else "right", no_wrap=header == "config")
    for row in cells:
        table.add_row(*(escape(cell) for cell in row))
    out().print(table)
