"""The training's container: NVIDIA ModelOpt's Eagle3 recipe (`data/train_eagle3.py`, shipped to each training
node) in a container of the training image on the head, or data parallel on the inventory's first K nodes (head
first, `--nodes K`) under torchrun, each node on its own QSFP twin toward the head (`rendezvous_of`: the
interface the runtimes give it, `render.recipe.ports_toward_head`); the target (offline: only its embedding
and LM head) and the hidden states read from the node's HF cache (read-only, through the stable links launch
made for them), the data and the output in the draft's working folder; on a GPU the container gets the GPUs
(`--gpus all`, as the engine containers do) and trains in bf16, on a CPU in float32; one progress event per
training step, read from the head's own lines.

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

from sparkpair.errors import UsageError
from sparkpair.inventory import Inventory
from sparkpair.inventory.schema import IMAGE_REF
from sparkpair.inventory.validation import Problem
from sparkpair.probes import training
from sparkpair.render.recipe import HF_HOME, model_link, ports_toward_head
from sparkpair.transport import Node, Shell

SCRIPT = "train_eagle3.py"
CONTAINER = "sparkpair-train-draft"
WORK = "/work"                      # the draft's working folder, inside the container
OUTPUT = "train"                    # the script's output under it: draft/ (the export) and training.json
DEFAULT_IMAGE = training.DEFAULT_IMAGE   # ModelOpt's README's image; it must hold nvidia-modelopt[hf]
ERROR = "sparkpair-train error:"    # the script's one-line refusal
PROGRESS = re.compile(r"sparkpair-train step=(\d{1,9})/(\d{1,9}) loss=([0-9.eE+-]{1,32}|nan|inf)(?: acc=([0-9.]{1,8}))?")
DONE = "sparkpair-train done"
LINE_CAP = 400                      # characters of one output line looked at
TAIL_LINES = 12
MASTER_PORT = 29511                 # torchrun's rendezvous on the head (vLLM's own is 29501)


def check_image(image: str) -> str:
    """IMAGE when it is a container image reference (the inventory's own rule for `container.image`); UsageError
    naming --image otherwise (a value starting with '-' would become an option of `docker run`)."""
    problems: list[Problem] = []
    IMAGE_REF.parse(image, ("--image",), problems)
    if problems:
        raise UsageError(f"--image {problems[0].got}: expected {problems[0].expected}",
                         hint="an image holding nvidia-modelopt[hf] (docs/runbooks.md#train-draft-image)")
    return image


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
    """Data parallel across nodes: torchrun's rendezvous on the head's QSFP address this node reaches, gloo on
    this node's own twin toward the head (the interface the runtimes' containers use), this node's rank."""

    nodes: int
    rank: int
    master_addr: str
    interface: str
    port: int = MASTER_PORT


def rendezvous_of(inventory: Inventory, nodes: int, rank: int) -> Rendezvous:
    """The rendezvous of the inventory's node RANK (head first) among its first NODES: the head's address on the
    link the node shares with it (in a ring each worker's own cable, through a switch the shared subnet; a
    pair's first twins, as always) and the node's own end of that link, as vLLM's VLLM_HOST_IP and
    GLOO_SOCKET_IFNAME are chosen (the head's own: its first twin)."""
    node = inventory.nodes[rank]
    head_port, own_port = ports_toward_head(inventory, node)
    return Rendezvous(nodes, rank, str(inventory.head.links[head_port].ip), own_port)


@dataclass(frozen=True)
class Recipe:
    """How the script trains: steps and seed, the device (cuda: bf16, cpu: float32), the longest sample, the draft
    vocabulary (0: the target's), and offline the hidden states' repo and the draft config's auxiliary layers."""

    steps: int
    seed: int = 0
    device: str = "cpu"
    max_length: int = 2048
    draft_vocab: int = 0
    hidden_repo: str = ""
    aux_layers: tuple[int, ...] = ()


def train_command(*, image: str, hf_cache: str, work: str, target: str, recipe: Recipe, user: str,
                  rendezvous: Rendezvous | None = None) -> Shell:
    """`docker run` of the training on one node: the HF cache read-only, the working folder read-write, as the
    node's user (USER is `uid:gid`); the GPUs when it trains on cuda; no network on one node, the host's (the QSFP
    twins) under torchrun across nodes. The script writes WORK/train (rank 0)."""
    offline = Shell("--mode offline --hidden-states {} --aux-layers {}", model_link(recipe.hidden_repo),
                    ",".join(str(layer) for layer in recipe.aux_layers)) if recipe.hidden_repo else Shell("--mode online")
    script = Shell.compose([
        Shell("{} --target {} --data {} --steps {} --seed {} --out {} --device {} --max-length {} --draft-vocab {}",
              f"{WORK}/{SCRIPT}", model_link(target), f"{WORK}/data.jsonl", recipe.steps, recipe.seed,
              f"{WORK}/{OUTPUT}", recipe.device, recipe.max_length, recipe.draft_vocab), offline], " ")
    if rendezvous is None:
        network, launcher = Shell("--network none"), Shell("python")
    else:
        network = Shell("--network host --env {} --env {}", f"GLOO_SOCKET_IFNAME={rendezvous.interface}",
                        f"NCCL_SOCKET_IFNAME={rendezvous.interface}")
        launcher = Shell("torchrun --nnodes {} --node-rank {} --nproc-per-node 1 --master-addr {} --master-port {}",
                         rendezvous.nodes, rendezvous.rank, rendezvous.master_addr, rendezvous.port)
    gpus = Shell("--gpus all --ipc host --ulimit memlock=-1 --ulimit stack=67108864") if recipe.device == "cuda" \
        else Shell("")
    return Shell.compose([
        Shell("docker run --rm --name {}", CONTAINER), network, gpus,
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

