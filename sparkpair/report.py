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


@cache
def out() -> Console:
    return Console(highlight=False, soft_wrap=True)


@cache
def err() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def line(text: str = "") -> None:
    """A plain line on stdout."""
    out().print(escape(text))


def note(text: str) -> None:
    """A progress or status line on stderr."""
    err().print(escape(text))


def error_lines(lines: list[str]) -> None:
    """Each problem as one `error:` line on stderr."""
    for text in lines:
        err().print(f"[bold red]error:[/] {escape(text)}")


def warning(text: str) -> None:
    err().print(f"[yellow]warning:[/] {escape(text)}")


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
