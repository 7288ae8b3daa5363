"""train-draft's plan, before anything runs: Qwen3-235B on two Sparks trains offline (its figures written out,
each with its source), a target that fits one Spark trains online, a plan that fits nowhere is one refusal
naming the figure, and the time comes from a measured throughput only."""

from __future__ import annotations

import json

import pytest

from sparkpair.draft import plan as plans
from sparkpair.draft.plan import GIB, NodeRoom, PlanInputs, make_plan

# Qwen3-235B-A22B's config.json (Qwen/Qwen3-235B-A22B on the hub; the GPTQ-Int4 and NVFP4 checkpoints keep it):
# hidden_size 4096, num_hidden_layers 94, vocab_size 151936, num_attention_heads 64, num_key_value_heads 4,
# head_dim 128, num_experts 128, num_experts_per_tok 8, moe_intermediate_size 1536, tie_word_embeddings false.
CONFIG = {"hidden_size": 4096, "num_hidden_layers": 94, "vocab_size": 151936, "num_attention_heads": 64,
          "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
          "moe_intermediate_size": 1536, "intermediate_size": 12288, "tie_word_embeddings": False}
# A Spark: MemTotal 128452014080 B (~119.6 GiB) and 124065050624 B available at idle, from a real GB10's
# `free -b` (Lenovo ThinkStation PGX, DGX OS; tests/testbed/sparkpair_testbed/gb10.py); a 3.7 TB NVMe.
SPARKS = [NodeRoom("spark-a"), NodeRoom("spark-b")]
# The vLLM profile's target at serving precision (GPTQ-Int4): its target_gib, 125 GiB; headroom_gib 8.
TARGET_BYTES, HEADROOM = 125 * GIB, 8 * GIB


def _inputs(**changed: object) -> PlanInputs:
    base = dict(target="Qwen/Qwen3-235B-A22B-GPTQ-Int4", shape=plans.parse_shape(json.dumps(CONFIG).encode(), "test"),
                target_bytes=TARGET_BYTES, target_bytes_source="the profile's target_gib", headroom=HEADROOM,
                ranks=SPARKS, trainers=SPARKS[:1], samples=20000, max_length=2048, steps=10000)
    return PlanInputs(**{**base, **changed})  # type: ignore[arg-type]


def test_the_shape_from_config_json_is_qwen3_235bs() -> None:
    shape = plans.parse_shape(json.dumps(CONFIG).encode(), "test")
    assert shape == plans.QWEN3_235B.__class__(**{**plans.QWEN3_235B.__dict__, "source": "test"})
    # 151936 x 4096 x 2 (embedding, LM head) + 94 x (4096 x 128 x (2 x 64 + 2 x 4) attention
    # + 128 x 3 x 4096 x 1536 experts + 4096 x 128 router)
    assert shape.parameters == 1_244_659_712 + 94 * (71_303_168 + 2_415_919_104 + 524_288) == 235_092_836_352


def test_qwen3_235b_on_two_sparks_trains_offline_with_its_figures() -> None:
    plan = make_plan(_inputs())
    figures = plan.figures
    # the Eagle3 head: fc 3 x 4096^2, attention 2 x 4096 x 128 x (64 + 8) + 64 x 128 x 4096,
    # MLP 3 x 4096 x (8 x 1536), LM head 4096 x 151936
    assert figures["draft_parameters"] == 50_331_648 + 109_051_904 + 150_994_944 + 622_329_856 == 932_708_352
    # training: 16 B per trained parameter, plus one 2048-token sequence's logits (4 x 151936 x 4 B) and
    # the draft's three test-time steps (3 x 64 x 4096 x 2 B) per token
    assert figures["training"] == 932_708_352 * 16 + 2048 * (4 * 151936 * 4 + 3 * 64 * 4096 * 2) == 23_123_197_952
    # online: the whole target beside the training, and what the engine keeps: 154.5 GiB > 115.5 GiB usable
    assert figures["online"] == 125 * GIB + 23_123_197_952 + 8 * GIB == 165_930_860_544
    assert figures["usable"] == 128_452_014_080 - 4_386_963_456 == 124_065_050_624
    # offline: the embedding and LM head (bf16) beside the training: 31.9 GiB on the training Spark
    assert figures["offline"] == 151936 * 4096 * 2 * 2 + 23_123_197_952 + 8 * GIB == 34_202_451_968
    # serving for the hidden states: half the target on each Spark, and the engine's headroom
    assert figures["shard"] == 125 * GIB // 2 + 8 * GIB
    # hidden states: 20000 x 2048 tokens x 4096 x 4 layers x 2 B, and 8 B of token id each: 1.22 TiB
    assert figures["hidden_states"] == 20000 * 2048 * (4096 * 4 * 2 + 8) == 1_342_504_960_000
    assert plan.mode == "offline" and plan.refusal is None and plan.device == "cuda" and plan.precision == "bf16"
    text = "\n".join(plan.lines)
    assert "online needs 154.5 GiB on one node" in text and "115.5 GiB usable" in text
    assert "1.22 TiB" in text and "spark-a: serving 70.5 GiB" in text and "spark-b: serving 70.5 GiB" in text
    assert "disk 1.22 TiB of 3.37 TiB free" in text and "235.1 B parameters" in text


