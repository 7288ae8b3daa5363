"""trtllm-serve stand-in: flags, YAML strictness, start-up failures (no mpirun needed)."""

import json
import signal
import socket

import pytest
import yaml
from simengine import clickish
from simengine.allowlist import load_allowlist
from simengine.llm_args import validate_extra_options
from simengine.pydantic_errors import ConfigValidationError
from simengine.serve_cli import SERVE_COMMAND
from simengine.serve_config import build_serve_config
from simengine.testing import ServerJob, free_port, http_get, make_model, run_tool, tool_env, wait_until

MODEL = "nvidia/Qwen3-235B-A22B-FP4"
RECIPE_YAML = """\
enable_attention_dp: false
disable_overlap_scheduler: false
enable_autotuner: false
enable_chunked_prefill: false
cuda_graph_config:
    max_batch_size: 1
speculative_config:
    decoding_type: Eagle
    max_draft_len: 3
    speculative_model_dir: {draft}
kv_cache_config:
    free_gpu_memory_fraction: 0.9
    enable_block_reuse: false
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    make_model(root, MODEL)
    make_model(root, "nvidia/Qwen3-235B-A22B-Eagle3", local_dir=root / "eagle")
    return root


def serve(args, cache, **env):
    return run_tool(["trtllm-serve", *args], tool_env(HF_HUB_CACHE=cache, **env), timeout=60)


def write_yaml(tmp_path, text):
    path = tmp_path / "extra.yml"
    path.write_text(text)
    return str(path)


def validation_errors(data):
    with pytest.raises(ConfigValidationError) as caught:
        validate_extra_options(data, load_allowlist())
    return str(caught.value)


@pytest.mark.parametrize("flag, message", [
    (["--foo", "1"], "Error: No such option: --foo"),
    (["--tp-size", "2"], "Error: No such option: --tp-size"),
    (["--backend", "vllm"], "Error: Invalid value for '--backend': 'vllm' is not one of"),
    (["--log_level", "loud"], "Error: Invalid value for '--log_level'"),
    (["--port", "http"], "is not a valid integer"),
    (["--trust_remote_code=1"], "does not take a value"),
])
def test_bad_flags_exit_2_click_style(tmp_path, flag, message):
    result = serve([MODEL, *flag], tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Usage: trtllm-serve serve [OPTIONS] MODEL" in result.stderr


def test_every_1_3_flag_is_accepted():
    expected = load_allowlist().serve_flags()   # the `trtllm-serve serve` options of NVIDIA's 1.3.0rc12 docs
    declared = {name for opt in SERVE_COMMAND.options for name in opt.names}
    assert declared == expected
    values = clickish.parse(SERVE_COMMAND, ["serve-me", "--tp_size", "2", "--backend", "trt",
                                            "--kv_cache_free_gpu_memory_fraction", "0.8", "--config", "x.yml",
                                            "--hf_revision", "main", "--enable_attention_dp"])
    assert values["tensor_parallel_size"] == 2 and values["backend"] == "tensorrt"
    assert values["free_gpu_memory_fraction"] == 0.8 and values["extra_llm_api_options"] == "x.yml"
    assert values["revision"] == "main" and values["enable_attention_dp"] is True


def test_recipe_yaml_is_accepted_and_merged(cache):
    data = yaml.safe_load(RECIPE_YAML.format(draft=cache / "eagle"))
    validate_extra_options(data, load_allowlist())
    cli = clickish.parse(SERVE_COMMAND, [MODEL, "--tp_size", "2", "--max_batch_size", "8"])
    config = build_serve_config(cli, dict(data, max_batch_size=4))
    assert config.max_batch_size == 4, "1.3.x: the YAML wins over the CLI"
    assert config.speculative.max_draft_len == 3 and config.world_size_needed == 2
    assert any("EAGLE (v1/v2) draft checkpoints are incompatible with Eagle3" in w for w in config.warnings)


@pytest.mark.parametrize("data, path", [
    ({"bogus_key": 1}, "bogus_key"),
    ({"kv_cache_config": {"foo": 1}}, "kv_cache_config.foo"),
    ({"cuda_graph_config": {"max_batch_size": 1, "mode": "decode"}}, "cuda_graph_config.mode"),
    ({"moe_config": {"load_balancer": {"num_slots": 1, "oops": 2}}}, "moe_config.load_balancer.oops"),
    ({"speculative_config": {"decoding_type": "Eagle", "max_draft_len": 3,
                             "speculative_model_dir": "/x", "bar": 1}}, "speculative_config.bar"),
    ({"speculative_config": {"decoding_type": "MTP", "max_draft_len": 1, "eagle_choices": []}},
     "speculative_config.eagle_choices"),
    ({"onboard_blocks": True}, "onboard_blocks"),
])
def test_unknown_keys_fail_like_pydantic(data, path):
    text = validation_errors(data)
    assert text.startswith("1 validation error for TorchLlmArgs")
    assert f"\n{path}\n  Extra inputs are not permitted [type=extra_forbidden" in text


def test_value_errors():
    assert "max_draft_len must be > 0" in validation_errors(
        {"speculative_config": {"decoding_type": "Eagle3", "speculative_model": "/x"}})
    assert "speculative_model" in validation_errors({"speculative_config": {"decoding_type": "DraftTarget",
                                                                            "max_draft_len": 2}})
    assert "union_tag_invalid" in validation_errors({"speculative_config": {"decoding_type": "Medusa"}})
    assert "int_parsing" in validation_errors({"max_batch_size": "four"})
    assert "bool_parsing" in validation_errors({"enable_iter_perf_stats": "maybe"})
    assert "2 validation errors" in validation_errors({"a": 1, "kv_cache_config": {"b": 2}})


def test_unknown_yaml_key_end_to_end(tmp_path, cache):
    path = write_yaml(tmp_path, "kv_cache_config:\n  enable_block_reuse: false\n  foo: 1\nspeculative_config:\n"
                                "  decoding_type: Eagle3\n  max_draft_len: 3\n  speculative_model: /x\n  bar: 2\n")
    result = serve([MODEL, "--extra_llm_api_options", path, "--port", str(free_port())], cache)
    assert result.returncode == 1
    assert "pydantic_core._pydantic_core.ValidationError: 2 validation errors for TorchLlmArgs" in result.stderr
    assert "kv_cache_config.foo\n  Extra inputs are not permitted [type=extra_forbidden" in result.stderr
    assert "speculative_config.bar\n  Extra inputs are not permitted" in result.stderr


@pytest.mark.parametrize("text, message", [("", "NoneType"), ("- a\n- b\n", "must be a YAML mapping"),
                                           ("a: [1\n", "yaml.parser")])
def test_yaml_must_be_a_mapping(tmp_path, cache, text, message):
    result = serve([MODEL, "--config", write_yaml(tmp_path, text)], cache)
    assert result.returncode == 1 and message in result.stderr


def test_missing_draft_dir_names_rank_host_and_path(tmp_path, cache):
    path = write_yaml(tmp_path, RECIPE_YAML.format(draft="/nonexistent/Qwen3-235B-A22B-Eagle3/"))
    result = serve([MODEL, "--config", path, "--port", str(free_port())], cache)
    assert result.returncode == 1
    assert f"OSError: rank 0 on {socket.gethostname()}:" in result.stderr
    assert "/nonexistent/Qwen3-235B-A22B-Eagle3/" in result.stderr
    assert "Application startup complete" not in result.stdout + result.stderr


def test_missing_model_in_cache(tmp_path):
    result = serve([MODEL, "--port", str(free_port())], tmp_path)
    assert result.returncode == 1
    assert "couldn't find them in the cached files" in result.stderr
    assert str(tmp_path / "models--nvidia--Qwen3-235B-A22B-FP4") in result.stderr


def test_world_size_mismatch_without_mpi(cache):
    result = serve([MODEL, "--tp_size", "2", "--port", str(free_port())], cache)
    assert result.returncode == 1
    assert "MPI world size is 1, but tp_size * pp_size * cp_size = 2 * 1 * 1 = 2" in result.stderr


def test_port_in_use(cache):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = serve([MODEL, "--host", "127.0.0.1", "--port", str(port)], cache)
    assert result.returncode == 1
    assert f"RuntimeError: Failed to bind socket to 127.0.0.1:{port}: [Errno 98] Address already in use" \
        in result.stderr


def test_help_exits_0(cache):
    assert serve(["--help"], cache).returncode == 0
    result = serve(["serve", "--help"], cache)
    assert result.returncode == 0 and "--extra_llm_api_options" in result.stdout


def test_port_listens_only_after_loading_and_sigterm_is_graceful(tmp_path, cache):
    port = free_port()
    env = tool_env(HF_HUB_CACHE=cache, SIM_LOAD_SECONDS=1.5, HF_TOKEN="hf_SECRET_serve_token_42")
    job = ServerJob(["trtllm-serve", MODEL, "--host", "127.0.0.1", "--port", str(port)], env, tmp_path / "log")
    try:
        wait_until(lambda: "Loading weights" in job.output(), 10, what="loading to start")
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0, "must not accept connections while loading"
        job.wait_healthy(port)
        assert "INFO:     Application startup complete." in job.output()
        job.process.send_signal(signal.SIGTERM)
        assert job.wait_exit(timeout=10) == 0
        assert "INFO:     Application shutdown complete." in job.output()
        assert "hf_SECRET_serve_token_42" not in job.output()
    finally:
        job.stop()


def test_local_directory_model_is_listed_by_basename(tmp_path, cache):
    port = free_port()
    job = ServerJob(["trtllm-serve", str(cache / "eagle"), "--host", "127.0.0.1", "--port", str(port)],
                    tool_env(HF_HUB_CACHE=tmp_path), tmp_path / "log")
    try:
        job.wait_healthy(port)
        status, body = http_get(f"http://127.0.0.1:{port}/v1/models")
        assert status == 200 and json.loads(body)["data"][0]["id"] == "eagle"
        assert json.loads(http_get(f"http://127.0.0.1:{port}/metrics")[1]) == []
    finally:
        job.stop()


def test_nccl_socket_interface_must_exist_on_the_rank_node() -> None:
    """NCCL's bootstrap gives up when NCCL_SOCKET_IFNAME matches none of the node's interfaces."""
    from simengine.node_checks import _interface_matches, check_socket_interfaces

    assert _interface_matches("enp1s0f1np1,enP2p1s0f1np1", ["lo", "enp1s0f1np1"]) == ["enp1s0f1np1"]
    assert _interface_matches("=enp1", ["enp1s0f1np1"]) == []
    assert _interface_matches("^lo", ["lo", "eth0"]) == ["eth0"]
    assert check_socket_interfaces(0, "h", {}) is None
    assert check_socket_interfaces(0, "h", {"NCCL_SOCKET_IFNAME": "lo"}) is None
    failure = check_socket_interfaces(1, "spark-b", {"NCCL_SOCKET_IFNAME": "enp9s9np9"})
    assert "NCCL WARN Bootstrap : no socket interface found" in failure and "rank 1 on spark-b" in failure
