"""Train an Eagle3 draft for a target with NVIDIA ModelOpt and export it; runs INSIDE the training container on
a node (never imported by sparkpair itself):

    python train_eagle3.py --target DIR --data FILE --steps N --out DIR --device cuda|cpu
        [--mode online|offline --hidden-states DIR] [--aux-layers 1,46,90] [--draft-vocab N] [--seed S]
        [--max-length L]

ModelOpt's speculative decoding recipe (examples/speculative_decoding of NVIDIA Model Optimizer): ModelOpt's
EAGLE3_DEFAULT_CFG with its architecture sized to the target (heads, key-value heads, head size, MLP width,
rope and norm from the target's config.json; ModelOpt itself copies hidden size, vocabulary and positions),
`mtsp.convert(model, [("eagle", config)])`, the Eagle3 head trained (the target frozen) with the Hugging Face
Trainer, then `export_speculative_decoding` into OUT/draft and OUT/training.json (steps, losses, versions,
mode, device, precision, vocabulary, throughput).

- online: the whole target loaded beside the draft; the data are the conversations in FILE (one JSON object a
  line, {"conversations": [{"role", "content"}, ...]}: ModelOpt's format, what sparkpair's data step keeps).
- offline: only the target's embedding, LM head and final norm (ModelOpt's FakeBaseModel); the data are the
  hidden states in DIR the serving engine computed, one file per conversation: vLLM's (`*.safetensors`,
  {"hidden_states": [tokens, layers, hidden], "token_ids"}: the captured layers in --aux-layers order, then
  the last layer before its norm) or ModelOpt's own dump format (`*.pt`, as compute_hidden_states_* and
  TensorRT-LLM's SaveState write it).
- --device: cuda trains in bf16 (the Trainer's mixed precision), cpu in float32; refused when asked for cuda
  and torch here sees none.
- --draft-vocab N: ModelOpt's draft vocabulary compression, the d2t mapping calibrated on FILE's conversations
  (calibrate_frequent_vocab: the N most frequent tokens).
Data parallel across nodes when started by torchrun (the Trainer reads WORLD_SIZE/RANK). Progress: one line
`sparkpair-train step=N/M loss=X acc=A` per logged step on stdout, then `sparkpair-train done`; a refusal is
one line `sparkpair-train error: ...` and exit 2.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

PROGRESS = "sparkpair-train"
# Architecture fields an Eagle3 head takes from its target (ModelOpt fills hidden size, vocabulary
# and positions itself); intermediate_size falls back to the MoE expert width times experts per token.
SIZED_FROM_TARGET = ("num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta")
BATCH = {"cuda": 1, "cpu": 4}


def arguments(argv: list) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="train_eagle3.py")
    parser.add_argument("--target", required=True, type=Path)
    parser.add_argument("--data", required=True, type=Path)
    parser.add_argument("--steps", required=True, type=int)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cpu")
    parser.add_argument("--mode", choices=("online", "offline"), default="online")
    parser.add_argument("--hidden-states", type=Path)
    parser.add_argument("--aux-layers", default="")
    parser.add_argument("--draft-vocab", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-length", type=int, default=2048)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    return parser.parse_args(argv)


def precision_of(device: str) -> dict:
    """How the Trainer trains on DEVICE: cuda in bf16 (mixed precision, fp32 master weights), cpu in float32."""
    if device == "cuda":
        return {"dtype": "bfloat16", "bf16": True, "use_cpu": False, "precision": "bf16"}
    return {"dtype": "float32", "bf16": False, "use_cpu": True, "precision": "float32"}


def refuse(message: str) -> None:
    """One line for sparkpair, exit 2."""
    print(f"{PROGRESS} error: {message}", flush=True)
    sys.exit(2)


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
    if not width:
        width = target_config.moe_intermediate_size * target_config.num_experts_per_tok
    arch["intermediate_size"] = int(width)
    arch["rope_scaling"] = {"rope_type": "default", "rope_theta": arch["rope_theta"]}
    config["eagle_use_torch_compile"] = False   # a few steps: compiling costs more than it saves
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
        refuse(f"{path}: no conversations")
    return rows


def token_ids(tokenizer, messages: list) -> list:
    """The conversation's tokens under the target's chat template (as a flat list)."""
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


class ConversationSet:
    """Online: the conversations tokenized with the target's chat template, padded to the longest (at most
    max_length)."""

    def __init__(self, rows: list, tokenizer, max_length: int) -> None:
        import torch

        tokenized = [token_ids(tokenizer, messages)[:max_length] for messages in rows]
        length = max(len(ids) for ids in tokenized)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.length, self.items = length, []
        for ids in tokenized:
            mask = [1] * len(ids) + [0] * (length - len(ids))
            ids = ids + [pad] * (length - len(ids))
            self.items.append({"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask),
                               "labels": torch.tensor(ids)})

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict:
        return self.items[index]


class HiddenStateSet:
    """Offline: one conversation's hidden states per file, as ModelOpt's OfflineSupervisedDataset gives them."""

    def __init__(self, folder: Path, dtype) -> None:
        self.files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".pt"))
        if not self.files:
            refuse(f"{folder}: no hidden states")
        self.dtype = dtype
        self.length = max(self.tokens(path) for path in self.files)

    @staticmethod
    def tokens(path: Path) -> int:
        """How many tokens a file holds (vLLM's: from the safetensors header, nothing loaded)."""
        import torch

        if path.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as handle:
                return int(handle.get_slice("token_ids").get_shape()[0])
        found = torch.load(path, weights_only=True)
        return int((found[0] if isinstance(found, list) else found)["input_ids"].numel())

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> dict:
        import torch

        path = self.files[index]
        if path.suffix == ".safetensors":       # vLLM: [tokens, aux layers + the last (pre-norm), hidden]
            from safetensors.torch import load_file

            found = load_file(str(path))
            states, ids = found["hidden_states"], found["token_ids"].long()
            last, aux, prenorm = states[:, -1], states[:, :-1].reshape(states.shape[0], -1), True
        else:                                   # ModelOpt's dump format (TensorRT-LLM's keys accepted)
            found = torch.load(path, weights_only=True)
            found = found[0] if isinstance(found, list) else found
            ids = found["input_ids"].long().flatten()
            last = found.get("hidden_states", found.get("hidden_state"))
            aux = found.get("aux_hidden_states", found.get("hidden_state_features"))
            prenorm = bool(found.get("hidden_states_prenorm", False))
        labels = torch.full_like(ids, -100)
        labels[:-1] = ids[1:]
        return {"input_ids": ids, "base_model_hidden_states": last.to(self.dtype),
                "aux_hidden_states": aux.to(self.dtype), "attention_mask": torch.ones_like(ids),
                "loss_mask": torch.ones_like(ids), "labels": labels, "base_hidden_prenorm": prenorm}


def draft_vocabulary(tokenizer, rows: list, size: int, out: Path) -> tuple:
    """ModelOpt's calibrated draft vocabulary: the d2t mapping of the SIZE most frequent tokens of the
    conversations, saved as OUT/d2t.pt; (its path, the share of the conversations' tokens it covers)."""
    from collections import Counter

    import torch
    from modelopt.torch.speculative.utils import calibrate_frequent_vocab

    messages = [message for row in rows for message in row]
    counts = Counter(token_ids(tokenizer, messages))
    if len(counts) < size:
        refuse(f"--draft-vocab {size}: the training data hold {len(counts)} distinct tokens; pass at most that")
    d2t = calibrate_frequent_vocab(tokenizer, messages, size)
    path = out / "d2t.pt"
    torch.save(d2t, path)
    kept = sum(count for _, count in counts.most_common(size))
    return path, kept / max(1, sum(counts.values()))


def main(argv: list) -> int:
    """Convert, train, export; returns the exit code."""
    args = arguments(argv)
    import modelopt
    import modelopt.torch.opt as mto
    import modelopt.torch.speculative as mtsp
    import torch
    import transformers
    from modelopt.torch.export import export_speculative_decoding

    if args.device == "cuda" and not torch.cuda.is_available():
        refuse("--device cuda: torch in this image sees no CUDA device")
    if args.mode == "offline" and args.hidden_states is None:
        refuse("--mode offline needs --hidden-states")
    torch.manual_seed(args.seed)
    rank = int(os.environ.get("RANK", "0"))
    precision = precision_of(args.device)
    dtype = getattr(torch, precision["dtype"])
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.target)
    target_config = transformers.AutoConfig.from_pretrained(args.target)
    rows = conversations(args.data)
    config = sized_config(target_config, mtsp.EAGLE3_DEFAULT_CFG["config"])
    if args.aux_layers:
        config["eagle_architecture_config"]["eagle_aux_hidden_state_layer_ids"] = \
            [int(layer) for layer in args.aux_layers.split(",")]
    d2t, coverage = None, 1.0
    if 0 < args.draft_vocab < target_config.vocab_size:
        config["eagle_architecture_config"]["draft_vocab_size"] = args.draft_vocab
        d2t, coverage = draft_vocabulary(tokenizer, rows, args.draft_vocab, args.out)
    if args.mode == "offline":
        from modelopt.torch.speculative.eagle.utils import EagleOfflineDataCollator
        from modelopt.torch.speculative.plugins.modeling_fakebase import FakeBaseModel

        model = FakeBaseModel.from_source(str(args.target)).to(dtype)
        model.model.dtype = model.config.dtype = dtype   # the fake base keeps the checkpoint's dtype: ModelOpt
        # sizes the draft and its attention masks after it
        config["eagle_offline"] = True
        dataset = HiddenStateSet(args.hidden_states, dtype)
        length = min(args.max_length, dataset.length)   # pad to the longest sample, not past it
        collator = EagleOfflineDataCollator(train_len=length)
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(args.target, dtype=dtype)
        dataset = ConversationSet(rows, tokenizer, args.max_length)
        collator, length = None, dataset.length
    mtsp.convert(model, [("eagle", config)])
    if d2t is not None:
        mtsp.plugins.HFEagleModel.load_draft_vocab_cache(model, str(d2t))
    mto.enable_huggingface_checkpointing()
    losses: list = []
    accuracy = [0.0]   # ModelOpt's own training accuracy of the last step: the draft's first token vs the target's

    class EagleTrainer(transformers.Trainer):
        """The Hugging Face Trainer, keeping ModelOpt's `train_acc` of each step for the progress line."""

        def compute_loss(self, model, inputs, return_outputs=False, **kwargs):  # noqa: ANN001 - the Trainer's
            loss, outputs = super().compute_loss(model, inputs, return_outputs=True, **kwargs)
            found = outputs.get("train_acc") if hasattr(outputs, "get") else getattr(outputs, "train_acc", None)
            if found is not None and len(found):
                accuracy[0] = float(found[0][0])
            return (loss, outputs) if return_outputs else loss

    class Report(transformers.TrainerCallback):
        """One progress line per logged step (rank 0)."""

        def on_log(self, targs, state, control, logs=None, **kwargs):  # noqa: ANN001 - the Trainer's hook
            if rank == 0 and logs and "loss" in logs:
                losses.append(float(logs["loss"]))
                print(f"{PROGRESS} step={state.global_step}/{state.max_steps} loss={logs['loss']:.4f} "
                      f"acc={accuracy[0]:.3f}", flush=True)

    batch = BATCH[args.device]
    training = transformers.TrainingArguments(
        output_dir=str(args.out / "trainer"), max_steps=args.steps, per_device_train_batch_size=batch,
        learning_rate=args.learning_rate, logging_steps=1, save_strategy="no", report_to=[],
        use_cpu=precision["use_cpu"], bf16=precision["bf16"], seed=args.seed, dataloader_num_workers=0,
        remove_unused_columns=False, disable_tqdm=True)
    trainer = EagleTrainer(model=model, args=training, train_dataset=dataset, data_collator=collator,
                           callbacks=[Report()])
    began = time.monotonic()
    trainer.train()
    seconds = time.monotonic() - began
    if rank == 0:
        export_speculative_decoding(model, dtype=torch.bfloat16, export_dir=args.out / "draft")
        world = int(os.environ.get("WORLD_SIZE", "1"))
        arch = config["eagle_architecture_config"]
        record = {"steps": args.steps, "losses": losses, "accuracy": accuracy[0],
                  "modelopt_version": modelopt.__version__, "transformers_version": transformers.__version__,
                  "torch_version": torch.__version__, "world_size": world, "seed": args.seed,
                  "conversations": len(rows), "samples": len(dataset), "architecture": arch, "mode": args.mode,
                  "device": args.device, "precision": precision["precision"],
                  "vocab_size": int(target_config.vocab_size),
                  "draft_vocab_size": int(arch.get("draft_vocab_size") or target_config.vocab_size),
                  "vocab_coverage": round(coverage, 6), "seconds": round(seconds, 3),
                  "tokens_per_s": round(args.steps * batch * world * length / max(seconds, 1e-6), 3)}
        (args.out / "training.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
        print(f"{PROGRESS} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
