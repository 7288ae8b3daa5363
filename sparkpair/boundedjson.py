"""JSON from outside sparkpair, read with a size cap and a depth cap: the one reader for every JSON document a
node, an engine, a model repository or a file the operator named hands over.

`json.loads` of 64 KiB of `[` raises RecursionError, which no `except ValueError` catches: a draft repository's
training record crashed doctor's probe round, a lock file given to `sparkpair diff --lock` an internal error.
`loads` raises `Refused` (a ValueError, so every parser's existing handler takes it) for text over the cap, text
that is not JSON, NaN or Infinity (not JSON either), and nesting deeper than the depth cap. Callers turn it into
one line naming the file and the fix (exit 2 for a file the operator named) or a failed probe (a node's file).
Standard library only.
"""

from __future__ import annotations

import json
from typing import Any

SIZE_CAP = 16 << 20   # the cap of every file read from a node (transport.sftpread.READ_CAP)
DEPTH_CAP = 64        # sparkpair's own documents nest 6 deep at most; an engine's answers about 10


class Refused(ValueError):
    """Text that is not a JSON document sparkpair reads: the message says why, in a few words; detail, the
    reason alone (`expecting value at character 0`, `nested deeper than 64 levels`)."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message


def _no_constant(name: str) -> Any:
    raise Refused(f"{name} is not a JSON number")


def loads(data: str | bytes, *, cap: int = SIZE_CAP, depth: int = DEPTH_CAP) -> Any:
    """The JSON value data holds (UTF-8 when bytes); Refused when it is larger than cap bytes (characters for
    text), not JSON, or nested deeper than depth."""
    if len(data) > cap:
        raise Refused(f"larger than {cap} bytes")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise Refused(f"nested deeper than {depth} levels") from None
    except Refused:
        raise
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError, an integer of too many digits
        raise Refused(f"not JSON ({_reason(error)})", _reason(error)) from None
    if text.count("[") + text.count("{") > depth and _depth(value) > depth:
        raise Refused(f"nested deeper than {depth} levels")
    return value


def _reason(error: ValueError) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg.lower()} at character {error.pos}"
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8"
    return type(error).__name__


def _depth(value: Any) -> int:
    """How deep lists and objects nest in value (iteratively: no recursion on hostile input)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in item if isinstance(child, (list, dict)))
    return deepest
