"""`sparkpair train-draft PROFILE`: data -> train -> export -> evaluate, each step resumable.

Each step runs only when the draft's record on the head (`record`) lacks it finished from the same inputs
(and, for data and train, its output is still on the head, unchanged); a finished step is recorded before
the next starts, so Ctrl-C or a lost node at any step costs only that step: the next run resumes there.
Progress goes to a callback; the caller gets a `DraftResult`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkpair.bench import record as benchrecord
from sparkpair.bench import serving
from sparkpair.draft import data, evaluate, export, train
from sparkpair.draft.record import DraftRecord, digest, name_problem, read_record, work_dir, write_record
from sparkpair.engine import lifecycle, modelsync
from sparkpair.errors import Interrupted, SparkpairError, UsageError
from sparkpair.inventory import Inventory
from sparkpair.progress import Event, Progress
from sparkpair.render.recipe import hf_cache_on_node, repo_dirname
from sparkpair.transport import Node, Pair, Shell

TRAIN_TIMEOUT_S = 6 * 3600.0
OUTPUT_CAP = 1 << 20
OUT_OF_MEMORY = 137       # the exit status of a container the kernel's OOM killer ended


@dataclass(frozen=True)
class DraftOptions:
    """What `sparkpair train-draft` was asked to do (the CLI builds it)."""

    profile: str
    name: str
    runtime: str = "vllm"
    prompts: Path | None = None
    steps: int = 200
    max_tokens: int = 128
    image: str = train.DEFAULT_IMAGE
    seed: int = 0
    requests: int = 8
    out_dir: Path = Path("train-draft-results")
    nodes: int = 1                      # K > 1: data parallel on the first K nodes, head first (torchrun over QSFP)


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


@dataclass
class _Run:
    pair: Pair
    inventory: Inventory
    options: DraftOptions
    progress: Progress
    record: DraftRecord
    work: str
    split: data.Split
    result: DraftResult

    @property
    def head(self) -> Node:
        return self.pair.head

    def say(self, text: str, **amount: Any) -> None:
        self.progress(Event("train-draft", text, **amount))

    def finish(self, step: str, inputs: str, outputs: dict[str, Any]) -> dict[str, Any]:
        self.record.finish(step, inputs, time.time(), outputs)
        write_record(self.head, self.record)
        self.result.ran.append(step)
        return outputs


def check_options(inventory: Inventory, options: DraftOptions) -> str:
    """The profile's current draft (None: it has none); UsageError for a bad name, profile or runtime."""
    problem = name_problem(options.name)
    if problem:
        raise UsageError(problem)
    data.read_prompts(options.prompts)   # a bad prompts file, too, before any node is asked
    if not 1 <= options.nodes <= len(inventory.nodes):
        raise UsageError(f"--nodes {options.nodes}: the inventory has {len(inventory.nodes)} nodes",
                         hint=f"--nodes 1 to {len(inventory.nodes)}: the first K nodes of the inventory, head first")
    try:
        profile = inventory.profile(options.profile, options.runtime)
    except KeyError as error:
        raise UsageError(str(error.args[0])) from None
    if options.name in (profile.target, profile.draft):
        role = "target" if options.name == profile.target else "draft"
        raise UsageError(f"--name {options.name}: that is the profile's own {role}",
                         hint="name the trained draft something new, e.g. local/<target>-eagle3")
    return profile.draft or ""


def train_draft(pair: Pair, inventory: Inventory, options: DraftOptions, progress: Progress) -> DraftResult:
    """The whole recipe; each step skipped when the record says it finished from the same inputs."""
    current = check_options(inventory, options)
    split = data.split(data.read_prompts(options.prompts))
    head = pair.head
    run = _Run(pair, inventory, options, progress, read_record(head, options.name, options.profile),
               work_dir(head, options.name), split, DraftResult(options.name))
    head.check(Shell("mkdir -p -m 700 {} {}", run.work, f"{run.work}/home"))
    produced = _data(run, current)
    trained = _train(run, produced)
    installed = _export(run, produced, trained)
    _evaluate(run, current, produced, installed)
    return run.result