def test_a_target_that_fits_one_spark_trains_online() -> None:
    plan = make_plan(_inputs(target_bytes=65 * GIB))
    assert plan.mode == "online" and plan.refusal is None
    assert not any(line.startswith("hidden states") for line in plan.lines)


def test_offline_without_the_disk_for_the_hidden_states_is_one_refusal_naming_the_figure() -> None:
    small = [NodeRoom("spark-a", disk_free=500 * GIB, asked=True), NodeRoom("spark-b")]
    plan = make_plan(_inputs(trainers=small[:1], ranks=small))
    assert plan.refusal is not None and len(plan.refusal.splitlines()) == 1
    assert "1.22 TiB of disk on spark-a" in plan.refusal and "500.0 GiB free" in plan.refusal
    assert "online needs 154.5 GiB" in plan.refusal


def test_online_asked_for_where_it_does_not_fit_is_refused() -> None:
    plan = make_plan(_inputs(mode="online"))
    assert plan.refusal is not None and plan.refusal.startswith("train-draft --mode online: online needs 154.5 GiB")


def test_vocabulary_compression_shrinks_the_draft() -> None:
    plan = make_plan(_inputs(draft_vocab=32000))
    assert plan.figures["draft_parameters"] == 932_708_352 - 4096 * (151936 - 32000)
    assert any("vocabulary 32000 of the target's 151936" in line for line in plan.lines)


def test_time_comes_from_a_measured_throughput_only() -> None:
    unknown = make_plan(_inputs())
    assert any(line.startswith("time: unknown") for line in unknown.lines)
    measured = make_plan(_inputs(throughput={"offline": {"train": 4096.0, "extract": 40960.0}}, steps=1000))
    # 1000 steps x 1 sequence x 2048 tokens / 4096 tokens/s = 500 s; 20000 x 2048 / 40960 = 1000 s
    assert any("training about 8 min" in line and "hidden states about 17 min" in line for line in measured.lines)


def test_the_cpu_trains_in_float32_and_the_plan_says_why() -> None:
    plan = make_plan(_inputs(device="cpu", device_reason="torch in the image sees no CUDA device",
                             target_bytes=GIB // 100, shape=plans.parse_shape(json.dumps({
                                 **CONFIG, "hidden_size": 256, "num_hidden_layers": 8, "vocab_size": 1024,
                                 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                                 "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128}).encode(),
                                 "test")))
    assert plan.mode == "online" and plan.precision == "float32"
    assert any(line == "device: cpu, float32 (torch in the image sees no CUDA device)" for line in plan.lines)


@pytest.mark.parametrize("raw", [b"[]", b'{"hidden_size": "4096"}', b'{"hidden_size": true}', b"{}"])
def test_a_config_that_is_not_a_models_is_refused_naming_the_field(raw: bytes) -> None:
    with pytest.raises(ValueError, match="config.json"):
        plans.parse_shape(raw, "test")


def test_measured_throughput_is_read_back_typed_per_device_and_mode() -> None:
    from fakenode import FakeNode

    from sparkpair.draft import sizing

    head = FakeNode("spark-a", home="/home/nvidia")
    sizing.write_throughput(head, "cuda", "offline", {"train": 5000.0, "extract": 90000.0})
    sizing.write_throughput(head, "cpu", "online", {"train": 230.0, "extract": 0.0})
    assert sizing.read_throughput(head, "cuda") == {"offline": {"train": 5000.0, "extract": 90000.0}}
    assert sizing.read_throughput(head, "cpu") == {"online": {"train": 230.0}}
    path = "/home/nvidia/.sparkpair/state/drafts/throughput.json"
    head.files[path] = b'{"cuda/online": {"train": "fast", "extract": true}, "cuda/offline": [1]}'
    assert sizing.read_throughput(head, "cuda") == {"online": {}}
    head.files[path] = b"[" * 5000
    assert sizing.read_throughput(head, "cuda") == {}


def test_a_nodes_room_is_its_meminfo_less_what_it_holds_at_idle() -> None:
    from sparkpair.draft import sizing
    from sparkpair.probes import NodeFacts, host

    facts = NodeFacts({host.MEMINFO: {"MemTotal": 125441420, "MemAvailable": 121157276},
                       host.free_bytes("~/.cache/huggingface"): 2 * 1024 ** 4})
    room = sizing._room("spark-a", facts, "~/.cache/huggingface")
    assert room.mem_total == 125441420 * 1024 and room.os_keeps == (125441420 - 121157276) * 1024 and room.asked
    assert room.disk_free == 2 * 1024 ** 4
    unknown = sizing._room("spark-b", NodeFacts(), "~/.cache/huggingface")
    assert unknown.mem_total == plans.SPARK_MEM_TOTAL and not unknown.asked


def test_a_config_nested_too_deeply_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="config.json"):
        plans.parse_shape(b"[" * 100000, "test")
