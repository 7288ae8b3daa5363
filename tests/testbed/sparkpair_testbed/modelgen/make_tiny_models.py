"""Make the two tiny random-weight models the vLLM image serves on the simulated pair.

Runs INSIDE the vLLM image (sparkpair_testbed/vllm_image/: torch, safetensors, tokenizers and
transformers are there), with no network:

    python make_tiny_models.py OUT_DIR

writes OUT_DIR/target/ (a Qwen3-MoE: 8 layers, hidden 256, head_dim 64, 4 experts, a byte-level
BPE tokenizer of 1024 tokens trained here, with a chat template) and OUT_DIR/draft/ (an Eagle3
draft for it, config and tensor names as NVIDIA ModelOpt's `export_speculative_decoding` writes
them: `LlamaForCausalLMEagle3`, one decoder layer reading three auxiliary hidden states, `fc`,
`d2t` for a 512-token draft vocabulary). Every byte is a function of SEED and the library
versions: running it twice gives the same files. The weights are random and NOT quantized, so
config.json claims no quantization. Nothing of sparkpair is imported.
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

SEED = 20261125
VOCAB = 1024
DRAFT_VOCAB = 512
HIDDEN = 256
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 64
LAYERS = 8
EXPERTS, EXPERTS_PER_TOKEN = 4, 2
MOE_INTERMEDIATE = 128
DRAFT_INTERMEDIATE = 512
MAX_POSITIONS = 40960  # Qwen3-235B-A22B's own max_position_embeddings
ROPE_THETA = 1000000.0
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
WORDS = ("spark", "pair", "cable", "node", "token", "model", "draft", "expert", "layer", "engine",
         "serve", "queue", "tensor", "shard", "cache", "prompt", "reply", "metric", "port", "link",
         "the", "a", "of", "to", "and", "in", "is", "it", "on", "with", "fast", "slow", "two", "one",
         "hello", "world", "what", "why", "how", "when", "answer", "question", "number", "text")
# The hub's .gitattributes for a model repo (abridged), as real repositories carry it.
GITATTRIBUTES = "".join(f"{pattern} filter=lfs diff=lfs merge=lfs -text\n" for pattern in (
    "*.bin", "*.pt", "*.pth", "*.safetensors", "*.model", "*.msgpack", "*.onnx", "*.tar.*", "*.zip",
    "tokenizer.json"))


def corpus(rng: random.Random, lines: int = 4000) -> list:
    """Pseudo sentences from WORDS, digits and punctuation: what the tokenizer is trained on."""
    text = []
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
        if rng.random() < 0.3:
            words.append(str(rng.randint(0, 9999)))
        text.append(" ".join(words).capitalize() + rng.choice(".?!,;:"))
    return text


def write_tokenizer(out: Path, rng: random.Random) -> None:
    """Train a byte-level BPE (Qwen-like) and save it as a Hugging Face tokenizer with a chat template."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus(rng), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", model_max_length=MAX_POSITIONS)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))


def normal(generator: torch.Generator, *shape: int) -> torch.Tensor:
    """Random weights N(0, 0.02) in bfloat16."""
    return (torch.randn(*shape, generator=generator) * 0.02).to(torch.bfloat16)


def ones(size: int) -> torch.Tensor:
    """A norm's weight."""
    return torch.ones(size, dtype=torch.bfloat16)