def plan_steps(pair: Pair, inventory: Inventory, options: DraftOptions) -> dict[str, str]:
    """What a run would do, step by step ("runs", or "done already (<when>)"), from the record on the head;
    changes nothing. A step after one that runs runs too."""
    check_options(inventory, options)
    split = data.split(data.read_prompts(options.prompts))
    record = read_record(pair.head, options.name, options.profile)
    run = _Run(pair, inventory, options, lambda event: None, record, work_dir(pair.head, options.name), split,
               DraftResult(options.name))
    found = record.done("data", data_inputs(run))
    plan: dict[str, str] = {}
    for step in ("data", "train", "export", "evaluate"):
        if found is None or record.steps.get(step) is None:
            plan[step] = "runs"
            found = None
            continue
        done = record.steps[step]
        plan[step] = f"done already ({time.strftime('%Y-%m-%d %H:%M', time.localtime(done.finished))})"
    if plan["data"] == "runs" or plan["train"] == "runs":
        return plan
    train_inputs = digest("train", record.steps["data"].outputs.get("sha256"), options.steps, options.seed, options.image,
                          options.nodes, train.script_text())
    if record.done("train", train_inputs) is None:
        plan.update({"train": "runs (--steps, --seed, --image or --nodes changed)", "export": "runs",
                     "evaluate": "runs"})
    return plan


def _skip(run: _Run, step: str, inputs: str, present: bool = True) -> dict[str, Any] | None:
    done = run.record.done(step, inputs)
    if done is None or not present:
        return None
    run.result.skipped.append(step)
    run.say(f"{step}: done already (finished {time.strftime('%Y-%m-%d %H:%M', time.localtime(done.finished))}), skipped")
    return done.outputs


def _sha256_on(head: Node, path: str) -> str:
    result = head.run(Shell("sha256sum {} 2>/dev/null", path))
    found = result.stdout.split()[:1] if result.ok else []
    return found[0] if found and len(found[0]) == 64 else ""


def target_revision(head: Node, inventory: Inventory, target: str) -> str:
    """The revision refs/main names for TARGET in the head's HF cache ('' when none, or not a revision)."""
    raw = head.read(f"{hf_cache_on_node(inventory, head.home)}/hub/{repo_dirname(target)}/refs/main") or b""
    text = raw[:64].decode("ascii", "replace").strip()
    return text if len(text) == 40 and all(c in "0123456789abcdef" for c in text) else ""


def data_inputs(run: _Run) -> str:
    """What the data step is made from: the prompts, the profile and runtime, the answer length, and the target's
    revision on the head (a new revision of a fine-tune re-runs every step)."""
    options = run.options
    target = run.inventory.profile(options.profile, options.runtime).target
    return digest("data", run.split.sha256, options.profile, options.runtime, options.max_tokens,
                  target_revision(run.head, run.inventory, target))


def _data(run: _Run, current: str) -> dict[str, Any]:
    """The target's answers to the training prompts, on the head as WORK/data.jsonl; then, while the current
    draft serves, its bench on the held-back prompts."""
    options = run.options
    path = f"{run.work}/data.jsonl"
    inputs = data_inputs(run)
    done = run.record.done("data", inputs)
    skipped = _skip(run, "data", inputs, done is not None and _sha256_on(run.head, path) == done.outputs.get("sha256"))
    if skipped is not None:
        return skipped
    evaluate.serve(run.pair, run.inventory, options.profile, options.runtime, "its current draft", run.progress)
    found = serving(run.pair, run.inventory.for_runtime(options.runtime), options.profile)
    endpoint = found.endpoint
    total = len(run.split.train)
    text = data.generate(endpoint.host, endpoint.port, endpoint.model, run.split.train, options.max_tokens,
                         lambda done_: run.say("data: the target answers the training prompts", key="draft data",
                                               done=done_, total=total, unit="prompts"))
    run.head.put(text, path, mode=0o600)
    revision = found.state.revisions.get(endpoint.model, "")
    return run.finish("data", inputs, {"sha256": _sha256_on(run.head, path), "conversations": total,
                                       "held_back": len(run.split.held_back), "target": endpoint.model,
                                       "target_revision": revision, "prompts": run.split.source,
                                       "current": _measure_current(run, current)})


