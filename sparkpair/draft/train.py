"""The training step: NVIDIA ModelOpt's Eagle3 recipe (`data/train_eagle3.py`, shipped to the head) in a
container of the training image on the head, the target read from the node's HF cache (read-only, through
the stable link launch made for it), the data and the output in the draft's working folder; one progress
event per training step, read from the script's own lines.

The container's output is hostile: only whole lines matching PROGRESS (anchored, bounded, linear) count
as progress; everything else is kept as the log's last lines for the error. The container is named, so an
interrupted run removes it, and a second run starts it again from the top of the step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from sparkpair.render.recipe import HF_HOME, model_link
from sparkpair.transport import Shell

SCRIPT = "train_eagle3.py"
CONTAINER = "sparkpair-train-draft"
WORK = "/work"                      # the draft's working folder, inside the container
OUTPUT = "train"                    # the script's output under it: draft/ (the export) and training.json
DEFAULT_IMAGE = "nvcr.io/nvidia/pytorch:25.06-py3"   # ModelOpt's README's image; it must hold nvidia-modelopt[hf]
PROGRESS = re.compile(r"sparkpair-train step=(\d{1,9})/(\d{1,9}) loss=([0-9.eE+-]{1,32}|nan|inf)")
DONE = "sparkpair-train done"
LINE_CAP = 400                      # characters of one output line looked at
TAIL_LINES = 12


def script_text() -> str:
    """The training script that runs inside the container (package data)."""
    return resources.files("sparkpair.data").joinpath(SCRIPT).read_text(encoding="utf-8")


@dataclass(frozen=True)
class TrainStep:
    """One progress line of the training: step N of M, its loss."""

    step: int
    total: int
    loss: float


def progress_of(line: str) -> TrainStep | None:
    """The training step a line of the container's output reports; None for any other line."""
    match = PROGRESS.fullmatch(line.strip()[:LINE_CAP])
    if match is None:
        return None
    return TrainStep(int(match.group(1)), int(match.group(2)), float(match.group(3)))


def train_command(*, image: str, hf_cache: str, work: str, target: str, steps: int, seed: int,
                  user: str) -> Shell:
    """`docker run` of the training on the head: no network, the HF cache read-only, the working folder
    read-write, as the node's user (USER is `uid:gid`); the script writes WORK/train."""
    return Shell("docker run --rm --name {} --network none --user {} --env HOME={} --env HF_HUB_OFFLINE=1 "
                 "-v {} -v {} {} python {} --target {} --data {} --steps {} --seed {} --out {} 2>&1",
                 CONTAINER, user, f"{WORK}/home", f"{hf_cache}:{HF_HOME}:ro", f"{work}:{WORK}", image,
                 f"{WORK}/{SCRIPT}", model_link(target), f"{WORK}/data.jsonl", steps, seed, f"{WORK}/{OUTPUT}")


def remove_command() -> Shell:
    """Remove the training container (after Ctrl-C or a lost connection; nothing when there is none)."""
    return Shell("docker rm -f {} >/dev/null 2>&1 || true", CONTAINER)


def image_command(image: str) -> Shell:
    """The image's ID on the node (empty output when the node's engine lacks it)."""
    return Shell("docker image inspect --format '{{.Id}}' {} 2>/dev/null || true", image)

