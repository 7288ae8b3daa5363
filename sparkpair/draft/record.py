"""The trained draft's record on the head (`~/.sparkpair/state/drafts/<ORG>--<NAME>.json`): which steps
finished, each with the digest of what it was made from, so a second run resumes after the last
finished step and a changed input (prompts, steps, target revision) re-runs its step and those after it.

The record is written whole and atomically (`Node.put`: upload beside, rename) after every step, and read
as hostile: a file sparkpair cannot read reads as no record (every step runs again), never as a crash.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from sparkpair import boundedjson, paths
from sparkpair.transport import Node, Shell

STEPS = ("data", "hidden", "train", "export", "evaluate")
OPTIONAL = ("hidden",)      # offline training's step only: an online run's record has none
RECORD_CAP = 1 << 20        # bytes of a record read back from the head
# A draft's name as the operator gives it: a hub-style repo id, ORG/NAME, each part 1-96 characters of
# letters, digits, '.', '_' and '-', not starting with '.' or '-' (so never '..', '/', or a control character).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


def name_problem(name: str) -> str | None:
    """Why NAME cannot name a trained draft (None when it can)."""
    if not NAME.fullmatch(name) or ".." in name:
        return (f"--name {name!r}: expected ORG/NAME (letters, digits, '.', '_', '-'; no '..'), "
                "e.g. local/qwen3-235b-eagle3-mine")
    return None


def slug(name: str) -> str:
    """The draft's name as one path component (ORG--NAME), as the HF cache spells repo folders."""
    return name.replace("/", "--")


def digest(*parts: Any) -> str:
    """sha256 of the parts as canonical JSON: what a step was made from."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class StepDone:
    """One finished step: when, from what (the digest of its inputs), and what it produced."""

    inputs: str
    finished: float
    outputs: dict[str, Any] = field(default_factory=dict)


@dataclass
class DraftRecord:
    """A trained draft's steps: name, profile, and each finished step."""

    name: str
    profile: str
    steps: dict[str, StepDone] = field(default_factory=dict)

    def done(self, step: str, inputs: str) -> StepDone | None:
        """The step's result when it finished from these same inputs; None when it must run."""
        found = self.steps.get(step)
        return found if found is not None and found.inputs == inputs else None

    def finish(self, step: str, inputs: str, finished: float, outputs: dict[str, Any]) -> StepDone:
        """Record STEP as finished; the steps after it are forgotten (they were made from its old output)."""
        for later in STEPS[STEPS.index(step) + 1:]:
            self.steps.pop(later, None)
        self.steps[step] = StepDone(inputs, finished, outputs)
        return self.steps[step]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, raw: bytes | str, name: str, profile: str) -> DraftRecord:
        """The record in RAW when it is one for NAME and PROFILE that this version reads; else a new, empty one."""
        fresh = cls(name, profile)
        try:
            data = boundedjson.loads(raw)
        except ValueError:
            return fresh
        if not isinstance(data, dict) or data.get("name") != name or data.get("profile") != profile:
            return fresh
        steps = data.get("steps")
        if not isinstance(steps, dict):
            return fresh
        for step in STEPS:
            item = steps.get(step)
            if item is None and step in OPTIONAL:
                continue
            if not isinstance(item, dict):
                break  # a step is only trusted when every step before it is
            inputs, finished, outputs = item.get("inputs"), item.get("finished"), item.get("outputs", {})
            if not (isinstance(inputs, str) and isinstance(finished, (int, float)) and isinstance(outputs, dict)):
                break
            fresh.steps[step] = StepDone(inputs, float(finished), outputs)
        return fresh


def record_path(head: Node, name: str) -> str:
    """Where NAME's record lives on the head."""
    return paths.under_home(f"{paths.DRAFT_STATE_DIR}/{slug(name)}.json", head.home)


def work_dir(head: Node, name: str) -> str:
    """NAME's working folder on the head (data, the training output), private to the user."""
    return paths.under_home(f"{paths.DRAFT_WORK_DIR}/{slug(name)}", head.home)


def read_record(head: Node, name: str, profile: str) -> DraftRecord:
    """NAME's record on the head (an empty one when there is none, or it is too big or unreadable)."""
    raw = head.read(record_path(head, name))
    if raw is None or len(raw) > RECORD_CAP:
        return DraftRecord(name, profile)
    return DraftRecord.from_json(raw, name, profile)


def write_record(head: Node, record: DraftRecord) -> None:
    """Write the record on the head, whole and atomically, private to the user."""
    path = record_path(head, record.name)
    head.check(Shell("mkdir -p -m 700 {}", path.rsplit("/", 1)[0]))
    head.put(record.to_json(), path, mode=0o600)