def target_tensors(generator: torch.Generator) -> dict:
    """Qwen3-MoE weights under the names Qwen's checkpoints use (one tensor per expert)."""
    tensors = {"model.embed_tokens.weight": normal(generator, VOCAB, HIDDEN)}
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}."
        tensors.update({
            prefix + "input_layernorm.weight": ones(HIDDEN),
            prefix + "post_attention_layernorm.weight": ones(HIDDEN),
            prefix + "self_attn.q_proj.weight": normal(generator, HEADS * HEAD_DIM, HIDDEN),
            prefix + "self_attn.k_proj.weight": normal(generator, KV_HEADS * HEAD_DIM, HIDDEN),
            prefix + "self_attn.v_proj.weight": normal(generator, KV_HEADS * HEAD_DIM, HIDDEN),
            prefix + "self_attn.o_proj.weight": normal(generator, HIDDEN, HEADS * HEAD_DIM),
            prefix + "self_attn.q_norm.weight": ones(HEAD_DIM),
            prefix + "self_attn.k_norm.weight": ones(HEAD_DIM),
            prefix + "mlp.gate.weight": normal(generator, EXPERTS, HIDDEN),
        })
        for expert in range(EXPERTS):
            name = f"{prefix}mlp.experts.{expert}."
            tensors[name + "gate_proj.weight"] = normal(generator, MOE_INTERMEDIATE, HIDDEN)
            tensors[name + "up_proj.weight"] = normal(generator, MOE_INTERMEDIATE, HIDDEN)
            tensors[name + "down_proj.weight"] = normal(generator, HIDDEN, MOE_INTERMEDIATE)
    tensors["model.norm.weight"] = ones(HIDDEN)
    tensors["lm_head.weight"] = normal(generator, VOCAB, HIDDEN)
    return tensors


def target_config(tokens: dict) -> dict:
    """config.json of the target, shaped like Qwen3-235B-A22B's (small numbers, no quantization)."""
    return {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": tokens["<|endoftext|>"],
        "eos_token_id": tokens["<|im_end|>"], "decoder_sparse_step": 1, "head_dim": HEAD_DIM,
        "hidden_act": "silu", "hidden_size": HIDDEN, "initializer_range": 0.02,
        "intermediate_size": 4 * HIDDEN, "max_position_embeddings": MAX_POSITIONS,
        "max_window_layers": LAYERS, "mlp_only_layers": [], "moe_intermediate_size": MOE_INTERMEDIATE,
        "norm_topk_prob": True, "num_attention_heads": HEADS, "num_experts": EXPERTS,
        "num_experts_per_tok": EXPERTS_PER_TOKEN, "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS, "output_router_logits": False, "rms_norm_eps": 1e-06,
        "rope_scaling": None, "rope_theta": ROPE_THETA, "router_aux_loss_coef": 0.001,
        "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "use_cache": True, "use_sliding_window": False, "vocab_size": VOCAB,
    }


def draft_config(tokens: dict) -> dict:
    """config.json of the draft, with the keys of ModelOpt's llama Eagle3 export template."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"], "bos_token_id": tokens["<|endoftext|>"],
        "eos_token_id": tokens["<|im_end|>"], "hidden_act": "silu", "hidden_size": HIDDEN,
        "initializer_range": 0.02, "intermediate_size": DRAFT_INTERMEDIATE,
        "max_position_embeddings": MAX_POSITIONS, "model_type": "llama", "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "num_hidden_layers": 1, "pad_token_id": None,
        "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": transformers.__version__, "use_cache": True, "vocab_size": VOCAB,
        "draft_vocab_size": DRAFT_VOCAB, "rope_scaling": None, "attention_bias": False,
        "attention_dropout": 0.0, "head_dim": HEAD_DIM, "mlp_bias": False, "pretraining_tp": 1,
        "rope_theta": ROPE_THETA,
        "eagle_config": {
            # ModelOpt's default for an 8-layer target: [1, n/2 - 1, n - 4]
            "eagle_aux_hidden_state_layer_ids": [1, LAYERS // 2 - 1, LAYERS - 4],
            "use_aux_hidden_state": True, "use_input_layernorm_in_first_layer": True,
            "use_last_layernorm": True, "use_mtp_layernorm": False, "next_layer_regular": True,
            "parallel_draft_step": 1, "parallel_draft_heads_num_layers": 1,
        },
    }


def draft_tensors(generator: torch.Generator, rng: random.Random) -> dict:
    """Eagle3 draft weights under ModelOpt's export names (no embed_tokens: vLLM shares the target's)."""
    draft_ids = sorted(rng.sample(range(VOCAB), DRAFT_VOCAB))
    return {
        "layers.0.self_attn.q_proj.weight": normal(generator, HEADS * HEAD_DIM, 2 * HIDDEN),
        "layers.0.self_attn.k_proj.weight": normal(generator, KV_HEADS * HEAD_DIM, 2 * HIDDEN),
        "layers.0.self_attn.v_proj.weight": normal(generator, KV_HEADS * HEAD_DIM, 2 * HIDDEN),
        "layers.0.self_attn.o_proj.weight": normal(generator, HIDDEN, HEADS * HEAD_DIM),
        "layers.0.mlp.gate_proj.weight": normal(generator, DRAFT_INTERMEDIATE, HIDDEN),
        "layers.0.mlp.up_proj.weight": normal(generator, DRAFT_INTERMEDIATE, HIDDEN),
        "layers.0.mlp.down_proj.weight": normal(generator, HIDDEN, DRAFT_INTERMEDIATE),
        "layers.0.hidden_norm.weight": ones(HIDDEN),
        "layers.0.input_layernorm.weight": ones(HIDDEN),
        "layers.0.post_attention_layernorm.weight": ones(HIDDEN),
        "norm.weight": ones(HIDDEN),
        "fc.weight": normal(generator, HIDDEN, 3 * HIDDEN),
        "lm_head.weight": normal(generator, DRAFT_VOCAB, HIDDEN),
        # draft id i stands for target id i + d2t[i]
        "d2t": torch.tensor([target - index for index, target in enumerate(draft_ids)], dtype=torch.int64),
    }


def write_json(path: Path, data: dict) -> None:
    """JSON as the hub's files hold it: indented, key order kept, a final newline."""
    path.write_text(json.dumps(data, indent=2) + "\n")


