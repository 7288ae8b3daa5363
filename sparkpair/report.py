"""All terminal output: plain lines, tables, diffs and JSON. Nothing else prints.

Data goes to stdout; errors and progress go to stderr, so `--json` output can be piped.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from sparkpair.validation import one_line


@cache
def out() -> Console:
    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal:  # piped or captured: wide lines beat a table folded to 80 columns
        console.width = 160
    return console


@cache
def err() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def line(text: str = "") -> None:
    """A plain line on stdout."""
    out().print(text, markup=False)


def note(text: str) -> None:
    """A progress or status line on stderr."""
    err().print(text, markup=False)


def error_lines(lines: list[str]) -> None:
    """Each problem as one `error:` line on stderr (values from the input cannot break the line)."""
    for text in lines:
        err().print(f"[bold red]error:[/] {escape(one_line(text))}")


def warning(text: str) -> None:
    err().print(f"[yellow]warning:[/] {escape(one_line(text))}")


def emit_json(data: Any) -> None:
    """Machine-readable output: exactly one JSON document on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def emit_text(text: str) -> None:
    """Verbatim text on stdout (YAML, schema, file contents)."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def inventory_ok(source: str, summary: dict[str, Any]) -> None:
    nodes = ", ".join(summary["nodes"])
    line(f"{source}: OK ({nodes}; profile {summary['profile']}; {summary['files']} files render cleanly)")


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


def plan(changes: list[Any], refusals: list[str], show_diffs: bool = True) -> None:
    """What a command would change, node by node, with diffs; refusals as errors."""
    error_lines(refusals)
    if not changes:
        if not refusals:
            line("nothing to change on either node")
        return
    for node in dict.fromkeys(change.node for change in changes):
        line(f"{node}:")
        for change in (c for c in changes if c.node == node):
            line(f"  * {change.summary}")
            if show_diffs and change.diff:
                diff(change.diff)


def progress(node: str, text: str) -> None:
    note(f"{node}: {text}")


def outcomes(results: dict[str, Any], states: dict[str, str] | None = None) -> None:
    """What an apply did on each node, and the state each node is left in."""
    for node, outcome in results.items():
        if outcome.ok:
            note(f"{node}: applied {len(outcome.applied)} change(s)")
            continue
        if outcome.applied:
            note(f"{node}: applied: {'; '.join(outcome.applied)}")
        if outcome.failed:
            error_lines([f"{node}: {outcome.failed_change or 'apply'} failed: {outcome.failed}"])
        if outcome.not_started:
            note(f"{node}: not started{' (interrupted)' if outcome.interrupted else ''}: "
                 f"{'; '.join(outcome.not_started)}")
    for node, state in (states or {}).items():
        note(f"{node}: now {state}")


def confirm(question: str) -> bool:
    from rich.prompt import Confirm

    return Confirm.ask(question, console=err(), default=False)


STATUS_STYLE = {"OK": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim"}


def findings(items: list[Any], elapsed: float | None = None) -> None:
    """Doctor findings as one table per node (then the pair), and a summary line."""
    from rich.table import Table

    order = list(dict.fromkeys([f.node for f in items if f.node != "pair"] + ["pair"]))
    for node in order:
        rows = [f for f in items if f.node == node]
        if not rows:
            continue
        table = Table(title=node, title_justify="left", show_lines=False, expand=False)
        for column in ("check", "status", "detail", "fix"):
            table.add_column(column, overflow="fold")
        for finding in rows:
            status = finding.status.value
            table.add_row(finding.check, f"[{STATUS_STYLE[status]}]{status}[/]", escape(finding.detail),
                          escape(finding.fix))
        out().print(table)
    counts = {s: sum(1 for f in items if f.status.value == s) for s in STATUS_STYLE}
    timing = f" in {elapsed:.1f} s" if elapsed is not None else ""
    line(f"{counts['FAIL']} FAIL, {counts['WARN']} WARN, {counts['OK']} OK, {counts['SKIP']} SKIP{timing}")


def endpoint(url: str, model: str, ready: bool) -> None:
    """Where the server is, how to call it with curl, and with the OpenAI client."""
    base = url.removesuffix("/v1")
    line(("serving" if ready else "starting (sparkpair status shows when it is ready)") + f": {url}")
    line(f"  curl -s {base}/v1/chat/completions -H 'Content-Type: application/json' \\")
    line(f"    -d '{{\"model\": \"{model}\", \"messages\": [{{\"role\": \"user\", \"content\": \"Hello\"}}]}}'")
    line("  python3 -c 'from openai import OpenAI; c = OpenAI(base_url=\"" + url + "\", api_key=\"none\"); "
         f"print(c.chat.completions.create(model=\"{model}\", messages=[{{\"role\": \"user\", "
         "\"content\": \"Hello\"}]).choices[0].message.content)'")


def log_tails(texts: dict[str, str]) -> None:
    """The last lines each rank printed."""
    for name, text in texts.items():
        if text.strip():
            note(f"--- last lines from {name}:")
            for raw in text.rstrip().splitlines():
                note(f"  {raw}")


def causes(items: list[Any]) -> None:
    """Recognised causes of a failure, each with its fix; or say that none was recognised."""
    if not items:
        error_lines(["cause not recognised from the logs; see the lines above and docs/runbooks.md#launch-failure"])
    for cause in items:
        error_lines([f"cause: {cause.explanation} (fix: {cause.fix})"])


def status(result: Any) -> None:
    """The engine's status as a short table."""
    from rich.table import Table

    colour = {"serving": "green", "degraded": "bold red", "stopped": "dim"}[result.state]
    out().print(f"state: [{colour}]{result.state}[/]")
    rows = [("profile", result.profile or "-"), ("model", result.model or "-"), ("endpoint", result.endpoint or "-"),
            ("health", result.health),
            ("uptime", f"{result.uptime_s:.0f} s" if result.uptime_s is not None else "-"),
            ("requests", f"{result.requests:.0f}" if result.requests is not None else "-"),
            ("draft acceptance", f"{result.acceptance_rate:.1%}" if result.acceptance_rate is not None else "-")]
    if result.reason:
        rows.insert(0, ("why", result.reason))
    for name, node in result.nodes.items():
        rank = "rank up" if node["ranks_alive"] else "rank down"
        rows.append((name, f"container {node['container']}, {rank}"))
    table = Table(show_header=False, box=None)
    for key, value in rows:
        table.add_row(key, escape(str(value)))
    out().print(table)


