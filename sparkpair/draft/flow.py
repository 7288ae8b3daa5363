"""`sparkpair train-draft PROFILE`: the plan, then data -> (offline: hidden) -> train -> export -> evaluate, each
step resumable.

The plan comes first (`plan`, from what `sizing` asks of the nodes) and is reported before anything runs; a
plan that fits nowhere stops the run in one line naming the figure. Each step runs only when the draft's record
on the head (`record`) lacks it finished from the same inputs (and, for data and train, its output is still on
the head, unchanged); a finished step is recorded before the next starts, so Ctrl-C or a lost node at any step
costs only that step: the next run resumes there. Progress goes to a callback; the caller gets a `DraftResult`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sparkpair.bench import record as benchrecord
from sparkpair.bench import serving
from sparkpair.draft import data, evaluate, export, hidden, sizing, train, training
from sparkpair.draft.plan import Plan, make_plan
from sparkpair.draft.record import digest, name_problem, read_record, work_dir
from sparkpair.draft.run import DraftOptions, DraftResult, Run
from sparkpair.errors import SparkpairError, UsageError
from sparkpair.inventory import Inventory
from sparkpair.progress import Progress
from sparkpair.render.recipe import hf_cache_on_node
from sparkpair.transport import Node, Pair, Shell

__all__ = ["DraftOptions", "DraftResult", "check_options", "plan_steps", "reference_plan", "train_draft"]


def check_options(inventory: Inventory, options: DraftOptions) -> str:
    """The profile's current draft (None: it has none); UsageError for a bad name, image, profile or runtime."""
    problem = name_problem(options.name)
    if problem:
        raise UsageError(problem)
    train.check_image(options.image)
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


def _run(pair: Pair, inventory: Inventory, options: DraftOptions, progress: Progress) -> Run:
    split = data.split(data.read_prompts(options.prompts))
    return Run(pair, inventory, options, progress, read_record(pair.head, options.name, options.profile),
               work_dir(pair.head, options.name), split, DraftResult(options.name))


def _plan(run: Run) -> Plan:
    """The run's plan, from the nodes; kept on the run and in its result."""
    options = run.options
    target = run.inventory.profile(options.profile, options.runtime).target
    inputs = sizing.node_inputs(run.pair, run.inventory, options, len(run.split.train),
                                target_revision(run.head, run.inventory, target))
    run.plan, run.shape = make_plan(inputs), inputs.shape
    run.result.plan = run.plan.lines
    return run.plan


def reference_plan(inventory: Inventory, options: DraftOptions, why: str) -> Plan:
    """The plan without the nodes (a Spark's figures), for a dry run that cannot reach them."""
    samples = len(data.split(data.read_prompts(options.prompts)).train)
    return make_plan(sizing.reference_inputs(inventory, options, samples, why))


def train_draft(pair: Pair, inventory: Inventory, options: DraftOptions, progress: Progress) -> DraftResult:
    """The whole recipe; each step skipped when the record says it finished from the same inputs."""
    current = check_options(inventory, options)
    run = _run(pair, inventory, options, progress)
    plan = _plan(run)
    for line in plan.lines:
        run.say(f"plan: {line}")
    if plan.refusal:
        raise SparkpairError(plan.refusal, hint="docs/runbooks.md#train-draft-plan")
    run.head.check(Shell("mkdir -p -m 700 {} {}", run.work, f"{run.work}/home"))
    produced = _data(run, current)
    assert run.shape is not None
    states = hidden.compute(run, produced, run.shape) if run.mode == "offline" else {}
    trained = training.run_step(run, produced, states)
    _keep_throughput(run, trained, states)
    installed = _export(run, produced, trained)
    _evaluate(run, current, produced, installed)
    return run.result


def plan_steps(pair: Pair, inventory: Inventory, options: DraftOptions) -> tuple[Plan, dict[str, str]]:
    """The plan, and what a run would do, step by step ("runs", or "done already (<when>)"), from the record on
    the head; changes nothing. A step after one that runs runs too."""
    check_options(inventory, options)
    run = _run(pair, inventory, options, lambda event: None)
    plan, record = _plan(run), run.record
    steps = ["data", "hidden", "train", "export", "evaluate"] if plan.mode == "offline" else \
        ["data", "train", "export", "evaluate"]
    found = record.done("data", data_inputs(run))
    states: dict[str, str] = {}
    for step in steps:
        if found is None or record.steps.get(step) is None:
            states[step], found = "runs", None
            continue
        done = record.steps[step]
        states[step] = f"done already ({time.strftime('%Y-%m-%d %H:%M', time.localtime(done.finished))})"
    if states["data"] == "runs" or states["train"] == "runs":
        return plan, states
    produced = record.steps["data"].outputs
    made = record.steps.get("hidden")
    if plan.mode == "offline" and run.shape is not None and \
            record.done("hidden", hidden.capture_inputs(run, produced, run.shape)) is None:
        return plan, {**states, **{step: "runs" for step in steps[1:]}}
    if record.done("train", training.train_inputs(run, produced, made.outputs if made else {})) is not None:
        return plan, states
    kept, now = record.steps["train"].outputs.get("settings"), training.settings(run)
    changed = [name for name, value in now.items() if kept.get(name) != value] if isinstance(kept, dict) else []
    states.update({"train": f"runs ({', '.join(changed) or 'what it is made from'} changed)", "export": "runs",
                   "evaluate": "runs"})
    return plan, states


