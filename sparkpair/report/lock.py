"""The lock's output: each difference from a lock on one line, and `sparkpair diff`'s two nodes side by side.

Every value came from a node or a lock file: each line goes through `one_line` (no control character, no
line break reaches the terminal). Data on stdout, the refusal and warnings on stderr.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkpair.inventory.messages import one_line
from sparkpair.report import error_lines, line, note, warning

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from sparkpair.lockfile.compare import Difference, Row


def difference_line(item: Difference) -> str:
    """One difference: `NODE: FIELD: locked VALUE, found VALUE; fix: ...` (the pair's fields under `pair`)."""
    return one_line(f"{item.node or 'pair'}: {item.field}: locked {item.locked}, found {item.found}; fix: {item.fix}")


def lock_refused(differences: Sequence[Difference], path: Path) -> None:
    """launch --locked refused: every difference, then what was done (nothing)."""
    error_lines([difference_line(item) for item in differences])
    error_lines([f"launch --locked refused: {len(differences)} difference(s) from the lock {path}; "
                 "nothing was changed on the nodes"])


def lock_warnings(differences: Sequence[Difference], path: Path) -> None:
    """launch without --locked: each difference from the last lock as a warning (a new lock follows)."""
    for item in differences:
        warning(f"drift from {path}: {difference_line(item)}")


def lock_written(path: Path, nodes: Sequence[str]) -> None:
    note(one_line(f"lock written: {path} ({', '.join(nodes)})"))


def lock_differences(differences: Sequence[Difference], path: Path) -> None:
    """`sparkpair diff --lock`: every difference on stdout, or that there is none."""
    for item in differences:
        line(difference_line(item))
    line(one_line(f"{len(differences)} difference(s) from the lock {path}" if differences
                  else f"the pair is as the lock {path} says"))


def pair_rows(rows: Sequence[Row], names: tuple[str, str]) -> None:
    """`sparkpair diff`: one line per field, the values on both nodes, the differing fields first and marked."""
    differing = [row for row in rows if not row.same]
    width = max([len(row.field) for row in rows] + [5])
    column = max([len(row.values[0]) for row in rows] + [len(names[0])])
    line(one_line(f"  {'field':<{width}}  {names[0]:<{column}}  {names[1]}"))
    for row in rows:
        mark = "≠" if not row.same else " "
        line(one_line(f"{mark} {row.field:<{width}}  {row.values[0]:<{column}}  {row.values[1]}"))
    line(one_line(f"{len(differing)} field(s) differ between {names[0]} and {names[1]}" if differing
                  else f"{names[0]} and {names[1]} agree on all {len(rows)} fields"))
