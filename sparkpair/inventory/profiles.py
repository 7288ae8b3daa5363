"""Model profiles: what to serve, with which draft, on which runtime and with which engine settings.

The built-in profiles follow NVIDIA's DGX Spark playbooks to the letter (see
docs/profiles.md for the source of every value). The inventory's `models:` section may
override any field of a built-in profile (deep merge) or add new profiles. A profile runs on its
`runtime` (TensorRT-LLM unless it says otherwise); its `variants` say how the same model runs on
another runtime (`sparkpair launch qwen3-235b --runtime vllm`): `resolve` merges the variant over
the model's own facts and leaves the other runtime's engine settings behind. A profile's engine settings
are its `serve_args` (the engine's command-line flags) and its `engine_config` (the engine's own
configuration mapping, as its runtime defines it); each runtime checks both against its engine's own
definitions. The former keys `llm_api` (now `engine_config`) and `speculative_config` (now
`engine_config.speculative_config`) are read in their new place (`current_spelling`).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from sparkpair import registry
from sparkpair.inventory.validation import Anything, Choice, Integer, MappingOf, Number, Optional, Scalar, Text, spec

REPO_ID_EXPECTED = "a Hugging Face repo id, e.g. nvidia/Qwen3-235B-A22B-FP4"
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


def check_repo_id(value: str) -> str:
    """value when it is an `org/name` repo id as the Hub allows (letters, digits, '.', '_', '-', each part
    starting with a letter or digit and not ending in '.' or '-', no '--' or '..': `models--org--name` in
    the cache names exactly one repo); ValueError otherwise."""
    if not REPO_ID.fullmatch(value) or "--" in value or ".." in value or \
            any(part.endswith((".", "-")) for part in value.split("/")):
        raise ValueError(REPO_ID_EXPECTED + " (no '--' or '..', no part ending in '.' or '-')")
    return value


MODEL_ID = Text(REPO_ID_EXPECTED, REPO_ID.pattern, check=check_repo_id)
OPTION_NAME = Text("an option name (a string)")
class RuntimeName(Choice):
    """A runtime's name: one of the registry's (`sparkpair.registry.NAMES`, read when a value is checked)."""

    def __init__(self) -> None:
        super().__init__()

    @property  # type: ignore[override]
    def values(self) -> tuple[str, ...]:
        return registry.NAMES

    @values.setter
    def values(self, given: tuple[str, ...]) -> None:
        pass  # Choice sets them in __init__; they are the registry's


RUNTIME = RuntimeName()
# What a variant inherits from its profile: the model and its sizes. Engine settings (serve_args,
# engine_config) belong to one runtime and come only from the variant.
MODEL_FACTS = ("description", "target", "draft", "decoding_type", "max_draft_len", "tp_size", "pp_size", "heads",
               "kv_heads", "target_gib", "draft_gib", "headroom_gib")
# Tensor parallel sizes: a power of two (every model's attention heads split that way); three Sparks run a
# pipeline (pp_size) instead (docs/profiles.md#parallelism).
TP_SIZES = (1, 2, 4, 8)


FOLDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def capture_problems(capture: dict[str, Any]) -> list[str]:
    """What is wrong with a profile's capture_hidden_states (empty when it is off or right)."""
    if not capture:
        return []
    layers, last, folder = capture.get("layers"), capture.get("last"), capture.get("folder")
    problems = []
    if not isinstance(last, int) or isinstance(last, bool) or not 0 < last <= 1024:
        problems.append("capture_hidden_states.last: expected the target's layer count")
    elif not isinstance(layers, list) or not layers or not all(
            isinstance(x, int) and not isinstance(x, bool) and 0 <= x < last for x in layers):
        problems.append("capture_hidden_states.layers: expected layer numbers below the layer count")
    if not isinstance(folder, str) or not FOLDER.fullmatch(folder) or ".." in folder:
        problems.append("capture_hidden_states.folder: expected one folder name (letters, digits, '.', '_', '-')")
    return problems


