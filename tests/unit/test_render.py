"""Rendered files: golden output for the example, real `netplan generate`, no leftover defaults."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from sparkpair import render
from sparkpair.errors import RenderError
from sparkpair.inventory import parse_inventory, read_inventory
from sparkpair.render import engine_config, recipe
from sparkpair.runtimes import render_profile

GOLDEN = Path(__file__).parent.parent / "golden" / "example"
OTHER_PORT = Path(__file__).parent.parent / "fixtures" / "inventory" / "other-port.yaml"


def _rendered(path: Path) -> list[render.RenderedFile]:
    inv = read_inventory(path)
    return [f for name, runtime in (("qwen3-235b", None), ("gpt-oss-120b", None), ("llama-3.3-70b", None),
                                    ("qwen3-235b", "vllm"), ("gpt-oss-120b", "vllm"), ("qwen3-235b", "triton"),
                                    ("qwen3-235b", "sglang"))
            for f in render_profile(inv, inv.profile(name, runtime), "inventory.example.yaml")]


def test_example_matches_golden_files(example_inventory_path: Path, update_golden: bool) -> None:
    files = {f.path: f for f in _rendered(example_inventory_path)}
    if update_golden:
        shutil.rmtree(GOLDEN, ignore_errors=True)
        render.write_files(list(files.values()), GOLDEN)
    golden = {str(p.relative_to(GOLDEN)): p for p in GOLDEN.rglob("*") if p.is_file()}
    assert sorted(golden) == sorted(files)
    for name, item in files.items():
        assert item.content == golden[name].read_text(), f"{name} differs from its golden file"


def test_netplan_files_are_private(example_inventory_path: Path) -> None:
    netplans = [f for f in _rendered(example_inventory_path) if f.path.endswith("40-sparkpair-cx7.yaml")]
    assert netplans and all(f.mode == 0o600 for f in netplans)


@pytest.mark.parametrize("inventory_path", ["example", "other-port"])
def test_rendered_netplan_passes_real_netplan_generate(inventory_path: str, example_inventory_path: Path,
                                                      tmp_path: Path) -> None:
    netplan = shutil.which("netplan", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
    if netplan is None:   # a user's PATH on Debian has no sbin; a machine without netplan.io skips, saying so
        if os.environ.get("SPARKPAIR_REQUIRE_TOOLS"):   # scripts/test: never skipped there
            pytest.fail("netplan is not installed: scripts/setup installs netplan.io")
        pytest.skip("needs netplan (Debian/Ubuntu: netplan.io); scripts/setup installs it")
    inv = read_inventory(example_inventory_path if inventory_path == "example" else OTHER_PORT)
    for node in inv.nodes:
        root = tmp_path / node.name
        (root / "etc" / "netplan").mkdir(parents=True)
        item = render.netplan_file(inv, node)
        target = root / "etc" / "netplan" / render.NETPLAN_FILE
        target.write_text(item.content)
        target.chmod(item.mode)
        result = subprocess.run([netplan, "generate", "--root-dir", str(root)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        units = {p.name for p in (root / "run" / "systemd" / "network").iterdir()}
        for interface, address in node.links.items():
            network = (root / "run" / "systemd" / "network" / f"10-netplan-{interface}.network").read_text()
            assert f"Address={address}" in network and f"10-netplan-{interface}.link" in units
            assert f"MTUBytes={inv.cluster.mtu}" in (root / "run" / "systemd" / "network" /
                                                    f"10-netplan-{interface}.link").read_text() + network


def test_other_port_renders_with_no_trace_of_the_defaults() -> None:
    inv = read_inventory(OTHER_PORT)
    text = "\n".join(f.path + "\n" + f.content for f in render_profile(inv, inv.profile("qwen3-235b"), str(OTHER_PORT)))
    for default in ("enp1s0f1np1", "enP2p1s0f1np1", "rocep1s0f1", "roceP2p1s0f1", "192.168.200", "spark-a",
                    "spark-b", "8355", "2233", "trtllm-multinode", "nvcr.io", ".cache/huggingface", "9000"):
        assert default not in text, default
    assert "enp1s0f0np0,enP2p1s0f0np0" in text and "NCCL_IB_HCA=" not in text  # asked of each node at launch
    assert "198.18.7.1 slots=1\n198.18.7.2 slots=1" in text


def test_hostfile_lists_first_link_of_each_node_head_first(example_inventory_path: Path) -> None:
    content = render.hostfile(read_inventory(example_inventory_path)).content
    assert [line for line in content.splitlines() if not line.startswith("#")] == \
        ["192.168.100.10 slots=1", "192.168.100.11 slots=1"]


def test_container_env_has_no_secret(example_inventory_path: Path) -> None:
    content = render.container_env_file(read_inventory(example_inventory_path)).content
    assert "HF_TOKEN=" not in content and "HF_TOKEN_PATH=/sparkpair/secrets/hf_token" in content


def test_each_nodes_fabric_goes_into_its_own_container_env_and_is_never_forwarded(
        example_inventory_path: Path) -> None:
    inv = read_inventory(example_inventory_path)
    offline = render.container_env_file(inv).content
    assert "NCCL_IB_HCA=" not in offline and "NCCL_IB_GID_INDEX=" not in offline
    assert "sparkpair launch asks each node" in offline
    worker = render.container_env_file(inv, recipe.NodeFabric(("rocep1s0f1", "roceP2p1s0f1"), 5)).content
    assert "NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1\nNCCL_IB_GID_INDEX=5\n" in worker
    assert "NCCL_IB_GID_INDEX" not in render.container_env_file(inv, recipe.NodeFabric(("rocep1s0f1",))).content
    argv = recipe.mpirun_argv(inv, inv.profile("qwen3-235b"))
    forwarded = {argv[i + 1] for i, a in enumerate(argv) if a == "-x"}
    assert not forwarded & set(recipe.PER_NODE_ENV)  # -x would hand every rank the head's values


def _with_profile(example_inventory_path: Path, override: dict) -> object:
    data = yaml.safe_load(example_inventory_path.read_text())
    data["models"] = {"qwen3-235b": override}
    return parse_inventory(data)


def test_unknown_yaml_key_is_named_by_its_path(example_inventory_path: Path) -> None:
    inv = _with_profile(example_inventory_path, {"llm_api": {"kv_cache_config": {"free_gpu_mem": 0.5}}})
    with pytest.raises(RenderError, match=r"kv_cache_config\.free_gpu_mem: not an option of TensorRT-LLM 1\.3\.0rc12"):
        render.llm_api_config(inv, inv.profile("qwen3-235b"))


def test_yaml_key_that_collides_with_a_flag_is_refused(example_inventory_path: Path) -> None:
    inv = _with_profile(example_inventory_path, {"llm_api": {"max_num_tokens": 4096}})
    with pytest.raises(RenderError, match=r"max_num_tokens: also passed as --max_num_tokens"):
        render.llm_api_config(inv, inv.profile("qwen3-235b"))


def test_version_dependent_and_speculative_keys_are_checked() -> None:
    problems = engine_config.option_problems({"per_request_spec_decode_stats": True, "speculative_config": {
        "decoding_type": "Eagle", "max_draft_len": 0, "draft_heads": 2}}, set())
    assert any(p.startswith("per_request_spec_decode_stats: not an option of TensorRT-LLM 1.3.0rc12")
               and p.endswith("it exists in TensorRT-LLM 1.4.0rc0") for p in problems)
    assert any(p.startswith("speculative_config.draft_heads: not an option of") for p in problems)
    assert len(problems) == 2, "a model with a refused key is not validated further (as pydantic does)"
    problems = engine_config.option_problems({"speculative_config": {"decoding_type": "Eagle", "max_draft_len": 0}}, set())
    assert problems == ["speculative_config.max_draft_len: TensorRT-LLM 1.3.0rc12 needs an integer >= 1 for "
                        "EagleDecodingConfig (TensorRT-LLM's validate_eagle_config refuses 0)"]


def test_unknown_serve_flag_is_refused(example_inventory_path: Path) -> None:
    inv = _with_profile(example_inventory_path, {"serve_args": {"max_tokens": 10}})
    with pytest.raises(RenderError, match=r"--max_tokens: not a trtllm-serve flag of TensorRT-LLM 1\.3\.0rc12"):
        render.llm_api_config(inv, inv.profile("qwen3-235b"))


def test_undefined_template_variable_is_an_error_naming_the_template() -> None:
    with pytest.raises(RenderError, match=r"template openmpi-hostfile.j2"):
        render.render_template("openmpi-hostfile.j2", cluster="x")


def test_recipe_matches_nvidia_for_the_example(example_inventory_path: Path) -> None:
    """The docker -e values and mpirun -x set of the speculative-decoding playbook, step 4 and 6."""
    inv = read_inventory(example_inventory_path)
    env = recipe.container_env(inv)
    nvidia = {"UCX_NET_DEVICES": "enp1s0f1np1,enP2p1s0f1np1", "NCCL_SOCKET_IFNAME": "enp1s0f1np1,enP2p1s0f1np1",
              "OMPI_MCA_btl_tcp_if_include": "enp1s0f1np1,enP2p1s0f1np1", "OMPI_MCA_rmaps_ppr_n_pernode": "1",
              "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
              "CPATH": "/usr/local/cuda/include", "TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas"}
    assert {k: env[k] for k in nvidia} == nvidia
    argv = recipe.mpirun_argv(inv, inv.profile("qwen3-235b"))
    forwarded = {argv[i + 1] for i, a in enumerate(argv) if a == "-x"}
    assert {"CPATH", "TRITON_PTXAS_PATH", "HF_TOKEN_PATH"} <= forwarded and "HF_TOKEN" not in forwarded
    serve = argv[argv.index("trtllm-llmapi-launch") + 1:]
    assert serve[:2] == ["trtllm-serve", "nvidia/Qwen3-235B-A22B-FP4"]
    pairs = dict(zip(serve[2::2], serve[3::2]))
    assert pairs["--backend"] == "pytorch" and pairs["--tp_size"] == "2" and pairs["--max_num_tokens"] == "1024"
    assert pairs["--port"] == "8355" and pairs["--host"] == "0.0.0.0"


def test_netplan_file_does_not_depend_on_the_order_of_links(example_inventory_path: Path) -> None:
    data = yaml.safe_load(example_inventory_path.read_text())
    for node in data["nodes"]:
        node["links"] = dict(reversed(list(node["links"].items())))
    reordered = parse_inventory(data, "inventory.example.yaml")
    original = read_inventory(example_inventory_path)
    for before, after in zip(original.nodes, reordered.nodes):
        assert list(before.links) != list(after.links)
        assert render.netplan_file(original, before).content == render.netplan_file(reordered, after).content