def save_sharded(out: Path, tensors: dict, shards: int) -> None:
    """model-0000i-of-0000n.safetensors plus model.safetensors.index.json, as multi-shard repos have."""
    names = sorted(tensors)
    weight_map, total = {}, 0
    for index in range(shards):
        part = names[index::shards]
        shard = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        save_file({name: tensors[name].contiguous() for name in part}, str(out / shard), metadata={"format": "pt"})
        for name in part:
            weight_map[name] = shard
            total += tensors[name].numel() * tensors[name].element_size()
    write_json(out / "model.safetensors.index.json",
               {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})


def readme(title: str) -> str:
    """A model card saying what the repo really is."""
    return (f"---\nlicense: apache-2.0\n---\n# {title}\n\nTiny random weights made by the sparkpair testbed "
            "(sparkpair_testbed/modelgen/make_tiny_models.py) for vLLM's CPU build on the simulated "
            "pair. Not a real model: its output is noise.\n")


def main(out_dir: str) -> int:
    """Write target/ and draft/ under OUT_DIR; 0 on success."""
    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    generator = torch.Generator().manual_seed(SEED)
    target, draft = Path(out_dir) / "target", Path(out_dir) / "draft"
    target.mkdir(parents=True)
    draft.mkdir(parents=True)
    write_tokenizer(target, rng)
    tokens = {token: index for index, token in enumerate(SPECIALS)}
    write_json(target / "config.json", target_config(tokens))
    # Qwen3's generation_config also says top_k 20; vLLM 0.32's CPU build then kills its engine on
    # the first request with an Eagle3 draft (rejection sampler: "index ... is out of bounds" in
    # apply_top_k_top_p_pytorch), so the tiny model leaves top_k out (a request may still send it).
    write_json(target / "generation_config.json", {
        "bos_token_id": tokens["<|endoftext|>"], "do_sample": True,
        "eos_token_id": [tokens["<|im_end|>"], tokens["<|endoftext|>"]], "pad_token_id": tokens["<|endoftext|>"],
        "temperature": 0.6, "top_p": 0.95})
    save_sharded(target, target_tensors(generator), shards=2)
    (target / ".gitattributes").write_text(GITATTRIBUTES)
    (target / "README.md").write_text(readme("Tiny random Qwen3-MoE (stands in for Qwen3-235B-A22B)"))
    write_json(draft / "config.json", draft_config(tokens))
    save_file(draft_tensors(generator, rng), str(draft / "model.safetensors"), metadata={"format": "pt"})
    (draft / ".gitattributes").write_text(GITATTRIBUTES)
    (draft / "README.md").write_text(readme("Tiny random Eagle3 draft (ModelOpt export layout)"))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: make_tiny_models.py OUT_DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
