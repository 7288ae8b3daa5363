"""`sparkpair train-draft`."""

from __future__ import annotations

from pathlib import Path

import click

from sparkpair.cli.app import App, cli, pass_app
from sparkpair.cli.options import known_profile, writable_target


@cli.command("train-draft")
@click.argument("profile", required=False)
@click.option("--name", metavar="ORG/NAME",
              help="The trained draft's repo name in the model cache (a profile's `draft` may name it); required.")
@click.option("--prompts", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The operator's own JSONL instead of the bundled prompts: {\"prompt\": ...}, {\"messages\": [...]} "
                   "or ModelOpt's conversations {\"conversations\": [...]} (the target answers their first turns); "
                   "every 5th is held back for the evaluation.")
@click.option("--steps", type=click.IntRange(1, 1000000), default=200, show_default=True, help="Training steps.")
@click.option("--max-tokens", type=click.IntRange(1, 32768), default=128, show_default=True,
              help="Tokens the target generates per training prompt, and bench per request.")
@click.option("--runtime", type=click.Choice(["vllm"]), default="vllm", show_default=True,
              help="The runtime that serves the target for the data and the evaluation.")
@click.option("--image", default=None, metavar="IMAGE",
              help="The training image on every training node, holding nvidia-modelopt[hf] (default "
                   "nvcr.io/nvidia/pytorch:25.06-py3 with nvidia-modelopt[hf] added: docs/runbooks.md#train-draft-image).")
@click.option("--mode", type=click.Choice(["auto", "online", "offline"]), default="auto", show_default=True,
              help="online: the target in memory beside the draft on one node; offline: the engine serving the target "
                   "across the nodes computes its hidden states to disk, then only the draft trains; auto: the plan's "
                   "choice (online when it fits one Spark).")
@click.option("--max-length", type=click.IntRange(16, 131072), default=2048, show_default=True,
              help="Tokens of one training sample at most (the plan's disk and memory figures use it).")
@click.option("--draft-vocab", type=click.IntRange(min=0), default=0, show_default=True, metavar="N",
              help="Draft vocabulary compression: the draft predicts the N tokens most frequent in the training data "
                   "(ModelOpt's d2t mapping); 0 keeps the target's vocabulary.")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True, metavar="K",
              help="Train on the head alone, or data parallel on the inventory's first K nodes, head first "
                   "(torchrun over the QSFP links; K at most the inventory's nodes).")
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True)
@click.option("--requests", "requests_", type=click.IntRange(1, 10000), default=8, show_default=True,
              help="bench requests per draft on the held-back prompts.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("train-draft-results"), show_default=True, help="Where bench's files of both drafts go.")
@click.option("--dry-run", is_flag=True, help="Print the plan (mode, device, memory and disk per node, time) and "
                                              "which steps would run or are done already; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="The result as JSON on stdout.")
@pass_app
def train_draft_cmd(app: App, profile: str | None, name: str | None, prompts: Path | None, steps: int, max_tokens: int,
                    runtime: str, image: str | None, mode: str, max_length: int, draft_vocab: int, nodes: int, seed: int,
                    requests_: int, out_dir: Path, dry_run: bool, as_json: bool) -> int:
    """Train an Eagle3 draft for PROFILE's target with NVIDIA ModelOpt from the target's own answers, export
    it into the model cache as NAME and bench it against the profile's current draft (resumable).

    A plan comes first (printed by --dry-run and at the start): online or offline, the memory and disk each
    node needs, the device. Training runs in a container of the training image: on a Spark's GPU (--gpus all,
    bf16) when torch in the image sees it, else on the CPU (float32: the simulated pair)."""
    from sparkpair import report
    from sparkpair.draft import train
    from sparkpair.draft.flow import DraftOptions, check_options, plan_steps, reference_plan, train_draft
    from sparkpair.errors import ConnectError
    from sparkpair.report import draft as draft_report

    inv = app.inventory  # a bad inventory is named first, as by every command
    if not name:
        raise click.UsageError("--name ORG/NAME is required: the trained draft's repo name, e.g. local/qwen3-eagle3-mine")
    options = DraftOptions(profile=known_profile(inv, profile), name=name, runtime=runtime, prompts=prompts,
                           steps=steps, max_tokens=max_tokens, image=image or train.DEFAULT_IMAGE, seed=seed,
                           requests=requests_, out_dir=out_dir, nodes=nodes, mode=mode, max_length=max_length,
                           draft_vocab=draft_vocab)
    check_options(inv, options)  # a bad name, image, profile or prompts file is refused before any node is asked
    if not dry_run:
        writable_target(out_dir, "--out", directory=True)
    with app.pair() as pair:
        if dry_run:
            try:
                pair.connect()
            except ConnectError as error:  # the plan on a Spark's figures, then why the steps are unknown
                draft_report.draft_plan(reference_plan(inv, options, "the nodes were not reached"), {}, as_json)
                raise error from None
            plan, states = plan_steps(pair, inv, options)
            draft_report.draft_plan(plan, states, as_json)
            return 0
        pair.connect(changing=True)
        with app.locked(pair, f"train-draft {options.profile}"):
            result = train_draft(pair, inv, options, report.event)
    if as_json:
        report.emit_json(draft_report.as_json(result))
    else:
        draft_report.draft_result(result)
    return 0