def _train(run: _Run, produced: dict[str, Any]) -> dict[str, Any]:
    """ModelOpt's Eagle3 training in a container on the head (or data parallel on the inventory's first
    --nodes nodes, rank 0 on the head); WORK/train/draft on the head holds the export."""
    options = run.options
    config = f"{run.work}/{train.OUTPUT}/draft/config.json"
    inputs = digest("train", produced.get("sha256"), options.steps, options.seed, options.image, options.nodes,
                    train.script_text())
    skipped = _skip(run, "train", inputs, run.head.read(config) is not None)
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
    if options.nodes > 1:  # the target verified on every training node and linked where the container reads it
        modelsync.ensure_models(run.pair, run.inventory, [target], [c.name for c in connections], "hub", run.progress)
    text = run.head.read(f"{run.work}/data.jsonl") or b""
    commands = [_prepare_node(run, connection, rank, target, text) for rank, connection in enumerate(connections)]

    def seen(line: str) -> None:
        step = train.progress_of(line)
        if step is not None:
            accuracy = "" if step.accuracy is None else f", draft accuracy {step.accuracy:.0%}"
            run.say(f"train: ModelOpt Eagle3 on {options.nodes} node(s), loss {step.loss:.3f}{accuracy}",
                    key="draft train", done=step.step, total=step.total, unit="steps")

    try:
        code, tails = train.run_training(connections, commands, seen, TRAIN_TIMEOUT_S)
    except KeyboardInterrupt:
        raise Interrupted("train-draft interrupted during training; the next run starts the training again") from None
    if code != 0:
        raise _training_failed(code, [line for tail in tails.values() for line in tail])
    raw = run.head.read(f"{run.work}/{train.OUTPUT}/training.json")
    trained = export.parse_training(raw[:OUTPUT_CAP] if raw else b"")
    return run.finish("train", inputs, {"trained": trained})


def training_nodes(pair: Pair, inventory: Inventory, nodes: int) -> list[Node]:
    """The connections to the inventory's first NODES nodes, head first: rank r runs on the r-th."""
    return [pair.nodes[node.name] for node in inventory.nodes[:nodes]]


def _prepare_node(run: _Run, connection: Node, rank: int, target: str, data_text: bytes) -> Shell:
    """The node's working folder with the script (and on the worker the data), no earlier output; its command."""
    work = work_dir(connection, run.options.name)
    connection.check(Shell("mkdir -p -m 700 {} {} && rm -rf {}", work, f"{work}/home", f"{work}/{train.OUTPUT}"))
    connection.put(train.script_text(), f"{work}/{train.SCRIPT}", mode=0o644)
    if rank > 0:
        connection.put(data_text, f"{work}/data.jsonl", mode=0o600)
    ids = connection.check(Shell("printf '%s:%s' \"$(id -u)\" \"$(id -g)\"")).strip()
    rendezvous = train.rendezvous_of(run.inventory, run.options.nodes, rank) if run.options.nodes > 1 else None
    return train.train_command(image=run.options.image, hf_cache=hf_cache_on_node(run.inventory, connection.home),
                               work=work, target=target, steps=run.options.steps, seed=run.options.seed, user=ids,
                               rendezvous=rendezvous)


def _training_failed(code: int, tail: list[str]) -> SparkpairError:
    """The training's failure as one error: out of memory (exit 137 or the line) or otherwise, with the last lines."""
    last = " | ".join(line.strip() for line in tail[-3:] if line.strip()) or "no output"
    if code == OUT_OF_MEMORY or any("out of memory" in line.lower() for line in tail):
        return SparkpairError(f"training ran out of memory (exit {code}): {last}",
                              hint="docs/runbooks.md#train-draft-out-of-memory")
    return SparkpairError(f"training failed (exit {code}): {last}", hint="docs/runbooks.md#train-draft-training-failed")


