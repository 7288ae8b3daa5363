"""Deterministic synthetic model repositories: the files `hf download` writes.

Every byte is a pure function of the repo id (and ``SIM_HF_MODEL_BYTES``), so two machines
downloading the same repo get identical blobs, identical sha256 names and the same commit.
"""

import hashlib
import json
import os
import struct
from dataclasses import dataclass
from functools import lru_cache

from . import hub_layout
from .textgen import WORDS

SAFETENSORS_HEADER_BYTES = 256  # padded JSON header, as the format allows
MIN_SHARD_BYTES = 1024


@dataclass(frozen=True)
class RepoFile:
    """One file of a synthetic repository."""

    name: str
    content: bytes

    @property
    def sha256(self):
        """The blob name huggingface_hub uses for LFS files (sha256 of the content)."""
        return hashlib.sha256(self.content).hexdigest()


def _repo_hash(repo_id):
    return int.from_bytes(hashlib.sha256(repo_id.encode()).digest()[:8], "big")


def commit_for(repo_id, revision="main"):
    """The 40-hex commit a revision of ``repo_id`` points at (a commit id stands for itself)."""
    revision = revision or "main"
    if hub_layout.is_commit_hash(revision):
        return revision
    return hashlib.sha1(f"simengine:{repo_id}:{revision}".encode()).hexdigest()


def total_weight_bytes(repo_id, env=None):
    """Total size of the .safetensors files: ``SIM_HF_MODEL_BYTES`` or 2-8 MiB chosen per repo."""
    env = os.environ if env is None else env
    if env.get("SIM_HF_MODEL_BYTES"):
        return max(int(env["SIM_HF_MODEL_BYTES"]), MIN_SHARD_BYTES)
    mib = 1024 * 1024
    return 2 * mib + (_repo_hash(repo_id) % (6 * mib)) // 1024 * 1024


def shard_count(repo_id, total_bytes):
    """2-4 shards per repo (fewer when the total is tiny)."""
    wanted = 2 + _repo_hash(repo_id) % 3
    return max(1, min(wanted, total_bytes // MIN_SHARD_BYTES))


def model_family(repo_id):
    """Which architecture a repo id stands for, judged from its name as a person would."""
    name = repo_id.lower()
    if "eagle" in name:
        return "eagle3"
    if "qwen3" in name and ("a22b" in name or "a3b" in name or "moe" in name):
        return "qwen3_moe"
    if "qwen" in name:
        return "qwen3"
    if "gpt-oss" in name:
        return "gpt_oss"
    if "deepseek" in name:
        return "deepseek_v3"
    return "llama"


FAMILY_CONFIGS = {
    "qwen3_moe": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "num_hidden_layers": 94, "hidden_size": 4096, "intermediate_size": 12288,
        "moe_intermediate_size": 1536, "num_experts": 128, "num_experts_per_tok": 8,
        "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
        "vocab_size": 151936, "max_position_embeddings": 40960, "rope_theta": 1000000.0,
        "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16",
    },
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "num_hidden_layers": 36, "hidden_size": 4096, "intermediate_size": 12288,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 151936, "max_position_embeddings": 40960, "rope_theta": 1000000.0,
        "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16",
    },
    "eagle3": {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "num_hidden_layers": 1, "hidden_size": 4096, "intermediate_size": 16384,
        "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
        "vocab_size": 151936, "draft_vocab_size": 32000, "max_position_embeddings": 40960,
        "rope_theta": 1000000.0, "torch_dtype": "bfloat16",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 46, 90], "use_aux_hidden_state": True},
    },
    "gpt_oss": {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
        "num_hidden_layers": 36, "hidden_size": 2880, "intermediate_size": 2880,
        "num_local_experts": 128, "num_experts_per_tok": 4, "num_attention_heads": 64,
        "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 201088,
        "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
    },
    "deepseek_v3": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "num_hidden_layers": 61, "hidden_size": 7168, "intermediate_size": 18432,
        "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8,
        "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280,
        "max_position_embeddings": 163840, "torch_dtype": "bfloat16",
    },
    "llama": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "bos_token_id": 128000, "eos_token_id": 128009, "torch_dtype": "bfloat16",
    },
}