def target_revision(head: Node, inventory: Inventory, target: str) -> str:
    """The revision refs/main names for TARGET in the head's HF cache ('' when none, or not a revision)."""
    from sparkpair.render.recipe import repo_dirname

    raw = head.read(f"{hf_cache_on_node(inventory, head.home)}/hub/{repo_dirname(target)}/refs/main") or b""
    text = raw[:64].decode("ascii", "replace").strip()
    return text if len(text) == 40 and all(c in "0123456789abcdef" for c in text) else ""


def data_inputs(run: Run) -> str:
    """What the data step is made from: the prompts, the profile and runtime, the answer length, and the target's
    revision on the head (a new revision of a fine-tune re-runs every step)."""
    options = run.options
    target = run.inventory.profile(options.profile, options.runtime).target
    return digest("data", run.split.sha256, options.profile, options.runtime, options.max_tokens,
                  target_revision(run.head, run.inventory, target))


def _sha256_on(head: Node, path: str) -> str:
    result = head.run(Shell("sha256sum {} 2>/dev/null", path))
    found = result.stdout.split()[:1] if result.ok else []
    return found[0] if found and len(found[0]) == 64 else ""


def _data(run: Run, current: str) -> dict[str, Any]:
    """The target's answers to the training prompts, on the head as WORK/data.jsonl; then, while the current
    draft serves, its bench on the held-back prompts."""
    options = run.options
    path = f"{run.work}/data.jsonl"
    inputs = data_inputs(run)
    done = run.record.done("data", inputs)
    skipped = run.skip("data", inputs, done is not None and _sha256_on(run.head, path) == done.outputs.get("sha256"))
    if skipped is not None:
        return skipped
    evaluate.serve(run.pair, run.inventory, options.profile, options.runtime, "its current draft", run.progress)
    found = serving(run.pair, run.inventory.for_runtime(options.runtime), options.profile)
    endpoint = found.endpoint
    total = len(run.split.train)
    text = data.generate(endpoint.host, endpoint.port, endpoint.model, run.split.train, options.max_tokens,
                         lambda done_: run.say("data: the target answers the training prompts", key="draft data",
                                               done=done_, total=total, unit="prompts"), endpoint.headers())
    run.head.put(text, path, mode=0o600)
    revision = found.state.revisions.get(endpoint.model, "")
    return run.finish("data", inputs, {"sha256": _sha256_on(run.head, path), "conversations": total,
                                       "held_back": len(run.split.held_back), "target": endpoint.model,
                                       "target_revision": revision, "prompts": run.split.source,
                                       "current": _measure_current(run, current)})


def _keep_throughput(run: Run, trained: dict[str, Any], states: dict[str, Any]) -> None:
    """What this run measured, for the next plans' time (only when its steps ran)."""
    if "train" not in run.result.ran:
        return
    measured = {"train": float(trained.get("trained", {}).get("tokens_per_s") or 0),
                "extract": float(states.get("tokens_per_s") or 0)}
    sizing.write_throughput(run.head, run.device, run.mode, measured)


def _export(run: Run, produced: dict[str, Any], trained: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint, checked against the target, into the head's HF cache as the operator's repo."""
    options = run.options
    inputs = digest("export", run.record.steps["train"].inputs, options.name)
    skipped = run.skip("export", inputs)
    if skipped is not None:
        return skipped
    staging = f"{run.work}/{train.OUTPUT}/draft"
    hub = f"{hf_cache_on_node(run.inventory, run.head.home)}/hub"
    target, revision = produced.get("target", ""), produced.get("target_revision", "")
    from sparkpair.render.recipe import repo_dirname

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


def _held_back(run: Run) -> Path:
    """The held-back prompts as bench's JSONL in --out (the same split every run: it comes from the prompts)."""
    run.options.out_dir.mkdir(parents=True, exist_ok=True)
    path = run.options.out_dir / "held_back.jsonl"
    path.write_text(data.prompts_jsonl(run.split.held_back), encoding="utf-8")
    return path


def _current_label(current: str) -> str:
    return f"current draft ({current or 'none'})"


def _measure_current(run: Run, current: str) -> dict[str, Any]:
    """bench of what serves now (the profile with its current draft) on the held-back prompts, while it serves:
    the evaluation's first half, kept in the data step's record so that the evaluation needs one launch."""
    options = run.options
    measured = evaluate.measure(run.pair, run.inventory, options.profile, _current_label(current), _held_back(run),
                                options.requests, options.max_tokens, options.out_dir, run.progress)
    return {"rows": measured.rows, "settings": [options.requests, options.max_tokens]}


def _evaluate(run: Run, current: str, produced: dict[str, Any], installed: dict[str, Any]) -> None:
    """bench on the held-back prompts with the trained draft, beside the current draft's (measured in the data
    step when the settings agree, else served and measured again)."""
    options = run.options
    run.result.commit = installed.get("commit", "")
    inputs = digest("evaluate", installed.get("commit"), run.split.sha256, options.requests, options.max_tokens)
    skipped = run.skip("evaluate", inputs)
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
