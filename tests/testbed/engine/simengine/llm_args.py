"""``--extra_llm_api_options`` / ``--config``: load the YAML, reject what TorchLlmArgs rejects.

Every key at every level is checked against the allow-list (``top_level.core``,
``kv_cache_config.core``, ``cuda_graph_config.core``, ``moe_config.core``,
``speculative_config.<type>.core``); unknown keys fail with pydantic's ``extra_forbidden``.
A few fields are also type-checked with pydantic's lax coercion, and the speculative
validators that matter for the recipe (draft length, draft model) are applied.
"""

import yaml

from .allowlist import speculative_section_name
from .pydantic_errors import (ConfigValidationError, FieldError, coerce, coerce_literal,
                              extra_forbidden, mapping_error, value_error)

TOP_LEVEL_KINDS = {
    "max_batch_size": "int", "max_num_tokens": "int", "max_seq_len": "int?", "max_beam_width": "int",
    "max_input_len": "int", "tensor_parallel_size": "int", "pipeline_parallel_size": "int",
    "context_parallel_size": "int", "moe_expert_parallel_size": "int?", "gpus_per_node": "int?",
    "num_postprocess_workers": "int", "stream_interval": "int", "iter_stats_max_iterations": "int?",
    "perf_metrics_max_requests": "int", "max_stats_len": "int", "enable_iter_perf_stats": "bool",
    "enable_iter_req_stats": "bool", "return_perf_metrics": "bool", "print_iter_log": "bool",
    "enable_attention_dp": "bool", "disable_overlap_scheduler": "bool", "enable_autotuner": "bool",
    "enable_chunked_prefill": "bool", "trust_remote_code": "bool", "enable_min_latency": "bool",
    "skip_tokenizer_init": "bool", "model": "str", "revision": "str?",
}
SECTION_CLASSES = {"kv_cache_config": "KvCacheConfig", "cuda_graph_config": "CudaGraphConfig",
                   "moe_config": "MoeConfig", "speculative_config": "DecodingBaseConfig"}
SECTION_KINDS = {
    "kv_cache_config": {"enable_block_reuse": "bool", "max_tokens": "int?", "free_gpu_memory_fraction": "float?",
                        "tokens_per_block": "int", "enable_partial_reuse": "bool", "host_cache_size": "int?",
                        "max_util_for_resume": "float", "dtype": "str"},
    "cuda_graph_config": {"max_batch_size": "int", "enable_padding": "bool"},
    "moe_config": {"max_num_tokens": "int?", "disable_finalize_fusion": "bool"},
    "speculative_config": {"max_draft_len": "int?", "max_concurrency": "int?", "speculative_model": "str?",
                           "speculative_model_dir": "str?", "greedy_sampling": "bool", "eagle3_one_model": "bool"},
}
DECODING_TYPES = ("Eagle", "Eagle3", "Draft_Target", "DraftTarget", "NGram", "MTP")
NEEDS_DRAFT_MODEL = ("Eagle", "Eagle3", "Draft_Target", "DraftTarget")
NEEDS_POSITIVE_DRAFT_LEN = ("Eagle", "Eagle3", "Draft_Target", "DraftTarget", "NGram")
UNCHECKED_SECTIONS = ("build_config",)  # accepted (popped for PyTorch); contents not checked


class ConfigFileError(Exception):
    """The YAML file could not be read or is not a mapping; the text is what gets printed."""