def bench_stage(text: str) -> None:
    """A step of sparkpair bench (relaunch, restore) on stderr."""
    err().print(f"[bold]bench:[/] {escape(text)}")


def bench_progress(description: str, total: int) -> Any:
    """A context manager: a progress bar on stderr while requests run; it yields advance()
    (safe to call from the request threads)."""
    import contextlib

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    @contextlib.contextmanager
    def running() -> Any:
        if not err().is_terminal:  # no bar in logs and pipes: the line per measured point says enough
            yield lambda: None
            return
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("requests"),
                   TimeElapsedColumn())
        with Progress(*columns, console=err(), transient=True) as bar:
            task = bar.add_task(description, total=total)
            yield lambda: bar.advance(task)

    return running()


def bench_level(row: dict[str, Any]) -> None:
    """One measured point of sparkpair bench, as a line on stderr."""
    def number(key: str, digits: int) -> str:
        return "-" if row.get(key) is None else f"{row[key]:.{digits}f}"

    acceptance = "-" if row.get("acceptance_rate") is None else f"{100 * row['acceptance_rate']:.1f}%"
    note(f"{row['config']}, {row['concurrency']} stream(s): {number('aggregate_tokens_per_s', 1)} tok/s total, "
         f"TTFT p50 {number('ttft_ms_p50', 0)} ms, acceptance {acceptance}, "
         f"{row['errors']} of {row['requests']} failed")


def bench_results(headers: list[str], cells: list[list[str]]) -> None:
    """The benchmark's results table on stdout."""
    from rich.table import Table

    table = Table(title="sparkpair bench", title_justify="left")
    for header in headers:
        table.add_column(header, justify="left" if header == "config" else "right", no_wrap=header == "config")
    for row in cells:
        table.add_row(*(escape(cell) for cell in row))
    out().print(table)