def _export(run: _Run, produced: dict[str, Any], trained: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint, checked against the target, into the head's HF cache as the operator's repo."""
    options = run.options
    inputs = digest("export", run.record.steps["train"].inputs, options.name)
    skipped = _skip(run, "export", inputs)
    if skipped is not None:
        return skipped
    staging = f"{run.work}/{train.OUTPUT}/draft"
    hub = f"{hf_cache_on_node(run.inventory, run.head.home)}/hub"
    target, revision = produced.get("target", ""), produced.get("target_revision", "")
    draft_config = run.head.read(f"{staging}/config.json") or b""
    target_config = run.head.read(f"{hub}/{repo_dirname(target)}/snapshots/{revision}/config.json") or b""
    problems = export.draft_problems(draft_config, target_config)
    if problems:
        raise SparkpairError(f"the trained draft does not fit {target}: {problems[0]}",
                             hint="docs/runbooks.md#train-draft-architecture-mismatch")
    run.head.put(export.training_record(name=options.name, profile=options.profile, target=target,
                                        target_revision=revision, data_sha256=produced.get("sha256", ""),
                                        prompts_source=produced.get("prompts", ""), steps=options.steps,
                                        seed=options.seed, trained=trained.get("trained", {})),
                 f"{staging}/{export.RECORD_FILE}", mode=0o644)
    result = run.head.run(Shell("python3 - {} {} {}", staging, hub, export.repo_folder(options.name)),
                          stdin=export.installer_text(), timeout=600.0)
    if not result.ok:
        raise SparkpairError(f"{run.head.name}: installing the draft failed: {result.stderr.strip()[-300:]}",
                             hint="docs/runbooks.md#train-draft-export-refused")
    commit, files = export.parse_installed(result.stdout)
    run.result.commit = commit
    run.say(f"export: {options.name} at revision {commit[:12]} in {run.head.name}'s HF cache ({len(files)} files)")
    return run.finish("export", inputs, {"commit": commit, "files": files})


def _held_back(run: _Run) -> Path:
    """The held-back prompts as bench's JSONL in --out (the same split every run: it comes from the prompts)."""
    run.options.out_dir.mkdir(parents=True, exist_ok=True)
    path = run.options.out_dir / "held_back.jsonl"
    path.write_text(data.prompts_jsonl(run.split.held_back), encoding="utf-8")
    return path


def _current_label(current: str) -> str:
    return f"current draft ({current or 'none'})"


def _measure_current(run: _Run, current: str) -> dict[str, Any]:
    """bench of what serves now (the profile with its current draft) on the held-back prompts, while it serves:
    the evaluation's first half, kept in the data step's record so that the evaluation needs one launch."""
    options = run.options
    measured = evaluate.measure(run.pair, run.inventory, options.profile, _current_label(current), _held_back(run),
                                options.requests, options.max_tokens, options.out_dir, run.progress)
    return {"rows": measured.rows, "settings": [options.requests, options.max_tokens]}


def _evaluate(run: _Run, current: str, produced: dict[str, Any], installed: dict[str, Any]) -> None:
    """bench on the held-back prompts with the trained draft, beside the current draft's (measured in the data
    step when the settings agree, else served and measured again)."""
    options = run.options
    run.result.commit = installed.get("commit", "")
    inputs = digest("evaluate", installed.get("commit"), run.split.sha256, options.requests, options.max_tokens)
    skipped = _skip(run, "evaluate", inputs)
    if skipped is not None:
        run.result.summary = skipped.get("summary", {})
        return
    held_back = _held_back(run)
    kept = produced.get("current") or {}
    if kept.get("settings") == [options.requests, options.max_tokens] and kept.get("rows"):
        first = evaluate.Measured(_current_label(current), list(kept["rows"]), {})
    else:
        evaluate.serve(run.pair, run.inventory, options.profile, options.runtime, _current_label(current),
                       run.progress)
        first = evaluate.measure(run.pair, run.inventory, options.profile, _current_label(current), held_back,
                                 options.requests, options.max_tokens, options.out_dir, run.progress)
    label = f"trained draft ({options.name})"
    inventory = evaluate.with_draft(run.inventory, options.profile, options.runtime, options.name)
    evaluate.serve(run.pair, inventory, options.profile, options.runtime, label, run.progress)
    second = evaluate.measure(run.pair, inventory, options.profile, label, held_back, options.requests,
                              options.max_tokens, options.out_dir, run.progress)
    rows, files = evaluate.side_by_side(first, second, options.out_dir)
    run.result.rows, run.result.files, run.result.table = rows, files, benchrecord.table(rows)
    run.result.summary = evaluate.summary(rows)
    run.finish("evaluate", inputs, {"summary": run.result.summary})
