"""The engine-config check: derived from NVIDIA's sources, by version, keys, types and values."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkpair.inventory import read_inventory
from sparkpair.inventory.profiles import BUILTIN_PROFILES, profile_sources
from sparkpair.render import engine_config, recipe
from sparkpair.render.engine_schema import Judged, describe, image_tag, judged_version, schema_data

REPO = Path(__file__).resolve().parents[2]
DERIVE = REPO / "scripts" / "trtllm_schema" / "derive.py"
SOURCES = DERIVE.parent / "sources"
DATA = REPO / "sparkpair" / "data" / "trtllm_schema.json"
RC12, NEW = Judged("1.3.0rc12"), Judged("1.4.0rc0")
EAGLE = {"decoding_type": "Eagle", "max_draft_len": 3, "speculative_model_dir": "/opt/draft"}


def test_generator_reproduces_the_committed_data_file_byte_for_byte(tmp_path: Path) -> None:
    out = tmp_path / "trtllm_schema.json"
    subprocess.run([sys.executable, str(DERIVE), "--out", str(out)], check=True, capture_output=True)
    assert out.read_bytes() == DATA.read_bytes(), "run scripts/trtllm_schema/derive.py and commit the result"


def test_the_header_names_every_source_with_its_commit_and_hash() -> None:
    sources = schema_data()["_header"]["sources"]
    files = {entry["file"] for entry in sources}
    kept = {str(p.relative_to(REPO)) for p in SOURCES.rglob("*") if p.is_file() and p.name != "SOURCES.md"}
    assert files == kept
    for entry in sources:
        assert re.search(r"@[0-9a-f]{40}$", entry["origin"]), entry
        assert entry["url"].startswith("https://") and entry["tensorrt_llm"]
        assert hashlib.sha256((REPO / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]


def test_the_1_4_0rc0_keys_are_the_schema_properties() -> None:
    schema = json.loads((SOURCES / "trtllm-serve-config.schema.json").read_text())
    classes = schema_data()["versions"]["1.4.0rc0"]["classes"]
    assert set(classes["TorchLlmArgs"]) == set(schema["properties"])
    assert set(classes["KvCacheConfig"]) == set(schema["$defs"]["KvCacheConfig"]["properties"])


@pytest.mark.parametrize("name", sorted(BUILTIN_PROFILES))
def test_builtin_profiles_pass_against_the_pinned_version(example_inventory_path: Path, name: str) -> None:
    inv = read_inventory(example_inventory_path)
    profile = inv.profile(name)
    flags = recipe.passed_flags(inv, profile)
    judged = engine_config.judged_version(inv.container.image)
    assert judged == RC12
    assert engine_config.option_problems(recipe.llm_api_options(profile), flags, judged) == []
    assert engine_config.flag_problems(flags, judged) == []


@pytest.mark.parametrize("playbook", sorted((SOURCES / "playbooks").glob("*.yml")), ids=lambda p: p.stem)
def test_nvidia_playbook_examples_pass_against_1_3_0rc12(playbook: Path) -> None:
    assert engine_config.option_problems(yaml.safe_load(playbook.read_text()), set(), RC12) == []


def test_every_flag_sparkpair_passes_is_in_nvidia_cli_reference(example_inventory_path: Path) -> None:
    cli = yaml.safe_load((SOURCES / "trtllm_serve_cli.yaml").read_text())
    reference = {flag for option in cli["commands"]["serve"]["options"].values() for flag in option["flags"]}
    rc12 = set(schema_data()["versions"]["1.3.0rc12"]["serve_flags"])
    inv = read_inventory(example_inventory_path)
    for name in profile_sources({}):
        passed = {arg for arg in recipe.serve_argv(inv, inv.profile(name)) if arg.startswith("--")}
        assert passed, name
        assert passed <= reference, f"{name}: {sorted(passed - reference)} not in trtllm_serve_cli.yaml"
        assert passed <= rc12, f"{name}: {sorted(passed - rc12)} not trtllm-serve 1.3.0rc12 flags"


@pytest.mark.parametrize(("image", "version", "note"), [
    ("nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12", "1.3.0rc12", ""),
    ("registry.local:5000/trtllm:1.4.0rc0", "1.4.0rc0", ""),
    ("nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12@sha256:" + "a" * 64, "1.3.0rc12", ""),
    ("nvcr.io/nvidia/tensorrt-llm/release@sha256:" + "b" * 64, "1.3.0rc12", "has no tag"),
    ("nvcr.io/nvidia/tensorrt-llm/release:latest", "1.3.0rc12", "not for image tag 'latest'"),
    ("registry.local:5000/trtllm", "1.3.0rc12", "has no tag"),
])
def test_the_version_comes_from_the_image_tag(image: str, version: str, note: str) -> None:
    judged = judged_version(image)
    assert judged.version == version
    assert (note in judged.note) if note else judged.note == ""
    assert judged.label.startswith(f"TensorRT-LLM {version}")


def test_image_tag_ignores_a_registry_port() -> None:
    assert image_tag("registry.local:5000/trtllm") is None
    assert image_tag("registry.local:5000/trtllm:1.3.0rc12") == "1.3.0rc12"


def test_an_unknown_tag_is_named_in_the_problem_line(example_inventory_path: Path) -> None:
    judged = judged_version("nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6")
    problems = engine_config.option_problems({"max_draft_len": 3}, set(), judged)
    assert problems == ["max_draft_len: not an option of TensorRT-LLM 1.3.0rc12 (the pinned version: sparkpair has "
                        "NVIDIA's schema for 1.3.0rc12, 1.4.0rc0, not for image tag '1.2.0rc6'), which refuses it "
                        "(Extra inputs are not permitted)"]


GOOD: list[dict[str, Any]] = [
    {"kv_cache_config": {"free_gpu_memory_fraction": 0.85, "enable_block_reuse": False, "dtype": "fp8"}},
    {"kv_cache_config": {"free_gpu_memory_fraction": 1}},        # an int where a number is wanted
    {"kv_cache_config": {"free_gpu_memory_fraction": None, "max_tokens": 4096, "tokens_per_block": 64}},
    {"cuda_graph_config": {"batch_sizes": [1, 2, 4], "max_batch_size": 4, "enable_padding": True}},
    {"cuda_graph_config": None},
    {"moe_config": {"backend": "CUTLASS", "max_num_tokens": 2048}},
    {"speculative_config": dict(EAGLE, decoding_type="Eagle3", eagle3_one_model=True)},
    {"speculative_config": {"decoding_type": "Draft_Target", "max_draft_len": 4, "speculative_model": "/opt/d"}},
    {"speculative_config": {"decoding_type": "DraftTarget", "max_draft_len": 4, "speculative_model_dir": "/opt/d"}},
    {"speculative_config": {"decoding_type": "NGram", "max_draft_len": 2, "max_matching_ngram_size": 4}},
    {"speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": 1}},
    {"max_seq_len": 8192.0, "stream_interval": 2, "print_iter_log": True, "attn_backend": "TRTLLM"},
    {"guided_decoding_backend": "xgrammar", "allreduce_strategy": "NCCL", "load_format": "auto"},
    {"sparse_attention_config": {"algorithm": "rocket", "window_size": 32}},   # the tag is checked, not the keys
    {"checkpoint_loader": None, "batched_logits_processor": None},            # live objects: only null from YAML
]


@pytest.mark.parametrize("options", GOOD, ids=lambda o: ",".join(o))
def test_good_values_pass(options: dict[str, Any]) -> None:
    assert engine_config.option_problems(options, set(), RC12) == []


BAD: list[tuple[dict[str, Any], str, str]] = [
    ({"enable_iter_perf_stats": "true"}, "enable_iter_perf_stats", "'true' is not accepted by TensorRT-LLM 1.3.0rc12 "
                                                                  "(expected a boolean (true or false))"),
    ({"print_iter_log": 1}, "print_iter_log", "expected a boolean"),
    ({"max_batch_size": True}, "max_batch_size", "expected an integer or null"),
    ({"max_num_tokens": "8192"}, "max_num_tokens", "'8192' is not accepted"),
    ({"max_seq_len": 8192.5}, "max_seq_len", "8192.5 is not accepted"),
    ({"stream_interval": 0}, "stream_interval", "expected an integer > 0"),
    ({"kv_cache_config": {"free_gpu_memory_fraction": 1.5}}, "kv_cache_config.free_gpu_memory_fraction",
     "expected a number in [0, 1] or null"),
    ({"kv_cache_config": {"free_gpu_memory_fraction": -0.1}}, "kv_cache_config.free_gpu_memory_fraction", "[0, 1]"),
    ({"kv_cache_config": {"free_gpu_memory_fraction": "0.9"}}, "kv_cache_config.free_gpu_memory_fraction", "'0.9'"),
    ({"kv_cache_config": {"enable_block_reuse": "no"}}, "kv_cache_config.enable_block_reuse", "boolean"),
    ({"kv_cache_config": {"mamba_ssm_cache_dtype": "fp8"}}, "kv_cache_config.mamba_ssm_cache_dtype",
     "expected one of 'auto', 'bfloat16', 'float16', 'float32'"),
    ({"kv_cache_config": {"onboard_blocks": True}}, "kv_cache_config.onboard_blocks", "not an option of"),
    ({"kv_cache_config": []}, "kv_cache_config", "expected a mapping"),
    ({"cuda_graph_config": {"batch_sizes": [1, "2"]}}, "cuda_graph_config.batch_sizes", "expected a list of integer"),
    ({"cuda_graph_config": {"max_batch_size": -1}}, "cuda_graph_config.max_batch_size", "expected an integer >= 0"),
    ({"cuda_graph_config": {"batch_sizes": [1, 2], "max_batch_size": 8}}, "cuda_graph_config.max_batch_size",
     "must equal max(batch_sizes) = 2"),
    ({"cuda_graph_config": {"mode": "decode"}}, "cuda_graph_config.mode", "it exists in TensorRT-LLM 1.4.0rc0"),
    ({"moe_config": {"backend": "cutlass"}}, "moe_config.backend", "expected one of 'AUTO'"),
    ({"moe_config": {"use_low_precision_moe_combine": "yes"}}, "moe_config.use_low_precision_moe_combine", "boolean"),
    ({"moe_config": {"load_balancer": {"num_slots": 4, "oops": 1}}}, "moe_config.load_balancer.oops", "not an option of"),
    ({"speculative_config": dict(EAGLE, decoding_type="EAGLE3")}, "speculative_config.decoding_type",
     "'EAGLE3' is not accepted by TensorRT-LLM 1.3.0rc12 (expected one of AUTO, DraftTarget, Draft_Target, Eagle, "
     "Eagle3, MTP, NGram, PARD, SA, SaveState, User_Provided)"),
    ({"speculative_config": dict(EAGLE, decoding_type="Medusa")}, "speculative_config.decoding_type", "'Medusa'"),
    ({"speculative_config": {"max_draft_len": 3}}, "speculative_config.decoding_type", "missing"),
    ({"speculative_config": dict(EAGLE, max_draft_len=0)}, "speculative_config.max_draft_len",
     "needs an integer >= 1 for EagleDecodingConfig"),
    ({"speculative_config": dict(EAGLE, max_draft_len="3")}, "speculative_config.max_draft_len", "'3' is not accepted"),
    ({"speculative_config": dict(EAGLE, max_draft_len=2.5)}, "speculative_config.max_draft_len", "2.5"),
    ({"speculative_config": {"decoding_type": "Eagle", "max_draft_len": 3}}, "speculative_config.speculative_model",
     "needs the draft model (speculative_model or speculative_model_dir)"),
    ({"speculative_config": {"decoding_type": "DraftTarget", "speculative_model_dir": "/d"}},
     "speculative_config.max_draft_len", "needs an integer >= 1 for DraftTargetDecodingConfig"),
    ({"speculative_config": {"decoding_type": "NGram", "max_draft_len": 0}}, "speculative_config.max_draft_len", ">= 1"),
    ({"speculative_config": dict(EAGLE, sa_config={"threshold": 4})}, "speculative_config.sa_config",
     "not an option of TensorRT-LLM 1.3.0rc12"),
    ({"speculative_config": dict(EAGLE, decoding_type="Eagle3", sa_config={"thresh": 4})},
     "speculative_config.sa_config.thresh", "not an option of"),
    ({"speculative_config": dict(EAGLE, eagle3_model_arch="qwen3")}, "speculative_config.eagle3_model_arch",
     "expected one of 'llama3', 'mistral_large3'"),
    ({"speculative_config": dict(EAGLE, draft_heads=2)}, "speculative_config.draft_heads", "not an option of"),
    ({"speculative_config": dict(EAGLE, acceptance_rate_threshold=0.5)}, "speculative_config.acceptance_rate_threshold",
     "it exists in TensorRT-LLM 1.4.0rc0"),
    ({"checkpoint_loader": "x"}, "checkpoint_loader", "cannot be set in YAML"),
    ({"sparse_attention_config": {"algorithm": "qsa"}}, "sparse_attention_config.algorithm",
     "'qsa' is not accepted by TensorRT-LLM 1.3.0rc12 (expected one of dsa, rocket, skip_softmax)"),
    ({"free_gpu_mem": 0.5}, "free_gpu_mem", "not an option of TensorRT-LLM 1.3.0rc12, which refuses it"),
]


@pytest.mark.parametrize(("options", "path", "text"), BAD, ids=[case[1] for case in BAD])
def test_bad_values_are_refused_with_key_path_and_version(options: dict[str, Any], path: str, text: str) -> None:
    problems = engine_config.option_problems(options, set(), RC12)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{path}: ") and text in problems[0], problems[0]
    assert "TensorRT-LLM 1.3.0rc12" in problems[0]


def test_versions_differ_on_the_draft_target_spelling() -> None:
    spec = {"speculative_config": {"decoding_type": "DraftTarget", "max_draft_len": 4, "speculative_model_dir": "/d"}}
    assert engine_config.option_problems(spec, set(), RC12) == []
    assert engine_config.option_problems(spec, set(), NEW) == [
        "speculative_config.decoding_type: 'DraftTarget' is not accepted by TensorRT-LLM 1.4.0rc0 (expected one of AUTO, "
        "DFlash, DSpark, Draft_Target, Eagle, Eagle3, MTP, NGram, PARD, SA, SaveState, User_Provided)"]


def test_versions_differ_on_keys() -> None:
    assert engine_config.option_problems({"cuda_graph_config": {"mode": "decode"}}, set(), NEW) == []
    assert engine_config.option_problems({"kv_cache_config": {"disk_cache_size": 10}}, set(), NEW) == []
    assert engine_config.option_problems({"video_pruning_rate": 0.5}, set(), RC12) == []   # checked by name only
    assert engine_config.option_problems({"video_pruning_rate": 0.5}, set(), NEW)[0].startswith(
        "video_pruning_rate: not an option of TensorRT-LLM 1.4.0rc0")


def test_keys_also_passed_as_flags_are_refused() -> None:
    problems = engine_config.option_problems({"max_num_tokens": 1024, "tensor_parallel_size": 2, "model": "m",
                                              "kv_cache_config": {"free_gpu_memory_fraction": 0.9}},
                                             {"--max_num_tokens", "--tp_size", "--kv_cache_free_gpu_memory_fraction"}, RC12)
    assert problems == [
        "kv_cache_config.free_gpu_memory_fraction: also passed as --kv_cache_free_gpu_memory_fraction; set it in one "
        "place only (in TensorRT-LLM 1.3.x the YAML value silently wins)",
        "max_num_tokens: also passed as --max_num_tokens; set it in one place only (in TensorRT-LLM 1.3.x the YAML "
        "value silently wins)",
        "model: also passed as the MODEL argument; set it in one place only (in TensorRT-LLM 1.3.x the YAML value "
        "silently wins)",
        "tensor_parallel_size: also passed as --tp_size; set it in one place only (in TensorRT-LLM 1.3.x the YAML "
        "value silently wins)"]
    assert engine_config.option_problems({"max_num_tokens": 1024}, {"--max_num_tokens"}, NEW) == [
        "max_num_tokens: also passed as --max_num_tokens; set it in one place only"]


def test_flags_are_judged_by_version() -> None:
    assert engine_config.flag_problems({"--tp_size", "--kv_cache_free_gpu_memory_fraction"}, RC12) == []
    assert engine_config.flag_problems({"--num_serve_frontends"}, RC12) == [
        "--num_serve_frontends: not a trtllm-serve flag of TensorRT-LLM 1.3.0rc12"]
    assert engine_config.flag_problems({"--num_serve_frontends"}, NEW) == []


def test_describe_reads_like_english() -> None:
    assert describe({"types": ["null", "integer"], "min": 0}) == "an integer >= 0 or null"
    assert describe({"types": ["number"], "xmin": 0, "max": 1}) == "a number in (0, 1]"
    assert describe({"types": ["integer", "string"], "ints": [0, 1], "strings": ["auto"]}) == "one of 0, 1 or one of 'auto'"
    assert describe({"types": None}) == "anything"