@dataclass(frozen=True, kw_only=True)
class Profile:
    """One servable recipe: target, optional draft, parallelism, its runtime and that runtime's settings.
    `name` is the profile's name in the inventory (set when it is resolved)."""

    name: str = spec(Text("the profile's name (set by sparkpair)"), "")
    runtime: str = spec(RUNTIME, registry.DEFAULT)
    description: str = spec(Text("a string"), "")
    target: str = spec(MODEL_ID)
    draft: str | None = spec(Optional(MODEL_ID), None)
    decoding_type: str | None = spec(Optional(Choice("Eagle", "Eagle3", "DraftTarget")), None)
    max_draft_len: int | None = spec(Optional(Integer(1, 16, "a draft length")), None)
    tp_size: int = spec(Choice(*TP_SIZES), 2)
    pp_size: int = spec(Integer(1, 16, "a pipeline parallel size"), 1)
    heads: int | None = spec(Optional(Integer(1, 4096, "the model's number of attention heads")), None)  # tp_size divides it
    kv_heads: int | None = spec(Optional(Integer(1, 1024, "the model's number of KV heads")), None)  # tp_size divides it
    serve_args: dict[str, bool | int | float | str] = spec(MappingOf(OPTION_NAME, Scalar()), factory=dict)
    # The engine's own configuration, as its runtime defines it and checks it (TensorRT-LLM: the
    # --extra_llm_api_options YAML; vLLM: speculative_config beyond the method, draft and length set above).
    engine_config: dict[str, Any] = spec(MappingOf(OPTION_NAME, Anything()), factory=dict)
    variants: dict[str, dict[str, Any]] = spec(MappingOf(RUNTIME, MappingOf(OPTION_NAME, Anything())), factory=dict)
    # train-draft's offline mode: capture the target's hidden states instead of drafting ({"layers": the draft
    # config's eagle_aux_hidden_state_layer_ids, "last": the target's layer count, "folder": one path component
    # under HF_HOME/sparkpair-hidden}); each runtime renders it its own way (draft/hidden.py sets it).
    capture_hidden_states: dict[str, Any] = spec(MappingOf(OPTION_NAME, Anything()), factory=dict)
    target_gib: float = spec(Number(0), 0.0)
    draft_gib: float = spec(Number(0), 0.0)
    headroom_gib: float = spec(Number(0), 8.0)

    @property
    def ranks(self) -> int:
        """How many Sparks the profile runs on, one GPU (one rank) each: tp_size x pp_size."""
        return self.tp_size * self.pp_size

    @property
    def is_pair(self) -> bool:
        """True when the profile spans more than one node (a pair's tensor parallel 2, or N ranks)."""
        return self.ranks > 1

    def splits_kv_heads(self, tp_size: int) -> bool:
        """Whether tp_size ranks share the model's KV heads out evenly: it divides them, or each head is
        replicated on tp_size / kv_heads ranks (both engines do that); True when kv_heads is not known."""
        return self.kv_heads is None or self.kv_heads % tp_size == 0 or tp_size % self.kv_heads == 0

    def splits_heads(self, tp_size: int) -> bool:
        """Whether tp_size ranks share the model's attention heads (it divides them) and its KV heads out evenly."""
        return (self.heads is None or self.heads % tp_size == 0) and self.splits_kv_heads(tp_size)

    def parallelism_problems(self, nodes: int) -> list[str]:
        """Why the profile cannot run on an inventory of `nodes` Sparks, one line each naming the field and the
        fix (empty: it runs on one node, or on every node with one rank each)."""
        field = f"models.{self.name}"
        found = []
        if not self.splits_heads(self.tp_size):
            found.append(f"{field}.tp_size: got {self.tp_size}, which neither divides nor is a multiple of the "
                         f"model's {self.kv_heads} KV heads (kv_heads); expected such a tp_size, with pp_size for "
                         "the rest of the nodes")
        if self.ranks > 1 and self.ranks != nodes:
            tp_size = max(tp for tp in TP_SIZES if nodes % tp == 0 and self.splits_heads(tp))
            split = f"tp_size: {tp_size} and pp_size: {nodes // tp_size}"
            found.append(f"{field}: tp_size {self.tp_size} x pp_size {self.pp_size} is {self.ranks} ranks, but the "
                         f"inventory has {nodes} nodes (one rank per Spark); set {split} under {field} "
                         f"(a product of {nodes}), or tp_size: 1 for one node")
        return found

    @property
    def repos(self) -> list[str]:
        """HF repo ids the profile needs on every node that runs a rank."""
        return [self.target] + ([self.draft] if self.draft else [])


