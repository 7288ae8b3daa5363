"""sparkpair's engine-config check and the stand-in engine's agree on what TensorRT-LLM 1.3.0rc12 refuses.

They take different routes from the same NVIDIA files: sparkpair reads what scripts/trtllm_schema/
derive.py makes of them (sparkpair/data/trtllm_schema.json, flattened field specs); the stand-in
(simengine.nvidia_schema, its own package, importing nothing of sparkpair) interprets NVIDIA's JSON
Schema and the 1.3.0rc12 index as published, with a JSON Schema subset validator. Both are fed the
corpus below and must accept the same configs and refuse the others at the same key paths.

The corpus: sparkpair's built-in profiles and NVIDIA's playbook examples whole; each key of the
playbook examples alone; for every field of the checked 1.3.0rc12 classes a value of its type and
one of another type; wrong literals; unknown keys at every level; per decoding type a valid config,
a zero draft length, a missing draft model and an unknown key.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkpair.inventory import read_inventory
from sparkpair.render import engine_config, recipe
from sparkpair.render.engine_schema import Judged

nvidia_schema = pytest.importorskip("simengine.nvidia_schema", reason="the testbed package (scripts/setup) is not installed")

REPO = Path(__file__).resolve().parents[2]
SOURCES = REPO / "scripts" / "trtllm_schema" / "sources"
SCHEMA = json.loads((SOURCES / "trtllm-serve-config.schema.json").read_text())
INDEX = json.loads((SOURCES / "trtllm-1.3.0rc12-searchindex.extract.json").read_text())
RC12 = Judged("1.3.0rc12")
DRAFT = "/opt/draft"
SECTIONS = {"kv_cache_config": "KvCacheConfig", "cuda_graph_config": "DecodeCudaGraphConfig", "moe_config": "MoeConfig"}
OLD = {"DecodeCudaGraphConfig": "CudaGraphConfig"}
# A valid speculative_config per decoding_type, as small as each class allows.
SPECULATIVE = {
    "Eagle": {"decoding_type": "Eagle", "max_draft_len": 3, "speculative_model_dir": DRAFT},
    "Eagle3": {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": DRAFT},
    "DraftTarget": {"decoding_type": "DraftTarget", "max_draft_len": 4, "speculative_model_dir": DRAFT},
    "Draft_Target": {"decoding_type": "Draft_Target", "max_draft_len": 4, "speculative_model": DRAFT},
    "NGram": {"decoding_type": "NGram", "max_draft_len": 2},
    "SA": {"decoding_type": "SA", "max_draft_len": 2},
    "MTP": {"decoding_type": "MTP"},
    "PARD": {"decoding_type": "PARD", "max_draft_len": 2, "speculative_model": DRAFT},
    "AUTO": {"decoding_type": "AUTO"},
    "SaveState": {"decoding_type": "SaveState", "output_directory": "/tmp/states"},
}


def fields_of(cls: str) -> list[str]:
    return [e[4] for e in INDEX["objects"][f"tensorrt_llm.llmapi.{OLD.get(cls, cls)}"] if e[1] == 15]


def schema_node(cls: str, key: str) -> dict[str, Any] | None:
    props = SCHEMA["properties"] if cls == "TorchLlmArgs" else SCHEMA["$defs"][cls]["properties"]
    return props.get(key)


def leaves(node: dict[str, Any]) -> list[dict[str, Any]]:
    for key in ("anyOf", "oneOf"):
        if key in node:
            return [leaf for option in node[key] for leaf in leaves(option)]
    if "$ref" in node:
        target = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[1]]
        return [{"type": "object"}] if "properties" in target else leaves(target)
    return [node]


def kinds_of(node: dict[str, Any]) -> set[str]:
    """The JSON types a schema node takes."""
    found: set[str] = set()
    for leaf in leaves(node):
        kind = leaf.get("type") or {str: "string", int: "integer"}[type(leaf.get("const", (leaf.get("enum") or [""])[0]))]
        found |= set(kind if isinstance(kind, list) else [kind])
    return found


def good_and_bad(node: dict[str, Any]) -> tuple[Any, Any]:
    """A value the schema node takes, and one of a type it does not take (None if it takes them all)."""
    first = leaves(node)[0]
    if "const" in first or "enum" in first:
        good = first["const"] if "const" in first else first["enum"][0]
    else:
        kind = first["type"] if isinstance(first["type"], str) else first["type"][0]
        low = first.get("minimum", first.get("exclusiveMinimum", -1) + 1)
        good = {"boolean": True, "integer": int(low), "number": float(low), "string": "auto", "null": None,
                "array": [], "object": {}}[kind]
    kinds = kinds_of(node)
    for bad, unlike in (("a string", {"string"}), (7, {"integer", "number"}), ([1, "x"], {"array"}), ({"x": 1}, {"object"})):
        if not kinds & unlike:
            return good, bad
    return good, None


def corpus() -> dict[str, dict[str, Any]]:
    cases: dict[str, dict[str, Any]] = {}
    inv = read_inventory(REPO / "inventory.example.yaml")
    for name in sorted(inv.profiles):
        cases[f"profile {name}"] = recipe.llm_api_options(inv.profile(name))
    for path in sorted((SOURCES / "playbooks").glob("*.yml")):
        example = yaml.safe_load(path.read_text())
        cases[f"playbook {path.stem}"] = example
        for key, value in example.items():
            if key == "speculative_config":
                cases[f"playbook {path.stem} {key}"] = {key: value}
            elif isinstance(value, dict):
                for inner, item in value.items():
                    cases[f"playbook {path.stem} {key}.{inner}"] = {key: {inner: item}}
            else:
                cases[f"playbook {path.stem} {key}"] = {key: value}
    for key in fields_of("TorchLlmArgs"):
        node = schema_node("TorchLlmArgs", key)
        if node is None or key in SECTIONS or key in ("speculative_config", "mpi_session"):
            continue
        good, bad = good_and_bad(node)
        cases[f"type {key} good"] = {key: good}
        if bad is not None:
            cases[f"type {key} bad"] = {key: bad}
    for section, cls in SECTIONS.items():
        for key in fields_of(cls):
            node = schema_node(cls, key)
            if node is None:
                continue
            good, bad = good_and_bad(node)
            cases[f"type {section}.{key} good"] = {section: {key: good}}
            if bad is not None:
                cases[f"type {section}.{key} bad"] = {section: {key: bad}}
        cases[f"unknown {section}.bogus"] = {section: {"bogus": 1}}
        cases[f"not a mapping {section}"] = {section: "yes"}
    for tag, spec in SPECULATIVE.items():
        cls = SCHEMA["properties"]["speculative_config"]["anyOf"][0]["discriminator"]["mapping"].get(
            tag, "#/DraftTargetDecodingConfig").rsplit("/", 1)[1]
        cases[f"speculative {tag}"] = {"speculative_config": spec}
        cases[f"speculative {tag} bogus key"] = {"speculative_config": dict(spec, bogus=1)}
        cases[f"speculative {tag} zero draft length"] = {"speculative_config": dict(spec, max_draft_len=0)}
        cases[f"speculative {tag} draft length as text"] = {"speculative_config": dict(spec, max_draft_len="3")}
        without = {k: v for k, v in spec.items() if not k.startswith("speculative_model")}
        cases[f"speculative {tag} no draft model"] = {"speculative_config": without}
        for key in fields_of(cls):
            node = schema_node(cls, key)
            if node is None or key == "decoding_type":
                continue
            good, bad = good_and_bad(node)
            if bad is not None:
                cases[f"speculative {tag} {key} bad"] = {"speculative_config": dict(spec, **{key: bad})}
    for tag in ("EAGLE3", "eagle", "Draft-Target", "draft_target", "Medusa", "Lookahead", "DFlash", "DSpark", 3, ""):
        cases[f"decoding_type {tag!r}"] = {"speculative_config": dict(SPECULATIVE["Eagle"], decoding_type=tag)}
    cases["decoding_type missing"] = {"speculative_config": {"max_draft_len": 3, "speculative_model_dir": DRAFT}}
    cases["speculative_config null"] = {"speculative_config": None}
    cases["speculative_config text"] = {"speculative_config": "Eagle"}
    cases["sa_config on Eagle3"] = {"speculative_config": dict(SPECULATIVE["Eagle3"], sa_config={"threshold": 4})}
    cases["sa_config unknown key"] = {"speculative_config": dict(SPECULATIVE["Eagle3"], sa_config={"thresh": 4})}
    cases["sa_config on Eagle"] = {"speculative_config": dict(SPECULATIVE["Eagle"], sa_config={"threshold": 4})}
    cases["cuda graph sizes disagree"] = {"cuda_graph_config": {"batch_sizes": [1, 2], "max_batch_size": 8}}
    cases["cuda graph sizes agree"] = {"cuda_graph_config": {"batch_sizes": [1, 2], "max_batch_size": 2}}
    cases["cuda_graph_config null"] = {"cuda_graph_config": None}
    for key in ("bogus", "onboard_blocks", "build_config", "per_request_spec_decode_stats", "_mpi_session"):
        cases[f"unknown {key}"] = {key: 1}
    for key in ("mpi_session", "checkpoint_loader", "batched_logits_processor"):
        cases[f"live object {key}"] = {key: "x"}
    for key in ("hf_revision", "sampler_type", "decoding_config", "video_pruning_rate", "disable_flashinfer_sampling"):
        cases[f"1.3.0rc12 only or alias {key}"] = {key: {} if key == "decoding_config" else "x"}
    cases["moe load_balancer unknown key"] = {"moe_config": {"load_balancer": {"num_slots": 1, "oops": 2}}}
    cases["moe load_balancer wrong type"] = {"moe_config": {"load_balancer": {"num_slots": "x"}}}
    cases["moe load_balancer as a file"] = {"moe_config": {"load_balancer": "/etc/eplb.yaml"}}
    for algorithm in ("rocket", "dsa", "skip_softmax", "qsa", "minimax_m3", None):
        cases[f"sparse attention {algorithm}"] = {"sparse_attention_config": {} if algorithm is None else
                                                  {"algorithm": algorithm}}
    cases["two faults"] = {"kv_cache_config": {"bogus": 1}, "max_batch_size": "8"}
    return cases


CORPUS = corpus()


def sparkpair_paths(options: dict[str, Any]) -> set[str]:
    return {line.split(": ", 1)[0] for line in engine_config.refusals(copy.deepcopy(options), RC12)}


def standin_paths(options: dict[str, Any]) -> set[str]:
    return {problem.key_path for problem in nvidia_schema.load().validate(copy.deepcopy(options))}


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_both_checks_agree(case: str) -> None:
    options = CORPUS[case]
    assert sparkpair_paths(options) == standin_paths(options), (case, engine_config.refusals(options, RC12),
                                                                nvidia_schema.load().validate(options))


def test_the_corpus_has_both_verdicts_everywhere() -> None:
    refused = {case for case, options in CORPUS.items() if sparkpair_paths(options)}
    assert len(CORPUS) > 300
    assert 0.25 < len(refused) / len(CORPUS) < 0.75
    for prefix in ("profile", "playbook"):
        assert not any(case.startswith(prefix) for case in refused), sorted(refused)
    for word in ("bad", "unknown", "decoding_type", "zero draft length", "no draft model", "live object"):
        assert any(word in case for case in refused), word


def test_the_standin_reads_the_same_nvidia_files() -> None:
    here = Path(nvidia_schema.__file__).parent
    for name in ("trtllm-serve-config.schema.json", "trtllm-1.3.0rc12-searchindex.extract.json"):
        assert (here / name).read_bytes() == (SOURCES / name).read_bytes(), name


def test_both_know_the_same_decoding_types_and_flags() -> None:
    data = RC12.rules
    assert sorted(nvidia_schema.load().decoding_tags()) == sorted(data["classes"]["TorchLlmArgs"]["speculative_config"]
                                                                 ["union"]["choices"])
    assert nvidia_schema.load().serve_flags() == set(data["serve_flags"])
