"""`sparkpair diagnose`: why a start failed, from log files or standard input; offline, no inventory."""

from __future__ import annotations

import os
import stat
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

import click

from sparkpair.cli.app import cli

KEEP_BYTES = 8 * 1024 * 1024       # of all inputs together at most 8 MiB are read: each input its share
HEAD_PART = 8                      # of an input larger than its share, 1/8 is read at its head, the rest at its tail
STREAM_LIMIT = 256 * 1024 * 1024   # a pipe or device is read at most this far (an endless one stops there)
CHUNK = 1024 * 1024
BINARY_SHARE = 0.1                 # more control bytes or undecodable characters than this: not a log
_TEXT_BYTES = bytes(range(0x20, 0x100)) + b"\t\n\r\v\f\b\x1b"


@dataclass(frozen=True)
class Input:
    """What was read of one input: its text (head and tail joined at whole lines), the bytes left out between
    them, and the bytes read."""

    text: str
    skipped: int = 0
    kept: int = 0


def read_parts(handle: BinaryIO, keep: int = KEEP_BYTES) -> tuple[bytes, bytes, int]:
    """An open file as (head, tail, bytes skipped between them): all of it when it fits in keep bytes, else
    its first keep // HEAD_PART bytes and its last ones. A regular file is seeked; a pipe or device is read
    to its end (at most STREAM_LIMIT bytes, holding at most keep + CHUNK of them); one whose first chunk
    is not text stops there."""
    try:
        info = os.fstat(handle.fileno())
    except (OSError, ValueError):
        info = None
    head_keep = keep // HEAD_PART
    if info is not None and stat.S_ISREG(info.st_mode):
        if info.st_size <= keep:
            return handle.read(keep), b"", 0
        head = handle.read(head_keep)
        handle.seek(max(len(head), info.st_size - (keep - len(head))))
        tail = handle.read(keep - len(head))
        return head, tail, info.st_size - len(head) - len(tail)
    return _stream_parts(handle.read, keep, head_keep)


def _stream_parts(read: Callable[[int], bytes], keep: int, head_keep: int) -> tuple[bytes, bytes, int]:
    first = read(CHUNK)
    if not first or looks_binary(first):
        return first, b"", 0
    head, total = first[:head_keep], len(first)
    kept: deque[bytes] = deque([first[head_keep:]])
    kept_size = len(kept[0])
    while total < STREAM_LIMIT:
        chunk = read(CHUNK)
        if not chunk:
            break
        total += len(chunk)
        kept.append(chunk)
        kept_size += len(chunk)
        while len(kept) > 1 and kept_size - len(kept[0]) >= keep - head_keep:
            kept_size -= len(kept.popleft())
    rest = b"".join(kept)
    if len(head) + len(rest) == total and total <= keep:
        return head + rest, b"", 0
    tail = rest[-(keep - len(head)):] if keep > len(head) else b""
    return head, tail, total - len(head) - len(tail)


def looks_binary(data: bytes) -> bool:
    """Whether data is not a log: only NUL bytes (/dev/zero), or more than BINARY_SHARE control bytes (NUL
    padding at the end of a crashed log excepted)."""
    text = data.rstrip(b"\x00")
    if not text:
        return bool(data)
    return len(text.translate(None, _TEXT_BYTES)) > BINARY_SHARE * len(text)


def read_input(name: str, keep: int = KEEP_BYTES) -> Input:
    """One input (`-` is standard input) as text; a UsageError naming it when it cannot be read or is no log."""
    from sparkpair.errors import UsageError

    what = "standard input" if name == "-" else name
    try:
        if name == "-":
            stdin = sys.stdin
            head, tail, skipped = read_parts(stdin.buffer, keep) if hasattr(stdin, "buffer") else \
                _stream_parts(lambda size: stdin.read(size).encode("utf-8", "replace"), keep, keep // HEAD_PART)
        else:
            with open(name, "rb") as handle:
                head, tail, skipped = read_parts(handle, keep)
    except IsADirectoryError:
        raise UsageError(f"{name}: is a directory; give a log file, or - for standard input") from None
    except FileNotFoundError:
        raise UsageError(f"{name}: no such file; give a log file, or - for standard input") from None
    except (OSError, ValueError) as error:
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise UsageError(f"{what}: cannot be read ({reason}); give a readable log file") from None
    if looks_binary(head) or looks_binary(tail):
        raise UsageError(f"{what}: is binary data, not a log; give the text log of a start")
    if skipped:   # whole lines only on both sides of the gap
        cut = head.rfind(b"\n") + 1
        start = tail.find(b"\n") + 1
        skipped += len(head) - cut + start
        head, tail = head[:cut], tail[start:]
    text = (head + tail).decode("utf-8", "replace")
    if text.count("\ufffd") > BINARY_SHARE * max(len(text), 1):
        raise UsageError(f"{what}: is binary data, not a log; give the text log of a start")
    return Input(text, skipped, len(head) + len(tail))


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError, OSError):
        return False


@cli.command("diagnose")
@click.argument("files", nargs=-1, metavar="[FILE]...")
@click.option("--json", "as_json", is_flag=True, help="Findings as JSON.")
def diagnose_cmd(files: tuple[str, ...], as_json: bool) -> int:
    """Name why a start failed from its logs (FILE, or - for standard input): the most likely cause first,
    each with its evidence, fix and runbook section. Exit 1 when a failure is found, 0 when none, 2 when
    there is no log to read (empty, binary). A log larger than 8 MiB is read at its head and its tail."""
    from sparkpair import report
    from sparkpair.engine import diagnose
    from sparkpair.errors import UsageError
    from sparkpair.report import diagnose as shown

    if not files and _stdin_is_terminal():
        raise click.UsageError("no log given: name the log files of a start, or pipe one in (- reads standard input)")
    names = files or ("-",)
    share = KEEP_BYTES // len(names)   # all inputs together: at most KEEP_BYTES
    inputs = [read_input(name, share) for name in names]
    if not any(item.text.strip() for item in inputs):
        which = ", ".join("standard input" if name == "-" else name for name in names)
        raise UsageError(f"{which}: empty; give the log of a start")
    result = diagnose.examine("\n".join(item.text for item in inputs))
    skipped = {("standard input" if name == "-" else name): (item.kept, item.skipped)
               for name, item in zip(names, inputs, strict=True) if item.skipped}
    if as_json:
        report.emit_json(shown.as_json(result, skipped))
    else:
        shown.skipped_note(skipped)
        shown.examination(result)
    return 1 if result.findings else 0