_RECIPE_RUNTIME = {
    "enable_attention_dp": False,
    "disable_overlap_scheduler": False,
    "enable_autotuner": False,
}

BUILTIN_PROFILES: dict[str, dict[str, Any]] = {
    "qwen3-235b": {
        "description": "Qwen3-235B-A22B NVFP4 + Eagle3, TP=2 across both Sparks (NVIDIA two-Spark recipe)",
        "target": "nvidia/Qwen3-235B-A22B-FP4",
        "draft": "nvidia/Qwen3-235B-A22B-Eagle3",
        "decoding_type": "Eagle",
        "max_draft_len": 3,
        "tp_size": 2,    # NVIDIA's two Sparks; on more nodes the split is chosen (chosen_split) unless the inventory sets it
        "heads": 64,     # Qwen3-235B-A22B's config.json num_attention_heads
        "kv_heads": 4,   # and num_key_value_heads: no tp_size 3 (three Sparks: pp_size 3)
        "serve_args": {"backend": "pytorch", "max_num_tokens": 1024},
        "engine_config": {
            **_RECIPE_RUNTIME,
            "enable_chunked_prefill": False,
            # Additions to NVIDIA's YAML: /metrics reports draft acceptance only with the first,
            # /prometheus/metrics (request and draft counters, read by status) only with the second.
            "enable_iter_perf_stats": True,
            "return_perf_metrics": True,
            "cuda_graph_config": {"max_batch_size": 1},
            "kv_cache_config": {"free_gpu_memory_fraction": 0.9, "enable_block_reuse": False},
        },
        "target_gib": 130.0,
        "draft_gib": 2.0,
        "variants": {
            # What vLLM users on two Sparks serve (docs/profiles.md#qwen3-235b-on-vllm): Qwen's own GPTQ-Int4
            # checkpoint (vLLM's Marlin kernels; the NVFP4 one needs TensorRT-LLM's or a nightly's kernels) and
            # Red Hat's Eagle3 speculator for it, which vLLM loads as it is.
            "vllm": {
                "description": "Qwen3-235B-A22B GPTQ-Int4 + Eagle3, TP=2 across both Sparks on vLLM",
                "target": "Qwen/Qwen3-235B-A22B-GPTQ-Int4",
                "draft": "RedHatAI/Qwen3-235B-A22B-speculator.eagle3",
                "decoding_type": "Eagle3",
                "max_draft_len": 3,
                "serve_args": {"max_model_len": 8192, "gpu_memory_utilization": 0.85, "max_num_seqs": 4},
                "target_gib": 125.0,
                "draft_gib": 2.0,
            },
            # The same vLLM engine behind Triton's front end (docs/profiles.md#on-triton): serve_args are vLLM's
            # engine arguments, written into the model repository's model.json.
            "triton": {
                "description": "Qwen3-235B-A22B GPTQ-Int4 + Eagle3, TP=2 across both Sparks on Triton's vLLM backend",
                "target": "Qwen/Qwen3-235B-A22B-GPTQ-Int4",
                "draft": "RedHatAI/Qwen3-235B-A22B-speculator.eagle3",
                "decoding_type": "Eagle3",
                "max_draft_len": 3,
                "serve_args": {"max_model_len": 8192, "gpu_memory_utilization": 0.85, "max_num_seqs": 4},
                "target_gib": 125.0,
                "draft_gib": 2.0,
            },
            # SGLang (docs/profiles.md#on-sglang): the same GPTQ-Int4 checkpoint (SGLang's Marlin kernels) with
            # LMSYS's Eagle3 draft for Qwen3-235B-A22B, three steps at topk 1 (multi-node Eagle needs it).
            "sglang": {
                "description": "Qwen3-235B-A22B GPTQ-Int4 + Eagle3, TP=2 across both Sparks on SGLang",
                "target": "Qwen/Qwen3-235B-A22B-GPTQ-Int4",
                "draft": "lmsys/Qwen3-235B-A22B-EAGLE3",
                "decoding_type": "Eagle3",
                "max_draft_len": 3,
                "serve_args": {"context_length": 8192, "mem_fraction_static": 0.85, "max_running_requests": 4},
                "target_gib": 125.0,
                "draft_gib": 2.0,
            },
        },
    },
    "gpt-oss-120b": {
        "description": "GPT-OSS-120B + Eagle3 on one Spark (NVIDIA single-Spark recipe)",
        "target": "openai/gpt-oss-120b",
        # The speculative-decoding playbook's current draft (its 1.3.0rc12 recipe); the older one named
        # nvidia/gpt-oss-120b-Eagle3, which the vLLM variant keeps (docs/profiles.md, On vLLM).
        "draft": "nvidia/gpt-oss-120b-Eagle3-long-context",
        "decoding_type": "Eagle",
        "max_draft_len": 5,
        "tp_size": 1,
        "serve_args": {"backend": "pytorch", "max_batch_size": 1},
        "engine_config": {
            **_RECIPE_RUNTIME,
            "enable_iter_perf_stats": True,
            "return_perf_metrics": True,
            "cuda_graph_config": {"max_batch_size": 1},
            "kv_cache_config": {"free_gpu_memory_fraction": 0.9, "enable_block_reuse": False},
        },
        "target_gib": 65.0,
        "draft_gib": 1.5,
        "variants": {
            # One Spark holds GPT-OSS-120B (NVIDIA's speculative-decoding playbook); its Eagle3 draft is
            # NVIDIA's (docs/profiles.md, On vLLM).
            "vllm": {
                "description": "GPT-OSS-120B + Eagle3 on one Spark on vLLM",
                "draft": "nvidia/gpt-oss-120b-Eagle3",
                "decoding_type": "Eagle3",
                "max_draft_len": 3,
                "serve_args": {"max_model_len": 8192, "gpu_memory_utilization": 0.8},
            },
        },
    },
    "llama-3.3-70b": {
        "description": "Llama-3.3-70B NVFP4 with Llama-3.1-8B NVFP4 as draft on one Spark (Draft-Target)",
        "target": "nvidia/Llama-3.3-70B-Instruct-FP4",
        "draft": "nvidia/Llama-3.1-8B-Instruct-FP4",
        "decoding_type": "DraftTarget",
        "max_draft_len": 4,
        "tp_size": 1,
        "serve_args": {
            "backend": "pytorch",
            "max_batch_size": 1,
            "kv_cache_free_gpu_memory_fraction": 0.9,
        },
        "engine_config": {
            "print_iter_log": False,
            "disable_overlap_scheduler": True,
            "enable_iter_perf_stats": True,
            "return_perf_metrics": True,
            "kv_cache_config": {"enable_block_reuse": False},
        },
        "target_gib": 40.0,
        "draft_gib": 6.0,
    },
}


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Return base updated by override, merging nested mappings key by key."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


