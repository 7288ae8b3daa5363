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
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources

from sparkpair.render.recipe import HF_HOME, model_link
from sparkpair.transport import Node, Shell

SCRIPT = "train_eagle3.py"
CONTAINER = "sparkpair-train-draft"
WORK = "/work"                      # the draft's working folder, inside the container
OUTPUT = "train"                    # the script's output under it: draft/ (the export) and training.json
DEFAULT_IMAGE = "nvcr.io/nvidia/pytorch:25.06-py3"   # ModelOpt's README's image; it must hold nvidia-modelopt[hf]
PROGRESS = re.compile(r"sparkpair-train step=(\d{1,9})/(\d{1,9}) loss=([0-9.eE+-]{1,32}|nan|inf)(?: acc=([0-9.]{1,8}))?")
DONE = "sparkpair-train done"
LINE_CAP = 400                      # characters of one output line looked at
TAIL_LINES = 12
MASTER_PORT = 29511                 # torchrun's rendezvous on the head (vLLM's own is 29501)


def script_text() -> str:
    """The training script that runs inside the container (package data)."""
    return resources.files("sparkpair.data").joinpath(SCRIPT).read_text(encoding="utf-8")


@dataclass(frozen=True)
class TrainStep:
    """One progress line of the training: step N of M, its loss, ModelOpt's accuracy (the draft's first token
    against the target's; None when the line has none)."""

    step: int
    total: int
    loss: float
    accuracy: float | None = None


def progress_of(line: str) -> TrainStep | None:
    """The training step a line of the container's output reports; None for any other line."""
    match = PROGRESS.fullmatch(line.strip()[:LINE_CAP])
    if match is None:
        return None
    accuracy = float(match.group(4)) if match.group(4) else None
    return TrainStep(int(match.group(1)), int(match.group(2)), float(match.group(3)), accuracy)


@dataclass(frozen=True)
class Rendezvous:
    """Data parallel across nodes: torchrun's rendezvous on the head's QSFP address, gloo on the cabled twin
    (the interface the runtimes' containers use), this node's rank."""

    nodes: int
    rank: int
    master_addr: str
    interface: str
    port: int = MASTER_PORT


def train_command(*, image: str, hf_cache: str, work: str, target: str, steps: int, seed: int,
                  user: str, rendezvous: Rendezvous | None = None) -> Shell:
    """`docker run` of the training on one node: the HF cache read-only, the working folder read-write, as the
    node's user (USER is `uid:gid`); no network on one node, the host's (the QSFP twins) under torchrun across
    nodes. The script writes WORK/train (rank 0)."""
    script = Shell("{} --target {} --data {} --steps {} --seed {} --out {}", f"{WORK}/{SCRIPT}", model_link(target),
                   f"{WORK}/data.jsonl", steps, seed, f"{WORK}/{OUTPUT}")
    if rendezvous is None:
        network, launcher = Shell("--network none"), Shell("python")
    else:
        network = Shell("--network host --env {} --env {}", f"GLOO_SOCKET_IFNAME={rendezvous.interface}",
                        f"NCCL_SOCKET_IFNAME={rendezvous.interface}")
        launcher = Shell("torchrun --nnodes {} --node-rank {} --nproc-per-node 1 --master-addr {} --master-port {}",
                         rendezvous.nodes, rendezvous.rank, rendezvous.master_addr, rendezvous.port)
    return Shell.compose([
        Shell("docker run --rm --name {}", CONTAINER), network,
        Shell("--user {} --env {} --env HF_HUB_OFFLINE=1 -v {} -v {} {}", user, f"HOME={WORK}/home",
              f"{hf_cache}:{HF_HOME}:ro", f"{work}:{WORK}", image),
        launcher, script, Shell("2>&1")], " ")


def run_training(connections: Sequence[Node], commands: Sequence[Shell], on_line: Callable[[str], None],
                 timeout: float) -> tuple[int, dict[str, list[str]]]:
    """Each node's command at once (the head's first: its lines go to ON_LINE); (the first non-zero exit status,
    else 0; each node's last lines). Ctrl-C removes the training container on every node, then re-raises."""
    tails: dict[str, list[str]] = {c.name: [] for c in connections}

    def collect(name: str) -> Callable[[str], None]:
        def seen(line: str) -> None:
            tails[name].append(line[:LINE_CAP])
            del tails[name][:-TAIL_LINES]
        return seen

    def head_line(line: str) -> None:
        if progress_of(line) is None:
            collect(connections[0].name)(line)
        on_line(line)

    with ThreadPoolExecutor(max_workers=len(connections)) as pool:
        others = [pool.submit(c.stream, command, collect(c.name), timeout=timeout)
                  for c, command in zip(connections[1:], commands[1:], strict=True)]
        try:
            codes = [connections[0].stream(commands[0], head_line, timeout=timeout)]
            codes += [future.result() for future in others]
        except KeyboardInterrupt:
            for connection in connections:
                connection.run(remove_command())
            raise
    return next((code for code in codes if code != 0), 0), tails


def remove_command() -> Shell:
    """Remove the training container (after Ctrl-C or a lost connection; nothing when there is none)."""
    return Shell("docker rm -f {} >/dev/null 2>&1 || true", CONTAINER)


def image_command(image: str) -> Shell:
    """The image's ID on the node (empty output when the node's engine lacks it)."""
    return Shell("docker image inspect --format '{{.Id}}' {} 2>/dev/null || true", image)