def quantization_for(repo_id):
    """A ModelOpt-style quantization block for FP4/FP8 repos, else None."""
    name = repo_id.lower()
    if "fp4" in name:
        return {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                "kv_cache_quant_algo": None, "exclude_modules": ["lm_head"]}
    if "fp8" in name:
        return {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    return None


def config_json(repo_id):
    """A plausible config.json for the repo's family."""
    config = dict(FAMILY_CONFIGS[model_family(repo_id)])
    config["_name_or_path"] = repo_id
    config["transformers_version"] = "4.56.0"
    quant = quantization_for(repo_id)
    if quant:
        config["quantization_config"] = quant
    return config


def _json_bytes(data):
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def _tokenizer_files(config):
    vocab = {word: index for index, word in enumerate(WORDS)}
    tokenizer = {"version": "1.0", "added_tokens": [], "normalizer": None,
                 "pre_tokenizer": {"type": "Whitespace"},
                 "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "the"}}
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": config["max_position_embeddings"],
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                         "{% endfor %}<|im_start|>assistant\n",
    }
    return [RepoFile("tokenizer.json", _json_bytes(tokenizer)),
            RepoFile("tokenizer_config.json", _json_bytes(tokenizer_config))]


def _safetensors_shard(repo_id, index, size):
    """A valid safetensors file of exactly ``size`` bytes holding one U8 tensor of pseudo-random bytes."""
    payload = size - 8 - SAFETENSORS_HEADER_BYTES
    tensor = f"model.layers.{index}.weight"
    header = {tensor: {"dtype": "U8", "shape": [payload], "data_offsets": [0, payload]},
              "__metadata__": {"format": "pt"}}
    header_bytes = json.dumps(header, sort_keys=True).encode().ljust(SAFETENSORS_HEADER_BYTES, b" ")
    data = hashlib.shake_256(f"simengine-weights:{repo_id}:{index}".encode()).digest(payload)
    return tensor, struct.pack("<Q", SAFETENSORS_HEADER_BYTES) + header_bytes + data


def _weight_files(repo_id, total_bytes):
    count = shard_count(repo_id, total_bytes)
    sizes = [total_bytes // count] * count
    sizes[-1] += total_bytes - sum(sizes)
    files, weight_map = [], {}
    for index, size in enumerate(sizes, start=1):
        name = f"model-{index:05d}-of-{count:05d}.safetensors"
        tensor, content = _safetensors_shard(repo_id, index, size)
        weight_map[tensor] = name
        files.append(RepoFile(name, content))
    index_json = {"metadata": {"total_size": total_bytes}, "weight_map": weight_map}
    return files + [RepoFile("model.safetensors.index.json", _json_bytes(index_json))]


@lru_cache(maxsize=16)
def _repo_files_cached(repo_id, total_bytes):
    config = config_json(repo_id)
    generation = {"bos_token_id": config.get("bos_token_id"), "eos_token_id": config.get("eos_token_id"),
                  "do_sample": True, "temperature": 0.6, "top_p": 0.95, "top_k": 20}
    readme = (f"# {repo_id}\n\nSynthetic stand-in generated by sparkpair's simengine; "
              "the weights are pseudo-random bytes.\n").encode()
    files = [RepoFile("README.md", readme), RepoFile("config.json", _json_bytes(config)),
             RepoFile("generation_config.json", _json_bytes(generation))]
    files += _tokenizer_files(config) + _weight_files(repo_id, total_bytes)
    if quantization_for(repo_id) and quantization_for(repo_id)["quant_method"] == "modelopt":
        files.append(RepoFile("hf_quant_config.json", _json_bytes({
            "producer": {"name": "modelopt", "version": "0.35.0"},
            "quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}})))
    return tuple(sorted(files, key=lambda f: f.name))


def repo_files(repo_id, env=None):
    """All files of the synthetic repo, sorted by name."""
    return list(_repo_files_cached(repo_id, total_weight_bytes(repo_id, env)))
