"""What a train-draft plan is made of, asked of the nodes (one probe round each): each serving and training
node's memory and free disk under the HF cache, the target's config.json and size in the head's cache, what
torch in the training image trains on at the head, and the throughput earlier runs measured there
(`~/.sparkpair/state/drafts/throughput.json`, read capped and typed, written after each training). Without the
nodes, the plan stands on a Spark's figures and the built-in targets' shapes (`plan.KNOWN_SHAPES`)."""

from __future__ import annotations

import json
from typing import Any

from sparkpair import boundedjson, paths, probes
from sparkpair.draft import plan
from sparkpair.draft.run import DraftOptions
from sparkpair.errors import SparkpairError, UsageError
from sparkpair.inventory import Inventory
from sparkpair.probes import docker, host, models, training
from sparkpair.render.recipe import hf_cache_on_node
from sparkpair.transport import Node, Pair

GIB = 1024 ** 3
CONFIG_CAP = 1 << 20
THROUGHPUT_CAP = 64 << 10
THROUGHPUT = f"{paths.DRAFT_STATE_DIR}/throughput.json"
DEVICE_TIMEOUT_S = 300.0     # a container of the training image importing torch


def _shape(inventory: Inventory, target: str, raw: bytes | None, where: str) -> plan.TargetShape:
    if raw:
        try:
            return plan.parse_shape(raw[:CONFIG_CAP], f"{target}'s config.json on {where}")
        except ValueError as error:
            raise SparkpairError(f"{where}: {target}: {error}", hint="check the model files with sparkpair doctor") \
                from None
    known = plan.KNOWN_SHAPES.get(target)
    if known is None:
        raise UsageError(f"cannot plan the training of a draft for {target}: its config.json is not on the head yet",
                         hint=f"sparkpair launch the profile once (it fetches {target}), then train-draft again")
    return known


def _common(inventory: Inventory, options: DraftOptions, samples: int) -> dict[str, Any]:
    profile = inventory.profile(options.profile, options.runtime)
    return {"target": profile.target, "headroom": int(profile.headroom_gib * GIB), "samples": samples,
            "max_length": options.max_length, "steps": options.steps, "draft_vocab": options.draft_vocab,
            "mode": options.mode}


def reference_inputs(inventory: Inventory, options: DraftOptions, samples: int, why: str) -> plan.PlanInputs:
    """The plan's inputs without the nodes: Sparks' figures, the built-in shape, the profile's target size."""
    profile = inventory.profile(options.profile, options.runtime)
    ranks = [plan.NodeRoom(node.name) for node in inventory.nodes[:profile.ranks]]
    trainers = [plan.NodeRoom(node.name) for node in inventory.nodes[:options.nodes]]
    return plan.PlanInputs(**_common(inventory, options, samples), shape=_shape(inventory, profile.target, None, ""),
                           target_bytes=int(profile.target_gib * GIB), target_bytes_source="the profile's target_gib",
                           ranks=ranks, trainers=trainers, device="cuda",
                           device_reason=f"a Spark's GB10, assumed: {why}")


def _room(name: str, facts: probes.NodeFacts, cache: str) -> plan.NodeRoom:
    meminfo, free = facts.get(host.MEMINFO), facts.get(host.free_bytes(cache))
    if not isinstance(meminfo, dict) or not meminfo.get("MemTotal"):
        return plan.NodeRoom(name, disk_free=free if isinstance(free, int) else plan.SPARK_DISK)
    total = meminfo["MemTotal"] * 1024
    keeps = max(0, total - meminfo.get("MemAvailable", meminfo["MemTotal"]) * 1024)
    return plan.NodeRoom(name, total, keeps, free if isinstance(free, int) else plan.SPARK_DISK, asked=True)


