"""Train an Eagle3 draft for a target with NVIDIA ModelOpt and export it; runs INSIDE the ModelOpt
container on a node (never imported by sparkpair itself):

    python train_eagle3.py --target DIR --data FILE --steps N --out DIR [--seed S] [--max-length L]

ModelOpt's speculative decoding recipe (examples/speculative_decoding of TensorRT Model Optimizer):
load the target with transformers, take ModelOpt's EAGLE3_DEFAULT_CFG with its architecture sized
to the target (heads, key-value heads, head size, MLP width, rope and norm from the target's
config; ModelOpt itself copies hidden size, vocabulary and positions), `mtsp.convert(model,
[("eagle", config)])`, train the Eagle3 head (the target frozen) with the Hugging Face Trainer on
the conversations in FILE (one JSON object a line, {"conversations": [{"role", "content"}, ...]}:
what sparkpair's data step keeps), then `export_speculative_decoding` into OUT/draft and
OUT/training.json (steps, losses, versions). Data parallel across nodes when started by torchrun
(the Trainer reads WORLD_SIZE/RANK; gloo on CPU). Progress: one line `sparkpair-train step=N/M
loss=X acc=A` per logged step on stdout, then `sparkpair-train done`.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from pathlib import Path

PROGRESS = "sparkpair-train"
# Architecture fields an Eagle3 head takes from its target (ModelOpt fills hidden size, vocabulary
# and positions itself); intermediate_size falls back to the MoE expert width times experts per token.
SIZED_FROM_TARGET = ("num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta")


def arguments(argv: list) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="train_eagle3.py")
    parser.add_argument("--target", required=True, type=Path)
    parser.add_argument("--data", required=True, type=Path)
    parser.add_argument("--steps", required=True, type=int)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    return parser.parse_args(argv)


def sized_config(target_config, defaults: dict) -> dict:
    """ModelOpt's Eagle3 default config with its architecture sized to TARGET_CONFIG."""
    config = copy.deepcopy(defaults)
    arch = config["eagle_architecture_config"]
    rope = getattr(target_config, "rope_parameters", None) or {}
    for name in SIZED_FROM_TARGET:
        value = getattr(target_config, name, None)
        if value is None and name in rope:  # transformers 5 keeps rope_theta among the rope parameters
            value = rope[name]
        if value is not None:
            arch[name] = value
    width = getattr(target_config, "intermediate_size", None)
    if width is None:
        width = target_config.moe_intermediate_size * target_config.num_experts_per_tok
    arch["intermediate_size"] = int(width)
    arch["rope_scaling"] = {"rope_type": "default", "rope_theta": arch["rope_theta"]}
    config["eagle_use_torch_compile"] = False   # CPU, and a few steps: compiling costs more than it saves
    config["eagle_export_rope_scaling"] = {}     # serve with the rope it was trained with (no yarn injected)
    return config


def conversations(path: Path) -> list:
    """The conversations of the data file (sparkpair wrote and validated it)."""
    rows = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                rows.append(json.loads(line)["conversations"])
    if not rows:
        raise SystemExit(f"{path}: no conversations")
    return rows


class ConversationSet:
    """The conversations tokenized with the target's chat template, padded to one length."""

    def __init__(self, rows: list, tokenizer, max_length: int) -> None:
        import torch

        self.items = []
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        for messages in rows:
            text = tokenizer.apply_chat_template(messages, tokenize=False)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"][:max_length]
            mask = [1] * len(ids) + [0] * (max_length - len(ids))
            ids = ids + [pad] * (max_length - len(ids))
            self.items.append({"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask),
                               "labels": torch.tensor(ids)})

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict:
        return self.items[index]


def main(argv: list) -> int:
    """Convert, train, export; returns the exit code."""
    args = arguments(argv)
    import modelopt
    import modelopt.torch.opt as mto
    import modelopt.torch.speculative as mtsp
    import torch
    import transformers
    from modelopt.torch.export import export_speculative_decoding

    torch.manual_seed(args.seed)
    rank = int(os.environ.get("RANK", "0"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.target)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32)
    config = sized_config(model.config, mtsp.EAGLE3_DEFAULT_CFG["config"])
    mtsp.convert(model, [("eagle", config)])
    mto.enable_huggingface_checkpointing()
    dataset = ConversationSet(conversations(args.data), tokenizer, args.max_length)
    losses: list = []
    accuracy = [0.0]   # ModelOpt's own training accuracy of the last step: the draft's first token vs the target's

    class EagleTrainer(transformers.Trainer):
        """The Hugging Face Trainer, keeping ModelOpt's `train_acc` of each step for the progress line."""

        def compute_loss(self, model, inputs, return_outputs=False, **kwargs):  # noqa: ANN001 - the Trainer's
            loss, outputs = super().compute_loss(model, inputs, return_outputs=True, **kwargs)
            found = outputs.get("train_acc") if hasattr(outputs, "get") else getattr(outputs, "train_acc", None)
            if found:
                accuracy[0] = float(found[0][0])
            return (loss, outputs) if return_outputs else loss

    class Report(transformers.TrainerCallback):
        """One progress line per logged step (rank 0)."""

        def on_log(self, targs, state, control, logs=None, **kwargs):  # noqa: ANN001 - the Trainer's hook
            if rank == 0 and logs and "loss" in logs:
                losses.append(float(logs["loss"]))
                print(f"{PROGRESS} step={state.global_step}/{state.max_steps} loss={logs['loss']:.4f} "
                      f"acc={accuracy[0]:.3f}", flush=True)

    training = transformers.TrainingArguments(
        output_dir=str(args.out / "trainer"), max_steps=args.steps, per_device_train_batch_size=4,
        learning_rate=args.learning_rate, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
        seed=args.seed, dataloader_num_workers=0, remove_unused_columns=False, disable_tqdm=True)
    trainer = EagleTrainer(model=model, args=training, train_dataset=dataset, callbacks=[Report()])
    trainer.train()
    if rank == 0:
        draft = args.out / "draft"
        export_speculative_decoding(model, dtype=torch.bfloat16, export_dir=draft)
        record = {"steps": args.steps, "losses": losses, "accuracy": accuracy[0], "modelopt_version": modelopt.__version__,
                  "transformers_version": transformers.__version__, "torch_version": torch.__version__,
                  "world_size": int(os.environ.get("WORLD_SIZE", "1")), "seed": args.seed,
                  "conversations": len(dataset), "architecture": config["eagle_architecture_config"]}
        (args.out / "training.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
        print(f"{PROGRESS} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
