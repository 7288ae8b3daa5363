"""Plan, then apply: changes as data with unified diffs, one executor, a journal per node.

Holds `executor`: the `Change` and its actions (what `--dry-run` shows), `apply_changes` (the one executor that
writes to nodes for setup-network and launch) and the journal that lets a failed or interrupted
apply be reported exactly and undone, and `firsttouch` (each file as it was before sparkpair first
changed it, for setup-network --restore). May import: only the layers below its own in
pyproject.toml's `[tool.importlinter]` (`transport`, `errors`, `paths`, `progress`).
"""

from sparkpair.apply import firsttouch
from sparkpair.apply.executor import (
    Action,
    ActionTimedOut,
    Change,
    Journal,
    NodeOutcome,
    RemoveFile,
    RunCommand,
    WriteFile,
    apply_changes,
    file_diff,
    journal_path,
    mark_restored,
    read_journal,
    restore,
    run_stamp,
    unreadable_journal,
    write_change,
)

__all__ = ["Action", "ActionTimedOut", "Change", "Journal", "NodeOutcome", "RemoveFile", "RunCommand", "WriteFile",
           "apply_changes", "file_diff", "firsttouch", "journal_path", "mark_restored", "read_journal", "restore",
           "run_stamp", "unreadable_journal", "write_change"]
