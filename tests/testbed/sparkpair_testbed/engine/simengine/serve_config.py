"""The effective serving configuration: CLI values merged with the YAML as 1.3.x merges them.

In 1.3.0rc12 the YAML wins over CLI flags for the same setting (``llm_args | yaml``), and
``kv_cache_config`` is deep-merged. ``hf_revision`` maps to ``revision``; ``disagg_cluster``
is popped by trtllm-serve. The result is a plain picklable dataclass that rank 0 broadcasts.
"""

import os
from dataclasses import dataclass, field

from .pydantic_errors import coerce

EAGLE_ALIAS_WARNING = ("decoding_type 'Eagle' is accepted as a backward-compatible alias for 'Eagle3' on the "
                       "PyTorch backend: EAGLE (v1/v2) draft checkpoints are incompatible with Eagle3 "
                       "speculative decoding; the draft model is loaded as an Eagle3 head.")


@dataclass
class SpeculativeSetup:
    """What the simulated drafter needs to know."""

    decoding_type: str
    max_draft_len: int
    draft_model: str = None
    max_concurrency: int = None


@dataclass
class ServeConfig:
    """Everything every rank needs, decided once by rank 0."""

    model: str
    host: str = "localhost"
    port: int = 8000
    backend: str = "pytorch"
    log_level: str = "info"
    revision: str = None
    tp_size: int = 1
    pp_size: int = 1
    cp_size: int = 1
    max_batch_size: int = 2048
    max_num_tokens: int = 8192
    max_seq_len: int = None
    enable_iter_perf_stats: bool = False
    iter_stats_max_iterations: int = None
    return_perf_metrics: bool = False
    perf_metrics_max_requests: int = 0
    kv_tokens_per_block: int = 32
    kv_max_tokens: int = None
    kv_free_fraction: float = 0.9
    speculative: SpeculativeSetup = None
    warnings: list = field(default_factory=list)

    @property
    def world_size_needed(self):
        """Ranks this configuration needs: tp * pp * cp."""
        return self.tp_size * self.pp_size * self.cp_size

    @property
    def served_model_name(self):
        """What /v1/models reports: basename for a local directory, else the id as given."""
        if os.path.isdir(self.model):
            return os.path.basename(os.path.normpath(self.model))
        return self.model


def _value(yaml_dict, key, kind, fallback):
    if key not in yaml_dict:
        return fallback
    value, _error = coerce(kind, (key,), yaml_dict[key])
    return fallback if value is None and not kind.endswith("?") else value


def _speculative(spec, backend):
    if not spec:
        return None, []
    decoding_type = spec["decoding_type"]
    warnings = []
    if decoding_type == "Eagle" and backend == "pytorch":
        warnings.append(EAGLE_ALIAS_WARNING)
    if decoding_type == "MTP":
        default_len = int(spec.get("num_nextn_predict_layers") or 1)
    else:
        default_len = 0
    draft_len = _value(spec, "max_draft_len", "int?", None) or default_len
    draft_model = spec.get("speculative_model") or spec.get("speculative_model_dir")
    concurrency = _value(spec, "max_concurrency", "int?", None)
    return SpeculativeSetup(decoding_type, int(draft_len), draft_model, concurrency), warnings


def build_serve_config(cli, yaml_dict):
    """Merge parsed CLI values (a dict from serve_cli) with the validated YAML mapping."""
    yaml_dict = dict(yaml_dict or {})
    yaml_dict.pop("disagg_cluster", None)
    if "hf_revision" in yaml_dict:
        yaml_dict.setdefault("revision", yaml_dict.pop("hf_revision"))
    kv = dict(yaml_dict.get("kv_cache_config") or {})
    backend = _value(yaml_dict, "backend", "str", cli["backend"])
    speculative, warnings = _speculative(yaml_dict.get("speculative_config"), backend)
    return ServeConfig(
        model=_value(yaml_dict, "model", "str", cli["model"]),
        host=cli["host"], port=cli["port"], backend=backend, log_level=cli["log_level"],
        revision=_value(yaml_dict, "revision", "str?", cli["revision"]),
        tp_size=_value(yaml_dict, "tensor_parallel_size", "int", cli["tensor_parallel_size"]),
        pp_size=_value(yaml_dict, "pipeline_parallel_size", "int", cli["pipeline_parallel_size"]),
        cp_size=_value(yaml_dict, "context_parallel_size", "int", cli["context_parallel_size"]),
        max_batch_size=_value(yaml_dict, "max_batch_size", "int", cli["max_batch_size"]),
        max_num_tokens=_value(yaml_dict, "max_num_tokens", "int", cli["max_num_tokens"]),
        max_seq_len=_value(yaml_dict, "max_seq_len", "int?", cli["max_seq_len"]),
        enable_iter_perf_stats=_value(yaml_dict, "enable_iter_perf_stats", "bool", False),
        iter_stats_max_iterations=_value(yaml_dict, "iter_stats_max_iterations", "int?", None),
        return_perf_metrics=_value(yaml_dict, "return_perf_metrics", "bool", False),
        perf_metrics_max_requests=_value(yaml_dict, "perf_metrics_max_requests", "int", 0),
        kv_tokens_per_block=_value(kv, "tokens_per_block", "int", 32),
        kv_max_tokens=_value(kv, "max_tokens", "int?", None),
        kv_free_fraction=_value(kv, "free_gpu_memory_fraction", "float?", cli["free_gpu_memory_fraction"]),
        speculative=speculative,
        warnings=warnings,
    )