def node_inputs(pair: Pair, inventory: Inventory, options: DraftOptions, samples: int, revision: str) -> \
        plan.PlanInputs:
    """The plan's inputs asked of the nodes."""
    profile = inventory.profile(options.profile, options.runtime)
    cache = inventory.container.hf_cache
    rank_names = [node.name for node in inventory.nodes[:profile.ranks]]
    train_names = [node.name for node in inventory.nodes[:options.nodes]]
    names = list(dict.fromkeys(rank_names + train_names))
    asked = [host.MEMINFO, host.free_bytes(cache)]
    facts = dict(pair.each(lambda c: probes.gather(c, asked), names=names).raise_failures().values)
    rooms = {name: _room(name, facts[name], cache) for name in names}
    head = pair.head
    manifest = probes.gather(head, [models.manifest(cache, profile.target)]).get(models.manifest(cache, profile.target))
    complete = isinstance(manifest, models.RepoManifest) and manifest.complete
    hub = f"{hf_cache_on_node(inventory, head.home)}/hub/models--{profile.target.replace('/', '--')}"
    raw = head.read(f"{hub}/snapshots/{revision}/config.json", CONFIG_CAP) if revision else None
    device, reason = device_of(head, options.image)
    return plan.PlanInputs(
        **_common(inventory, options, samples), shape=_shape(inventory, profile.target, raw, head.name),
        target_bytes=manifest.size if complete and isinstance(manifest, models.RepoManifest) else
        int(profile.target_gib * GIB),
        target_bytes_source=f"its files in {head.name}'s cache" if complete else "the profile's target_gib",
        ranks=[rooms[name] for name in rank_names], trainers=[rooms[name] for name in train_names],
        device=device, device_reason=reason, throughput=read_throughput(head, device))


def device_of(head: Node, image: str) -> tuple[str, str]:
    """What the training trains on at the head, and why: torch in IMAGE, given the GPUs when the node has one and
    its Docker the NVIDIA runtime, says whether CUDA is usable (`decide_device`)."""
    found = probes.gather(head, [host.GPUS, docker.DOCKER_INFO])
    gpus, info = found.get(host.GPUS), found.get(docker.DOCKER_INFO)
    gpu = gpus[0].name if isinstance(gpus, list) and gpus else ""
    runtime = isinstance(info, docker.DockerInfo) and "nvidia" in info.runtimes
    probe = training.torch_device(image, bool(gpu and runtime))
    torch = probes.gather(head, [probe], timeout=DEVICE_TIMEOUT_S).get(probe)
    return decide_device(head.name, image, gpu, torch if isinstance(torch, training.TorchDevice) else None)


def decide_device(node: str, image: str, gpu: str, torch: training.TorchDevice | None) -> tuple[str, str]:
    """(cuda|cpu, why): what torch in the image said (None: the image is not on the node yet, so the node's GPU as
    nvidia-smi lists it decides, said to be assumed). A GPU nvidia-smi lists but torch cannot use (a CPU build
    of torch: the simulated pair's stand-in nvidia-smi lists a GB10) trains on the CPU, and the plan says so."""
    if torch is None:
        return ("cuda" if gpu else "cpu"), f"assumed: {image} is not on {node} yet (train-draft needs it there)"
    if torch.device == "cuda":
        return "cuda", f"torch {torch.torch} in {image} sees {torch.gpu or 'the GPU'} (CUDA {torch.cuda or '?'})"
    if gpu:
        return "cpu", (f"torch {torch.torch} in {image} sees no CUDA device although nvidia-smi on {node} lists {gpu} "
                       "(a CPU build of torch, as on the simulated pair): it trains on the CPU")
    return "cpu", f"{node} has no GPU (nvidia-smi lists none)"


def read_throughput(head: Node, device: str) -> dict[str, dict[str, float]]:
    """The tokens/s earlier runs measured on DEVICE, per mode: {"online": {"train": ..}, "offline": {.., "extract"}}."""
    raw = head.read(paths.under_home(THROUGHPUT, head.home), THROUGHPUT_CAP)
    try:
        data = boundedjson.loads(raw) if raw else {}
    except ValueError:   # hostile: a file sparkpair cannot read counts as no measurement
        return {}
    found: dict[str, dict[str, float]] = {}
    for mode in ("online", "offline"):
        entry = data.get(f"{device}/{mode}") if isinstance(data, dict) else None
        if isinstance(entry, dict):
            found[mode] = {name: float(value) for name, value in entry.items() if name in ("train", "extract")
                           and isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0}
    return found


def write_throughput(head: Node, device: str, mode: str, measured: dict[str, float]) -> None:
    """Keep what this run measured on DEVICE in MODE for the next plans (the rest of the file as it was)."""
    path = paths.under_home(THROUGHPUT, head.home)
    raw = head.read(path, THROUGHPUT_CAP)
    try:
        data = boundedjson.loads(raw) if raw else {}
    except ValueError:
        data = {}
    data = data if isinstance(data, dict) else {}
    data[f"{device}/{mode}"] = {name: round(value, 3) for name, value in measured.items() if value > 0}
    head.put(json.dumps(data, indent=1, sort_keys=True), path, mode=0o600)
