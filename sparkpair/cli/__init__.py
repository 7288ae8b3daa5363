"""The `sparkpair` command line: a thin click layer over the library.

Only click is imported at start-up (so `--help` stays fast); each command imports what it needs.
Every expected failure ends as one-line errors and an exit code: 0 ok, 1 failure, 2 bad input
or usage, 130 interrupted. Never a traceback: unexpected errors go to a debug log.

Holds `run`/`main` here, `app` (the group, `App`), `options` (shared options), and one module per
command group: `inventory`, `network`, `doctor`, `engine`, `bench`, `bundle`, `diagnose`, `draft`
(`train-draft`), `lock` (`diff`). May import: only the layers below its own in pyproject.toml's
`[tool.importlinter]` (all but `__main__`).
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import click

from sparkpair.cli import (  # noqa: F401 (each registers its commands)
    bench,
    bundle,
    diagnose,
    doctor,
    draft,
    engine,
    inventory,
    lock,
    network,
)
from sparkpair.cli.app import ExitStatus, cli  # noqa: E402


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
        from sparkpair.inventory.messages import one_line

        if not isinstance(error, getattr(click.exceptions, "NoArgsIsHelpError", ())):  # that one is the help
            setattr(error, "message", one_line(error.message))  # noqa: B010 (click quotes the operator's words verbatim)
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
        from sparkpair.inventory.messages import one_line

        click.echo(one_line(f"error: internal error ({type(error).__name__}: {error}); details in {path}"), err=True)
        return ExitStatus.FAILURE


def run() -> None:
    """Console-script entry point: the exit status of `main`, without the interpreter's finalization.

    When main returns, the command is done: every thread it started has been joined, the pair lock
    released and the connections closed. What the interpreter would still do is tear down every
    module and object (paramiko's, cryptography's, click's): about 40 ms of CPU at the end of every
    command on the simulated pair, for nothing. So the output is flushed and the process ends here,
    unless a profiler or tracer watches (`python -m cProfile`, coverage): they write what they saw at
    the normal exit.
    """
    code = main()
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # the reader left (`| head`), or the stream is closed
            pass
    os._exit(code)
