"""What one train-draft run holds: the options the CLI built, the result it returns, and the run every step
reads and records into (the pair, the inventory, the draft's record on the head, its working folder, the
prompt split, the plan)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkpair.draft.data import Split
from sparkpair.draft.plan import Plan, TargetShape
from sparkpair.draft.record import DraftRecord, write_record
from sparkpair.inventory import Inventory
from sparkpair.probes.training import DEFAULT_IMAGE
from sparkpair.progress import Event, Progress
from sparkpair.transport import Node, Pair


@dataclass(frozen=True)
class DraftOptions:
    """What `sparkpair train-draft` was asked to do (the CLI builds it)."""

    profile: str
    name: str
    runtime: str = "vllm"
    prompts: Path | None = None
    steps: int = 200
    max_tokens: int = 128
    image: str = DEFAULT_IMAGE
    seed: int = 0
    requests: int = 8
    out_dir: Path = Path("train-draft-results")
    nodes: int = 1                      # K > 1: data parallel on the first K nodes, head first (torchrun over QSFP)
    mode: str = "auto"                  # auto (the plan's choice), online or offline
    max_length: int = 2048              # tokens of one training sample at most
    draft_vocab: int = 0                # 0: the target's vocabulary; else ModelOpt's calibrated draft vocabulary


@dataclass
class DraftResult:
    """What the run did: the steps it ran and skipped, the installed revision, both drafts' measurements."""

    name: str
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    commit: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    table: tuple[list[str], list[list[str]]] = ([], [])   # bench's table of both drafts' rows
    plan: list[str] = field(default_factory=list)


@dataclass
class Run:
    """One run of the recipe: what every step reads, and how it reports and records."""

    pair: Pair
    inventory: Inventory
    options: DraftOptions
    progress: Progress
    record: DraftRecord
    work: str
    split: Split
    result: DraftResult
    plan: Plan | None = None
    shape: TargetShape | None = None

    @property
    def head(self) -> Node:
        return self.pair.head

    @property
    def mode(self) -> str:
        """online or offline: the plan's (the options' when there is no plan)."""
        return self.plan.mode if self.plan else ("offline" if self.options.mode == "offline" else "online")

    @property
    def device(self) -> str:
        return self.plan.device if self.plan else "cpu"

    def say(self, text: str, **amount: Any) -> None:
        self.progress(Event("train-draft", text, **amount))

    def finish(self, step: str, inputs: str, outputs: dict[str, Any]) -> dict[str, Any]:
        self.record.finish(step, inputs, time.time(), outputs)
        write_record(self.head, self.record)
        self.result.ran.append(step)
        return outputs

    def skip(self, step: str, inputs: str, present: bool = True) -> dict[str, Any] | None:
        """The step's outputs when the record has it finished from INPUTS (and its output is PRESENT): skipped."""
        done = self.record.done(step, inputs)
        if done is None or not present:
            return None
        self.result.skipped.append(step)
        self.say(f"{step}: done already (finished {time.strftime('%Y-%m-%d %H:%M', time.localtime(done.finished))}), "
                 "skipped")
        return done.outputs