# The former keys of a profile's engine settings, and where under engine_config each one now sits.
FORMER_KEYS: dict[str, tuple[str, ...]] = {"llm_api": (), "speculative_config": ("speculative_config",)}


def current_spelling(override: dict[str, Any]) -> dict[str, Any]:
    """override (a profile as the inventory writes it) with its former keys (FORMER_KEYS) moved under
    `engine_config`, in its variants too; where engine_config sets the same key, engine_config wins."""
    moved = {key: value for key, value in override.items() if key not in FORMER_KEYS}
    config: Any = {}
    for former, place in FORMER_KEYS.items():
        if former in override:
            nested = override[former]
            for key in reversed(place):
                nested = {key: nested}
            config = deep_merge(config, nested) if isinstance(nested, dict) and isinstance(config, dict) else nested
    if "engine_config" in override:
        given = override["engine_config"]
        config = deep_merge(config, given) if isinstance(config, dict) and isinstance(given, dict) else given
    if config != {} or "engine_config" in override:
        moved["engine_config"] = config
    variants = override.get("variants")
    if isinstance(variants, dict):
        moved["variants"] = {runtime: current_spelling(variant) if isinstance(variant, dict) else variant
                             for runtime, variant in variants.items()}
    return moved


def engine_config_key(override: Any) -> str:
    """The key a profile's (or a variant's) override writes its engine configuration under: `llm_api` when it
    uses that former name alone, else `engine_config` (doctor's fixes name what the inventory writes)."""
    former = isinstance(override, dict) and "llm_api" in override and "engine_config" not in override
    return "llm_api" if former else "engine_config"


