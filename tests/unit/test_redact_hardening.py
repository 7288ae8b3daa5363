"""Redaction (engine.redact) takes time linear in its input, whatever the input's shape.

`sparkpair bundle` redacts every file it collects, rank logs of up to 8 MiB among them, and an engine that
logs request text lets any API client put a line of its choosing there. Before: `redact("a." * n)` took
1.1 s at 4,000 characters and 13 s at 16,000 (the URL scheme's and a secret name's unbounded runs, tried
from every word boundary). Each shape below is 1 MiB: every prefix of every kind of secret the redaction
finds, repeated without its rest, and runs of the characters its patterns scan; each must take well under
LIMIT_S. Structurally, no pattern can begin a scan inside a run another start already scanned.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from sparkpair.engine import redact

try:
    from re import _parser as sre_parser  # type: ignore[attr-defined]  # Python 3.11+
except ImportError:  # pragma: no cover
    import sre_parse as sre_parser  # type: ignore[no-redef]

MIB = 1 << 20
LIMIT_S = 15.0  # 1 MiB takes 0.1-0.3 s here (2 s on a busy machine); the old patterns needed hours for "a." * MIB//2

# One line of each kind the redaction replaces (the shapes below are their prefixes, repeated).
SECRETS = [
    "s://u:p@h",
    "A_TOKEN=v",
    "{'a_token': 'v'}",
    "{'api_key': ['v', 'w']}",
    "--api-key v",
    "Bearer abcdefgh",
    "hf_abcdefghijklmnop",
    "-----BEGIN A PRIVATE KEY-----\nb\n-----END A PRIVATE KEY-----",
]


# Words the patterns look for; any other word scans as any run of letters does (one shape stands for all).
KEYWORDS = re.compile(r"(?i)(?:token|secret|api|key|hf|bearer|begin|end|private)$")


def _signature(unit: str) -> str:
    return re.sub(r"[A-Za-z0-9]+", lambda m: m.group() if KEYWORDS.fullmatch(m.group()) else "a", unit)


def _shapes() -> dict[str, str]:
    shapes, seen = {}, set()
    for secret in SECRETS:
        for end in range(1, len(secret)):
            unit = secret[:end]
            if (unit[-1].isalnum() and not KEYWORDS.search(unit)) or _signature(unit) in seen:
                continue  # a prefix ending in a word scans as the one ending just before it does, but at a keyword
            seen.add(_signature(unit))
            shapes[f"{unit!r} repeated"] = unit * (MIB // len(unit))
    for unit in ("a.", "a-", "a_", "a.b-c_", "a", " ", "'", '"', ":", "=", "a=", "a:", "/", "@", "[", "a://",
                 "-", "_token", "-token ", "token", "\n"):
        shapes[f"{unit!r} repeated"] = unit * (MIB // len(unit))
    shapes["a name run without its value"] = "a" * MIB + "_token"
    shapes["a value run"] = "x_token=" + "v" * MIB
    return shapes


SHAPES = _shapes()


class TooSlow(Exception):
    pass


@contextmanager
def _within(seconds: float) -> Iterator[None]:
    """Raise TooSlow in the block once seconds have passed (a quadratic pattern would run for hours)."""
    def late(signum: int, frame: object) -> None:
        raise TooSlow(f"still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_mebibyte_of_any_shape_is_redacted_in_linear_time(shape: str) -> None:
    started = time.perf_counter()
    with _within(LIMIT_S):
        redact.redact(SHAPES[shape], ["Canary0123456789"])
    assert time.perf_counter() - started < LIMIT_S, shape


def _first_atom(items: list[tuple[object, object]]) -> tuple[object, object]:
    """The first thing a pattern matches, looking into its groups."""
    op, av = items[0]
    if str(op) == "SUBPATTERN":
        return _first_atom(list(av[-1]))  # type: ignore[index]
    return op, av


def test_no_pattern_starts_a_scan_inside_a_run_another_start_scanned() -> None:
    """Each pattern begins with a literal character, a class of quotes (no character of the names and values it
    then scans), or a lookbehind that lets it start only where a run of the characters it scans begins; so a
    run is scanned from one start only, and the time is linear whatever the text."""
    for name, pattern in redact.PATTERNS.items():
        op, av = _first_atom(list(sre_parser.parse(pattern.pattern)))
        if str(op) == "LITERAL":
            continue
        if str(op) == "IN":
            assert all(str(kind) == "LITERAL" and chr(code) in "\"'" for kind, code in av), name  # type: ignore[union-attr]
            continue
        assert str(op) == "ASSERT_NOT" and av[0] == -1, f"{name} may start anywhere: {pattern.pattern[:60]}"  # type: ignore[index]
