"""The train step: ModelOpt's Eagle3 training in a container of the training image on the head (or data parallel
on the inventory's first --nodes nodes, rank 0 on the head), on the device and in the mode the plan chose;
WORK/train/draft on the head holds the export. The serving engine is stopped first (training needs the memory
the target holds); offline, the hidden states reach every other training node through launch's model sync
(content-verified, resumable, over the QSFP twins) and only the target's embedding and LM head are loaded.
"""

from __future__ import annotations

from typing import Any

from sparkpair.draft import export, train
from sparkpair.draft.record import digest, work_dir
from sparkpair.draft.run import Run
from sparkpair.engine import lifecycle, modelsync
from sparkpair.errors import Interrupted, SparkpairError
from sparkpair.inventory import Inventory
from sparkpair.render.recipe import hf_cache_on_node
from sparkpair.transport import Node, Pair, Shell

TRAIN_TIMEOUT_S = 6 * 3600.0
OUTPUT_CAP = 1 << 20
OUT_OF_MEMORY = 137       # the exit status of a container the kernel's OOM killer ended


def train_inputs(run: Run, produced: dict[str, Any], hidden: dict[str, Any]) -> str:
    """What the train step is made from: the data (and offline, the hidden states), every training option, the
    device, the script."""
    options = run.options
    return digest("train", produced.get("sha256"), options.steps, options.seed, options.image, options.nodes,
                  run.mode, run.device, options.max_length, options.draft_vocab, hidden.get("commit"),
                  train.script_text())


def settings(run: Run) -> dict[str, Any]:
    """The options a train step ran with, kept in its record (the dry run names what changed)."""
    options = run.options
    return {"--steps": options.steps, "--seed": options.seed, "--image": options.image, "--nodes": options.nodes,
            "--mode": run.mode, "--max-length": options.max_length, "--draft-vocab": options.draft_vocab,
            "device": run.device}


def training_nodes(pair: Pair, inventory: Inventory, nodes: int) -> list[Node]:
    """The connections to the inventory's first NODES nodes, head first: rank r runs on the r-th."""
    return [pair.nodes[node.name] for node in inventory.nodes[:nodes]]


def run_step(run: Run, produced: dict[str, Any], hidden: dict[str, Any]) -> dict[str, Any]:
    """The step (skipped when the record has it from the same inputs and the export is still on the head)."""
    options = run.options
    config = f"{run.work}/{train.OUTPUT}/draft/config.json"
    inputs = train_inputs(run, produced, hidden)
    skipped = run.skip("train", inputs, run.head.read(config) is not None)
    if skipped is not None:
        return skipped
    connections = training_nodes(run.pair, run.inventory, options.nodes)
    for connection in connections:
        if not connection.run(train.image_command(options.image)).stdout.strip():
            raise SparkpairError(f"{connection.name}: no image {options.image} in its Docker engine",
                                 hint="pass --image an image holding nvidia-modelopt[hf] "
                                      "(docs/runbooks.md#train-draft-image)")
    run.say("train: stopping the engine (training needs the memory the target holds)")
    lifecycle.stop(run.pair, run.inventory.for_runtime(options.runtime))
    target = produced.get("target", "")
    repos = [target] + ([hidden["repo"]] if hidden.get("repo") else [])
    if options.nodes > 1:  # the target (offline: and the hidden states) verified on every training node and linked
        modelsync.ensure_models(run.pair, run.inventory, repos, [c.name for c in connections], "hub", run.progress)
    elif hidden.get("repo"):
        modelsync.link(run.head, run.inventory, {hidden["repo"]: hidden["commit"]})
    text = run.head.read(f"{run.work}/data.jsonl") or b""
    commands = [_prepare_node(run, connection, rank, target, text, hidden.get("repo", ""), hidden.get("layers"))
                for rank, connection in enumerate(connections)]

    def seen(line: str) -> None:
        step = train.progress_of(line)
        if step is not None:
            accuracy = "" if step.accuracy is None else f", draft accuracy {step.accuracy:.0%}"
            run.say(f"train: ModelOpt Eagle3 ({run.mode}, {run.device}) on {options.nodes} node(s), "
                    f"loss {step.loss:.3f}{accuracy}", key="draft train", done=step.step, total=step.total,
                    unit="steps")

    try:
        code, tails = train.run_training(connections, commands, seen, TRAIN_TIMEOUT_S)
    except KeyboardInterrupt:
        raise Interrupted("train-draft interrupted during training; the next run starts the training again") from None
    if code != 0:
        raise _training_failed(code, [line for tail in tails.values() for line in tail])
    raw = run.head.read(f"{run.work}/{train.OUTPUT}/training.json")
    trained = export.parse_training(raw[:OUTPUT_CAP] if raw else b"")
    return run.finish("train", inputs, {"trained": trained, "settings": settings(run)})


def _prepare_node(run: Run, connection: Node, rank: int, target: str, data_text: bytes, hidden_repo: str,
                  layers: list[int] | None) -> Shell:
    """The node's working folder with the script (and on the worker the data), no earlier output; its command."""
    options = run.options
    work = work_dir(connection, options.name)
    connection.check(Shell("mkdir -p -m 700 {} {} && rm -rf {}", work, f"{work}/home", f"{work}/{train.OUTPUT}"))
    connection.put(train.script_text(), f"{work}/{train.SCRIPT}", mode=0o644)
    if rank > 0:
        connection.put(data_text, f"{work}/data.jsonl", mode=0o600)
    ids = connection.check(Shell("printf '%s:%s' \"$(id -u)\" \"$(id -g)\"")).strip()
    rendezvous = train.rendezvous_of(run.inventory, options.nodes, rank) if options.nodes > 1 else None
    recipe = train.Recipe(steps=options.steps, seed=options.seed, device=run.device, max_length=options.max_length,
                          draft_vocab=options.draft_vocab, hidden_repo=hidden_repo, aux_layers=tuple(layers or ()))
    return train.train_command(image=options.image, hf_cache=hf_cache_on_node(run.inventory, connection.home),
                               work=work, target=target, recipe=recipe, user=ids, rendezvous=rendezvous)


def _training_failed(code: int, tail: list[str]) -> SparkpairError:
    """The training's failure as one error: its own refusal, out of memory (exit 137 or the line) or otherwise."""
    refusal = next((line.strip() for line in reversed(tail) if line.startswith(train.ERROR)), "")
    if refusal:
        return SparkpairError(f"training refused: {refusal.removeprefix(train.ERROR).strip()[:300]}",
                              hint="docs/runbooks.md#train-draft-training-failed")
    last = " | ".join(line.strip() for line in tail[-3:] if line.strip()) or "no output"
    if code == OUT_OF_MEMORY or any("out of memory" in line.lower() for line in tail):
        return SparkpairError(f"training ran out of memory (exit {code}): {last}",
                              hint="docs/runbooks.md#train-draft-out-of-memory")
    return SparkpairError(f"training failed (exit {code}): {last}", hint="docs/runbooks.md#train-draft-training-failed")
