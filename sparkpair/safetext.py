"""Text from outside sparkpair made safe to show: the one sanitizer of everything a node, an engine or a log says
before it reaches a terminal, and the one test of a name a node chose.

UNSAFE holds what can move the cursor, recolour, retitle or clear a terminal, or disguise a line: the C0 controls
(ESC among them), DEL, the C1 controls (CSI U+009B, OSC U+009D act as ESC [ and ESC ] on many terminals), the line
and paragraph separators, and the bidirectional marks, embeddings, overrides and isolates (U+061C, U+200E, U+200F,
U+202A-U+202E, U+2066-U+2069), which reorder what a line seems to say. `visible` writes each as its escape
(`\\x1b`, `\\u202e`), so the text stays readable and nothing in it acts; `printable` says whether a name holds none.
Standard library only.
"""

from __future__ import annotations

import re

UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNSAFE_IN_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    return repr(match.group())[1:-1]  # \x1b, \r, \u202e: as Python writes it


def visible(text: str, lines: bool = True) -> str:
    """text with every UNSAFE character written as its escape; with lines, newlines and tabs stay as they are
    (text of several lines), else they are escaped too (one line)."""
    return (_UNSAFE_IN_LINES if lines else UNSAFE).sub(_escaped, text)


def printable(name: str) -> bool:
    """True when name holds no UNSAFE character (tab and newline included): what a name from a node must be before
    it names a file, an archive member, or is shown."""
    return not UNSAFE.search(name)