def load_yaml_file(path):
    """Read the options file like trtllm-serve (``yaml.safe_load``); it must be a non-empty mapping."""
    try:
        with open(path) as handle:
            data = yaml.safe_load(handle)
    except FileNotFoundError:
        raise ConfigFileError(f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'")
    except yaml.YAMLError as error:
        raise ConfigFileError(f"{type(error).__module__}.{type(error).__name__}: {error}")
    if data is None:
        raise ConfigFileError("TypeError: argument of type 'NoneType' is not iterable "
                              f"(the options file {path} is empty; it must be a YAML mapping)")
    if not isinstance(data, dict):
        raise ConfigFileError(f"TypeError: the options file {path} must be a YAML mapping, "
                              f"got {type(data).__name__}")
    return data


def _check_kinds(section_loc, data, kinds, errors):
    for key, kind in kinds.items():
        if key in data:
            _value, error = coerce(kind, section_loc + (key,), data[key])
            if error:
                errors.append(error)


def _check_keys(loc, data, allowed, errors):
    for key, value in data.items():
        if key not in allowed:
            errors.append(extra_forbidden(loc + (key,), value))


def _check_kv_cache(data, allow, errors):
    loc = ("kv_cache_config",)
    _check_keys(loc, data, allow["kv_cache_config"]["core"], errors)
    _check_kinds(loc, data, SECTION_KINDS["kv_cache_config"], errors)
    fraction = data.get("free_gpu_memory_fraction")
    if isinstance(fraction, (int, float)) and not 0 <= fraction <= 1:
        errors.append(value_error(loc, data, "kv_cache_config.free_gpu_memory_fraction must be a float between 0 and 1"))


def _check_cuda_graph(data, allow, errors):
    loc = ("cuda_graph_config",)
    _check_keys(loc, data, allow["cuda_graph_config"]["core"], errors)
    _check_kinds(loc, data, SECTION_KINDS["cuda_graph_config"], errors)
    sizes, maximum = data.get("batch_sizes"), data.get("max_batch_size")
    if isinstance(sizes, list) and sizes and isinstance(maximum, int) and maximum and maximum != max(sizes):
        errors.append(value_error(loc, data, "cuda_graph_config.max_batch_size must equal max(batch_sizes)"))


def _check_moe(data, allow, errors):
    loc = ("moe_config",)
    section = allow["moe_config"]
    _check_keys(loc, data, section["core"], errors)
    _check_kinds(loc, data, SECTION_KINDS["moe_config"], errors)
    if "backend" in data:
        _value, error = coerce_literal(loc + ("backend",), data["backend"], section["backend_values_core"])
        if error:
            errors.append(error)
    balancer = data.get("load_balancer")
    if isinstance(balancer, dict):
        _check_keys(loc + ("load_balancer",), balancer, section["load_balancer_fields"], errors)


def _check_speculative(data, allow, errors):
    loc = ("speculative_config",)
    tag = data.get("decoding_type")
    if tag is None:
        errors.append(FieldError(loc, "Unable to extract tag using discriminator 'decoding_type'",
                                 "union_tag_not_found", data))
        return
    section_name = speculative_section_name(allow, tag)
    if tag not in DECODING_TYPES or section_name is None:
        expected = ", ".join(repr(name) for name in DECODING_TYPES)
        errors.append(FieldError(loc, f"Input tag {tag!r} found using 'decoding_type' does not match any "
                                 f"of the expected tags: {expected}", "union_tag_invalid", data))
        return
    _check_keys(loc, data, allow["speculative_config"][section_name]["core"], errors)
    _check_kinds(loc, data, SECTION_KINDS["speculative_config"], errors)
    draft_len = data.get("max_draft_len")
    if tag in NEEDS_POSITIVE_DRAFT_LEN and not (isinstance(draft_len, int) and draft_len > 0):
        errors.append(value_error(loc, data, f"max_draft_len must be > 0 for {tag} decoding"))
    if tag in NEEDS_DRAFT_MODEL and not (data.get("speculative_model") or data.get("speculative_model_dir")):
        errors.append(value_error(loc, data, f"speculative_model (alias speculative_model_dir) must be set for {tag} decoding"))


SECTION_CHECKS = {"kv_cache_config": _check_kv_cache, "cuda_graph_config": _check_cuda_graph,
                  "moe_config": _check_moe, "speculative_config": _check_speculative}


def validate_extra_options(data, allow):
    """Check the YAML mapping; raise ConfigValidationError listing every problem found."""
    errors = []
    top = allow["top_level"]
    known = set(top["core"]) | set(top.get("serve_only_keys", [])) | set(UNCHECKED_SECTIONS)
    _check_keys((), data, known, errors)
    _check_kinds((), {k: v for k, v in data.items() if k in known}, TOP_LEVEL_KINDS, errors)
    for name, check in SECTION_CHECKS.items():
        if name not in data or data[name] is None:
            continue
        if not isinstance(data[name], dict):
            errors.append(mapping_error((name,), data[name], SECTION_CLASSES[name]))
        else:
            check(data[name], allow, errors)
    if errors:
        raise ConfigValidationError("TorchLlmArgs", errors)


def backend_errors(data, backend):
    """Eagle3 is PyTorch-only; the TensorRT backend refuses it (TrtLlmArgs validator)."""
    spec = data.get("speculative_config") or {}
    if backend == "tensorrt" and spec.get("decoding_type") == "Eagle3":
        raise ConfigValidationError("TrtLlmArgs", [value_error(
            ("speculative_config",), spec, "Eagle3 speculative decoding is only supported on the PyTorch backend")])
