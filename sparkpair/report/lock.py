"""The lock's output: each difference from a lock on one line, and `sparkpair diff`'s nodes side by side (one
column per node, head first).

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


def node_rows(rows: Sequence[Row], names: Sequence[str]) -> None:
    """`sparkpair diff`: one line per field, its value on each node in a column of its own (head first), the
    fields that differ on any node first and marked `≠`, then a count naming the nodes."""
    differing = [row for row in rows if not row.same]
    width = max([len(row.field) for row in rows] + [5])
    columns = [max([len(row.values[index]) for row in rows] + [len(name)]) for index, name in enumerate(names)]

    def cells(values: Sequence[str]) -> str:  # every column padded but the last
        return "  ".join([f"{value:<{column}}" for value, column in zip(values[:-1], columns, strict=False)]
                         + [values[-1]])

    line(one_line(f"  {'field':<{width}}  {cells(names)}"))
    for row in rows:
        mark = "≠" if not row.same else " "
        line(one_line(f"{mark} {row.field:<{width}}  {cells(row.values)}"))
    nodes = f"{', '.join(names[:-1])} and {names[-1]}"
    line(one_line(f"{len(differing)} field(s) differ {'between' if len(names) == 2 else 'among'} {nodes}"
                  if differing else f"{nodes} agree on all {len(rows)} fields"))