def profile_sources(overrides: dict[str, dict[str, Any]], nodes: int | None = None) -> dict[str, dict[str, Any]]:
    """Built-in profiles with the inventory's overrides merged in (in their current spelling), plus new profiles;
    with nodes, every profile that spans several Sparks and whose split the inventory does not set gets the split
    chosen for that many."""
    sources = {name: copy.deepcopy(spec) for name, spec in BUILTIN_PROFILES.items()}
    for name, override in overrides.items():
        sources[name] = deep_merge(sources.get(name, {}), current_spelling(override))
    if nodes is not None:
        for name, source in sources.items():
            if split_is_chosen(overrides.get(name), source, nodes):
                tp_size, pp_size = chosen_split(nodes, source.get("heads"), source.get("kv_heads"))
                source.update(tp_size=tp_size, pp_size=pp_size)
    return sources


def split_is_chosen(override: Any, source: dict[str, Any], nodes: int) -> bool:
    """Whether sparkpair chooses the split of a profile: it spans several Sparks and the inventory sets neither
    tp_size nor pp_size for it (nor for any of its variants); an explicit split is kept as given."""
    written = [override] + (list((override.get("variants") or {}).values()) if isinstance(override, dict) else [])
    if any(isinstance(part, dict) and ("tp_size" in part or "pp_size" in part) for part in written):
        return False
    tp_size, pp_size = source.get("tp_size", 2), source.get("pp_size", 1)
    return isinstance(tp_size, int) and isinstance(pp_size, int) and tp_size * pp_size > 1 and nodes > 1


def chosen_split(nodes: int, heads: int | None, kv_heads: int | None) -> tuple[int, int]:
    """(tp_size, pp_size) for nodes Sparks, one rank each: the largest tensor-parallel size of TP_SIZES that divides
    the node count and the model's attention heads and shares out its KV heads, pipeline stages for the rest."""
    def fits(tp_size: int) -> bool:
        return (nodes % tp_size == 0 and (heads is None or heads % tp_size == 0)
                and (kv_heads is None or kv_heads % tp_size == 0 or tp_size % kv_heads == 0))

    tp_size = max(tp for tp in TP_SIZES if fits(tp))
    return tp_size, nodes // tp_size


def split_note(profile: Profile, overrides: dict[str, dict[str, Any]], nodes: int) -> str:
    """How the profile's split was reached, for the plan: chosen for the nodes from the model's heads, or as set."""
    split = f"tp_size {profile.tp_size} x pp_size {profile.pp_size}"
    if profile.ranks == 1:
        return f"{split}: one node"
    source = profile_sources(overrides).get(profile.name, {})
    if not split_is_chosen(overrides.get(profile.name), source, nodes):
        return f"{split}: as models.{profile.name} sets it"
    heads = ", ".join(part for part in (f"{profile.heads} attention heads" if profile.heads else "",
                                        f"{profile.kv_heads} KV heads" if profile.kv_heads else "") if part)
    return (f"{split}: chosen for {nodes} nodes" + (f" from the model's {heads}" if heads else "") +
            f" (set models.{profile.name}.tp_size and pp_size to choose another)")


def resolve(name: str, source: dict[str, Any], runtime: str | None = None) -> dict[str, Any]:
    """The source of profile name on runtime (None: its own): the profile as written, or its model facts
    with its variant for that runtime merged over them. KeyError when it has no such variant."""
    own = source.get("runtime", registry.DEFAULT)
    if runtime is None or runtime == own:
        return {**source, "name": name}
    variant = (source.get("variants") or {}).get(runtime)
    if not isinstance(variant, dict):
        raise KeyError(runtime)
    facts = {key: copy.deepcopy(value) for key, value in source.items() if key in MODEL_FACTS}
    return {**facts, **copy.deepcopy(variant), "runtime": runtime, "name": name}
