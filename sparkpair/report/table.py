"""Tables as text lines, drawn the way rich draws them (heavy head, light body), without rich; and the
ANSI colours of what report writes itself; every title, header and cell is shown through `safetext.visible`
first, so the only escapes in a table are report's own colours.

Doctor prints one table per node at the end of every run, after the nodes have answered: rich took
about 70 ms of CPU to lay out its ~90 rows and 35 ms to import, all of it on the command's critical
path. This module lays out the same table in about a millisecond. `render` is pure: text in, lines
out; colour is the caller's (`paint`: `plain` or `ansi`, as `wants_colour` decides).
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable, Sequence
from typing import TextIO

from sparkpair.safetext import visible

_ANSI = {"green": "32", "yellow": "33", "bold red": "1;31", "dim": "2", "bold": "1", "title": "3", "header": "1"}
_MIN_WRAPPED_WIDTH = 10

Paint = Callable[[str, str], str]  # (text, style) -> text to print; style "" means none
CellStyle = Callable[[int, str], str]  # (column index, cell text) -> style


def plain(text: str, style: str) -> str:
    """Paint nothing: text as it is."""
    return text


def ansi(text: str, style: str) -> str:
    """text in style's ANSI colour (the styles report uses: green, yellow, bold red, dim, bold, title, header)."""
    code = _ANSI.get(style)
    return f"\x1b[{code}m{text}\x1b[0m" if code and text else text


def wants_colour(stream: TextIO) -> bool:
    """Whether stream gets colour, as rich decides it: FORCE_COLOR, else a terminal that is not dumb and no NO_COLOR."""
    if os.environ.get("FORCE_COLOR"):
        return True
    return bool(stream.isatty()) and "NO_COLOR" not in os.environ and os.environ.get("TERM", "") not in ("dumb", "unknown")


def column_widths(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int | None,
                  wrapped: Sequence[bool]) -> list[int]:
    """Each column's content width: its widest cell, then, while the table is wider than width, the widest
    column that may wrap loses a character (down to 10)."""
    widths = [max([len(header)] + [len(part) for row in rows for part in row[index].split("\n")])
              for index, header in enumerate(headers)]
    if width is None:
        return widths
    available = width - (3 * len(headers) + 1)   # "│ " before each cell, " " after it, and the last "│"
    while sum(widths) > available:
        candidates = [index for index, may in enumerate(wrapped) if may and widths[index] > _MIN_WRAPPED_WIDTH]
        if not candidates:
            break
        widest = max(candidates, key=lambda index: widths[index])
        widths[widest] -= 1
    return widths


def _cell_lines(text: str, width: int) -> list[str]:
    """A cell's lines: its own (a detail may hold several), each folded to width."""
    lines: list[str] = []
    for part in text.split("\n"):
        lines += [part] if len(part) <= width else textwrap.wrap(part, width, break_long_words=True,
                                                                 break_on_hyphens=False) or [""]
    return lines


def render(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], *, width: int | None = None,
           wrapped: Sequence[bool] | None = None, cell_style: CellStyle | None = None,
           paint: Paint = plain) -> list[str]:
    """The table's lines: the title (style "title"), a heavy box around the headers (style "header"), one row
    per entry, a light box closing it. With a width, the columns marked in wrapped fold their cells (at
    spaces, else anywhere) until the table fits; without one, nothing folds. cell_style names each cell's
    style; paint applies styles (nothing by default)."""
    title, headers = visible(title, lines=False), [visible(header, lines=False) for header in headers]
    rows = [[visible(cell) for cell in row] for row in rows]  # nothing a node said may act on the terminal
    wrapped = wrapped or [True] * len(headers)
    widths = column_widths(headers, rows, width, wrapped)
    lines = [paint(title, "title")] if title else []
    lines.append("┏" + "┳".join("━" * (w + 2) for w in widths) + "┓")
    lines.append("┃" + "┃".join(f" {paint(h, 'header') + ' ' * (w - len(h))} " for h, w in zip(headers, widths, strict=True)) + "┃")
    lines.append("┡" + "╇".join("━" * (w + 2) for w in widths) + "┩")
    for row in rows:
        cells = [_cell_lines(cell, w) for cell, w in zip(row, widths, strict=True)]
        for depth in range(max(len(cell) for cell in cells)):
            parts = []
            for index, (cell, w) in enumerate(zip(cells, widths, strict=True)):
                text = cell[depth] if depth < len(cell) else ""
                style = cell_style(index, row[index]) if cell_style and text else ""
                parts.append(f" {paint(text, style) + ' ' * (w - len(text))} ")
            lines.append("│" + "│".join(parts) + "│")
    lines.append("└" + "┴".join("─" * (w + 2) for w in widths) + "┘")
    return lines
