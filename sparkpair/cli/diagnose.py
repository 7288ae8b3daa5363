"""`sparkpair diagnose`: why a start failed, from log files or standard input; offline, no inventory."""

from __future__ import annotations

import os
import stat
import sys
from collections import deque
from collections.abc import Callable
from typing import BinaryIO

import click

from sparkpair.cli.app import cli

KEEP_BYTES = 8 * 1024 * 1024       # of all inputs together only the last 8 MiB are read (the failure is at the end)
STREAM_LIMIT = 256 * 1024 * 1024   # a pipe or device is read at most this far (an endless one stops there)
CHUNK = 1024 * 1024


def read_tail(handle: BinaryIO, keep: int = KEEP_BYTES) -> bytes:
    """The last keep bytes of an open file: seeks in a regular file, reads a pipe or device to its end
    (at most STREAM_LIMIT bytes, holding at most keep + CHUNK of them)."""
    try:
        info = os.fstat(handle.fileno())
    except (OSError, ValueError):
        info = None
    if info is not None and stat.S_ISREG(info.st_mode):
        handle.seek(max(0, info.st_size - keep))
        return handle.read(keep)
    return _stream_tail(handle.read, keep)


def _stream_tail(read: Callable[[int], bytes], keep: int) -> bytes:
    """The last keep bytes of what read gives in chunks, reading at most STREAM_LIMIT bytes."""
    kept: deque[bytes] = deque()
    kept_size = total = 0
    while total < STREAM_LIMIT:
        chunk = read(CHUNK)
        if not chunk:
            break
        total += len(chunk)
        kept.append(chunk)
        kept_size += len(chunk)
        while len(kept) > 1 and kept_size - len(kept[0]) >= keep:
            kept_size -= len(kept.popleft())
    return b"".join(kept)[-keep:] if keep > 0 else b""


def read_log(name: str, keep: int = KEEP_BYTES) -> str:
    """The text of the last keep bytes of one input (`-` is standard input); a UsageError naming it when it
    cannot be read."""
    from sparkpair.errors import UsageError

    try:
        if name == "-":
            stdin = sys.stdin
            data = read_tail(stdin.buffer, keep) if hasattr(stdin, "buffer") else \
                _stream_tail(lambda size: stdin.read(size).encode("utf-8", "replace"), keep)
        else:
            with open(name, "rb") as handle:
                data = read_tail(handle, keep)
    except IsADirectoryError:
        raise UsageError(f"{name}: is a directory; give a log file, or - for standard input") from None
    except FileNotFoundError:
        raise UsageError(f"{name}: no such file; give a log file, or - for standard input") from None
    except (OSError, ValueError) as error:
        what = "standard input" if name == "-" else name
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise UsageError(f"{what}: cannot be read ({reason}); give a readable log file") from None
    return data.decode("utf-8", "replace")


@cli.command("diagnose")
@click.argument("files", nargs=-1, metavar="[FILE]...")
@click.option("--json", "as_json", is_flag=True, help="Findings as JSON.")
def diagnose_cmd(files: tuple[str, ...], as_json: bool) -> int:
    """Name why a start failed from its logs (FILE or - for standard input): the most likely cause first,
    each with its evidence, fix and runbook section. Exit 1 when a failure is found, 0 when none."""
    from sparkpair import report
    from sparkpair.engine import diagnose, stages

    names = files or ("-",)
    texts = [read_log(name, KEEP_BYTES // len(names)) for name in names]  # each input its share of KEEP_BYTES
    text = "\n".join(texts)
    found = diagnose.classify(text)
    if as_json:
        report.emit_json({"findings": [item.as_dict() for item in found]})
    else:
        report.diagnoses(found, serving=stages.is_serving(text))
    return 1 if found else 0
