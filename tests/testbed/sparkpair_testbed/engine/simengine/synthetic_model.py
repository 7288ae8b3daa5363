"""Deterministic synthetic model repositories: the files `hf download` writes.

Every byte is a pure function of the repo id (and ``SIM_HF_MODEL_BYTES``), so two machines
downloading the same repo get identical blobs, identical blob names and the same commit.
Blob names are what the hub's cache uses: the sha256 of the content for files the repo's
``.gitattributes`` routes to Git LFS (weights, ``tokenizer.json``), the git blob sha1
(``sha1("blob <size>\\0" + content)``) for the small files git itself tracks, as a real
snapshot shows (40-hex and 64-hex targets side by side).
Weight shards are produced piece by piece, so a repo of many GiB never sits in memory.
"""

import fnmatch
import hashlib
import json
import os
import struct
from functools import lru_cache

from . import hub_layout
from .textgen import WORDS

SAFETENSORS_HEADER_BYTES = 256  # padded JSON header, as the format allows
MIN_SHARD_BYTES = 1024
PIECE_BYTES = 1 << 20           # weight bytes are produced in pieces of this size
PIECE_TAG_BYTES = 16            # each piece starts with its own tag, so no two pieces are equal

# The hub's default .gitattributes for a new model repo (abridged to the patterns a model repo
# uses) plus tokenizer.json, as Qwen's and NVIDIA's repos add it: what goes through Git LFS.
GITATTRIBUTES = "".join(f"{pattern} filter=lfs diff=lfs merge=lfs -text\n" for pattern in (
    "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gz", "*.h5", "*.joblib", "*.lfs.*",
    "*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot", "*.parquet", "*.pb",
    "*.pickle", "*.pkl", "*.pt", "*.pth", "*.rar", "*.safetensors", "saved_model/**/*", "*.tar.*",
    "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip", "*.zst", "*tfevents*", "tokenizer.json"))
LFS_PATTERNS = tuple(line.split()[0] for line in GITATTRIBUTES.splitlines())


def is_lfs(name):
    """True when the repo's .gitattributes sends the file through Git LFS."""
    return any(fnmatch.fnmatch(name, pattern) for pattern in LFS_PATTERNS)


class RepoFile:
    """One file of a synthetic repository: its name, size and content (produced on demand)."""

    def __init__(self, name, content=None, size=None, pieces=None):
        self.name = name
        self._content = content
        self._pieces = pieces                      # callable(start) -> iterator of bytes, for big files
        self.size = len(content) if content is not None else size
        self._digests = {}

    def chunks(self, start=0):
        """The content from byte ``start`` on, in pieces."""
        if self._content is not None:
            yield self._content[start:]
        else:
            yield from self._pieces(start)

    @property
    def content(self):
        """The whole content (for small files and tests; big shards are read with ``chunks``)."""
        return self._content if self._content is not None else b"".join(self.chunks())

    @property
    def lfs(self):
        return is_lfs(self.name)

    @property
    def sha256(self):
        """sha256 of the content: an LFS file's blob name (and its etag on the hub)."""
        return _digest(self, "sha256")

    @property
    def blob_name(self):
        """The file's name under ``blobs/`` in the hub cache (its etag): sha256 for LFS files,
        the git blob sha1 for the others."""
        return self.sha256 if self.lfs else _digest(self, "git-sha1")


def _digest(repo_file, kind):
    """A digest of the content, computed once per file (the hub knows them before any download)."""
    if kind not in repo_file._digests:
        digest = hashlib.sha256() if kind == "sha256" else hashlib.sha1(b"blob %d\0" % repo_file.size)
        for piece in repo_file.chunks():
            digest.update(piece)
        repo_file._digests[kind] = digest.hexdigest()
    return repo_file._digests[kind]


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


def _safetensors_shard(repo_id, index, count, size):
    """A valid safetensors file of exactly ``size`` bytes holding one U8 tensor of pseudo-random
    bytes: (tensor name, RepoFile). The payload is produced piece by piece: a tag naming the piece,
    then SHAKE-256 bytes of the shard."""
    payload = size - 8 - SAFETENSORS_HEADER_BYTES
    tensor = f"model.layers.{index}.weight"
    header = {tensor: {"dtype": "U8", "shape": [payload], "data_offsets": [0, payload]},
              "__metadata__": {"format": "pt"}}
    head = struct.pack("<Q", SAFETENSORS_HEADER_BYTES) + \
        json.dumps(header, sort_keys=True).encode().ljust(SAFETENSORS_HEADER_BYTES, b" ")
    block = hashlib.shake_256(f"simengine-weights:{repo_id}:{index}".encode()).digest(PIECE_BYTES)

    def piece(number):
        tag = hashlib.md5(f"{repo_id}:{index}:{number}".encode()).digest()[:PIECE_TAG_BYTES]
        return tag + block[PIECE_TAG_BYTES:]

    def pieces(start):
        position = start
        if position < len(head):
            yield head[position:]
            position = len(head)
        while position < size:
            offset = position - len(head)
            number, within = divmod(offset, PIECE_BYTES)
            data = piece(number)[within:min(PIECE_BYTES, payload - number * PIECE_BYTES)]
            yield data
            position += len(data)

    return tensor, RepoFile(f"model-{index:05d}-of-{count:05d}.safetensors", size=size, pieces=pieces)


def _weight_files(repo_id, total_bytes):
    count = shard_count(repo_id, total_bytes)
    sizes = [total_bytes // count] * count
    sizes[-1] += total_bytes - sum(sizes)
    files, weight_map = [], {}
    for index, size in enumerate(sizes, start=1):
        tensor, shard = _safetensors_shard(repo_id, index, count, size)
        weight_map[tensor] = shard.name
        files.append(shard)
    index_json = {"metadata": {"total_size": total_bytes}, "weight_map": weight_map}
    return files + [RepoFile("model.safetensors.index.json", _json_bytes(index_json))]


@lru_cache(maxsize=16)
def _repo_files_cached(repo_id, total_bytes):
    config = config_json(repo_id)
    generation = {"bos_token_id": config.get("bos_token_id"), "eos_token_id": config.get("eos_token_id"),
                  "do_sample": True, "temperature": 0.6, "top_p": 0.95, "top_k": 20}
    readme = (f"# {repo_id}\n\nSynthetic stand-in generated by sparkpair's simengine; "
              "the weights are pseudo-random bytes.\n").encode()
    files = [RepoFile(".gitattributes", GITATTRIBUTES.encode()), RepoFile("README.md", readme),
             RepoFile("config.json", _json_bytes(config)),
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
