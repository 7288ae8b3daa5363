"""Check an --extra_llm_api_options mapping against TensorRT-LLM 1.3's strict schema.

TensorRT-LLM rejects any unknown key at any level (pydantic extra="forbid"), and a key that is
also a trtllm-serve flag silently overrides the flag in 1.3.x. Both are caught here, before a
single container starts. The allow-list (sparkpair/data/trtllm_allowlist.json) is the
intersection of the llm_args.py revisions that bracket 1.3.0rc12.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

SECTIONS = ("kv_cache_config", "cuda_graph_config", "moe_config")


@cache
def allow_list() -> dict[str, Any]:
    """The parsed allow-list shipped with sparkpair."""
    text = resources.files("sparkpair.data").joinpath("trtllm_allowlist.json").read_text("utf-8")
    return json.loads(text)


def option_problems(options: dict[str, Any], passed_flags: set[str]) -> list[str]:
    """One `key.path: problem` line per unknown, version-dependent or colliding key."""
    schema = allow_list()
    problems = _unknown_keys(options, schema["top_level"], "")
    for section in SECTIONS:
        if isinstance(options.get(section), dict):
            problems += _unknown_keys(options[section], schema[section], f"{section}.")
    speculative = options.get("speculative_config")
    if isinstance(speculative, dict):
        problems += _speculative_problems(speculative, schema["speculative_config"])
    problems += _flag_collisions(options, schema["top_level"]["cli_overlap"], passed_flags)
    return problems


def flag_problems(flags: set[str]) -> list[str]:
    """Flags trtllm-serve 1.3 does not know."""
    known = set(allow_list()["trtllm_serve_flags"]["core"])
    return [f"{flag}: not a trtllm-serve 1.3 flag" for flag in sorted(flags - known)]


def _unknown_keys(mapping: dict[str, Any], section: dict[str, Any], prefix: str) -> list[str]:
    core = set(section["core"])
    later = set(section.get("version_dependent", []))
    forbidden = set(section.get("yaml_forbidden", []))
    problems = []
    for key in mapping:
        if key in forbidden:
            problems.append(f"{prefix}{key}: cannot be set in YAML (a live Python object in TensorRT-LLM)")
        elif key in later:
            problems.append(f"{prefix}{key}: exists only in other TensorRT-LLM versions, not 1.3.0rc12")
        elif key not in core:
            problems.append(f"{prefix}{key}: unknown TensorRT-LLM 1.3 option (TensorRT-LLM would refuse "
                            "it: Extra inputs are not permitted)")
    return problems


def _speculative_problems(speculative: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    kind = speculative.get("decoding_type")
    if kind not in schema["decoding_type_values"]:
        return [f"speculative_config.decoding_type: {kind!r} is not one of "
                f"{', '.join(schema['decoding_type_values'])}"]
    variant = schema.get(kind) or schema.get({"Draft_Target": "DraftTarget"}.get(kind, kind))
    if variant is None:
        return [f"speculative_config.decoding_type: {kind} is not supported by sparkpair's checks"]
    problems = _unknown_keys(speculative, variant, "speculative_config.")
    if not isinstance(speculative.get("max_draft_len"), int) or speculative["max_draft_len"] < 1:
        problems.append("speculative_config.max_draft_len: must be an integer > 0")
    if not (speculative.get("speculative_model") or speculative.get("speculative_model_dir")):
        problems.append("speculative_config.speculative_model_dir: the draft model is required")
    return problems


def _flag_collisions(options: dict[str, Any], overlap: dict[str, str], passed: set[str]) -> list[str]:
    problems = []
    for key_path, flag in overlap.items():
        section, _, key = key_path.rpartition(".")
        holder = options.get(section) if section else options
        if isinstance(holder, dict) and key in holder and flag in passed:
            problems.append(f"{key_path}: also passed as {flag}; in TensorRT-LLM 1.3 the YAML value "
                            "silently wins, so set it in one place only")
    return problems
