"""train-draft at the target's real size, on what sparkpair renders (no GPU and no TensorRT-LLM here): the
training container on a Spark gets the GPUs and trains in bf16, the device is what torch in the image says
(the simulated pair's GB10 stand-in with a CPU torch trains on the CPU, and says so); offline, each engine
renders its hidden-state capture (TensorRT-LLM's SaveState as ModelOpt's compute_hidden_states_trtllm sets
it, vLLM's extract_hidden_states with its connector), the engine's answers are hostile, and the hidden states
are installed copied-while-hashed, only the files named, the engine's removed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fakenode import FakeNode, prefix

from sparkpair.draft import export, hidden, train
from sparkpair.draft.plan import QWEN3_235B
from sparkpair.draft.sizing import decide_device
from sparkpair.errors import SparkpairError
from sparkpair.inventory.load import parse_inventory
from sparkpair.probes import training as image_probes
from sparkpair.render import llm_api_config
from sparkpair.runtimes import runtime_of
from sparkpair.transport.httpio import Reply

EXAMPLE = parse_inventory(yaml.safe_load((Path(__file__).parents[2] / "inventory.example.yaml").read_text()))
CAPTURE = {"layers": hidden.aux_layers(QWEN3_235B), "last": 94, "folder": "local--mine"}


def _script():  # the training script is package data run in the container; loaded here from its file
    path = Path(__file__).parents[2] / "sparkpair" / "data" / "train_eagle3.py"
    spec = importlib.util.spec_from_file_location("train_eagle3_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_on_a_spark_the_training_container_gets_the_gpus_and_trains_in_bf16() -> None:
    recipe = train.Recipe(steps=10000, device="cuda", max_length=2048, hidden_repo="local/mine-hidden",
                          aux_layers=(1, 46, 90))
    command = train.train_command(image="nvcr.io/nvidia/pytorch:25.06-py3", hf_cache="/home/n/.cache/huggingface",
                                  work="/home/n/w", target="Qwen/Qwen3-235B-A22B-GPTQ-Int4", recipe=recipe,
                                  user="1000:1000").text
    assert "--gpus all --ipc host --ulimit memlock=-1 --ulimit stack=67108864" in command
    assert "--device cuda" in command and "--max-length 2048" in command
    assert "--mode offline --hidden-states /sparkpair/hf/sparkpair-models/local--mine-hidden --aux-layers 1,46,90" \
        in command
    assert "/home/n/.cache/huggingface:/sparkpair/hf:ro" in command and "--network none" in command
    script = _script()
    assert script.precision_of("cuda") == {"dtype": "bfloat16", "bf16": True, "use_cpu": False, "precision": "bf16"}
    assert script.precision_of("cpu")["dtype"] == "float32" and script.precision_of("cpu")["use_cpu"] is True
    parsed = script.arguments(command.split("/work/train_eagle3.py ", 1)[1].split(" 2>&1")[0].split())
    assert parsed.device == "cuda" and parsed.mode == "offline" and parsed.aux_layers == "1,46,90"


def test_the_cpu_path_gets_no_gpus() -> None:
    command = train.train_command(image="i:1", hf_cache="/h", work="/w", target="Q/q", recipe=train.Recipe(steps=5),
                                  user="1:1").text
    assert "--gpus" not in command and "--device cpu" in command and "--mode online" in command


def test_the_device_is_what_torch_in_the_image_says() -> None:
    gb10 = image_probes.TorchDevice("cuda", "NVIDIA GB10", "2.8.0", "13.0")
    assert decide_device("spark-a", "img", "NVIDIA GB10", gb10) == \
        ("cuda", "torch 2.8.0 in img sees NVIDIA GB10 (CUDA 13.0)")
    device, why = decide_device("spark-a", "img", "NVIDIA GB10", image_probes.TorchDevice("cpu", torch="2.13.0+cpu"))
    assert device == "cpu" and "sees no CUDA device although nvidia-smi on spark-a lists NVIDIA GB10" in why
    assert decide_device("x", "img", "", image_probes.TorchDevice("cpu")) == ("cpu", "x has no GPU (nvidia-smi lists none)")
    assert decide_device("x", "img", "NVIDIA GB10", None)[0] == "cuda"


def test_the_device_probe_gives_the_container_the_gpus_only_when_asked() -> None:
    assert "--gpus all" in image_probes.torch_device("img:1", True).command.text
    assert "--gpus" not in image_probes.torch_device("img:1", False).command.text
    line = 'sparkpair-image {"device": "cpu", "gpu": "", "torch": "2.13.0+cpu", "cuda": ""}'
    assert image_probes.parse_device("noise\n" + line) == image_probes.TorchDevice("cpu", "", "2.13.0+cpu", "")
    assert image_probes.parse_device("sparkpair-image absent") is None
    assert image_probes.parse_device('sparkpair-image {"device": "tpu"}') is None
    assert image_probes.parse_device('sparkpair-image {"device": "cuda", "gpu": "a\\u001b[2Jb"}') == \
        image_probes.TorchDevice("cuda")


def test_tensorrt_llm_renders_modelopts_save_state_capture_across_the_pair() -> None:
    inventory = hidden.with_capture(EXAMPLE, "qwen3-235b", "trtllm", CAPTURE)
    profile = inventory.profile("qwen3-235b", "trtllm")
    assert profile.draft is None and runtime_of(profile).problems(inventory, profile) == []
    options = yaml.safe_load(llm_api_config(inventory, profile).content)   # checked against NVIDIA's schema
    assert options["speculative_config"] == {
        "decoding_type": "SaveState", "output_directory": "/sparkpair/hf/sparkpair-hidden/local--mine",
        "write_interval": 1, "file_prefix": "sparkpair", "eagle3_layers_to_capture": [1, 46, 90, -1]}
    assert options["enable_chunked_prefill"] is False and options["kv_cache_config"]["enable_block_reuse"] is False
    assert profile.tp_size == 2   # the target across both Sparks, as it serves


def test_vllm_renders_extract_hidden_states_with_its_connector_on_every_rank() -> None:
    inventory = hidden.with_capture(EXAMPLE, "qwen3-235b", "vllm", CAPTURE).for_runtime("vllm")
    profile = inventory.profile("qwen3-235b", "vllm")
    runtime = runtime_of(profile)
    assert runtime.problems(inventory, profile) == []
    for rank, node in enumerate(inventory.nodes):
        argv = runtime.serve_argv(inventory, profile, rank, 2, node=node.name)
        assert argv[:2] == ["env", "PYTHONPATH=/sparkpair/config"] and "--no-enable-chunked-prefill" in argv
        spec = json.loads(argv[argv.index("--speculative-config") + 1])
        assert spec == {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                        "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [1, 46, 90, 94]}}}
        kv = json.loads(argv[argv.index("--kv-transfer-config") + 1])
        assert kv["kv_connector_module_path"] == "vllm_hidden_states" and kv["kv_role"] == "kv_producer"
        assert kv["kv_connector_extra_config"] == {"shared_storage_path": "/sparkpair/hf/sparkpair-hidden/local--mine"}
        files = {item.path: item for item in runtime.config_files(inventory, profile, node, None)}
        assert "class SparkpairHiddenStatesConnector" in files["vllm_hidden_states.py"].content


@pytest.mark.parametrize("capture", [{"layers": [1, 99], "last": 94, "folder": "x"},
                                     {"layers": [1], "last": 94, "folder": "../x"},
                                     {"layers": [True], "last": 94, "folder": "x"}, {"layers": [1], "folder": "x"}])
def test_a_bad_capture_is_a_problem_naming_the_field(capture: dict[str, object]) -> None:
    for name in ("trtllm", "vllm"):
        inventory = hidden.with_capture(EXAMPLE, "qwen3-235b", name, capture).for_runtime(name)
        profile = inventory.profile("qwen3-235b", name)
        assert any(p.startswith("capture_hidden_states.") for p in runtime_of(profile).problems(inventory, profile))


def test_the_capture_layers_are_modelopts_eagle3_default_and_the_repo_a_sibling_of_the_draft() -> None:
    assert hidden.aux_layers(QWEN3_235B) == [1, 46, 90]
    assert hidden.hidden_repo("local/qwen3-eagle3") == "local/qwen3-eagle3-hidden"
    assert len(hidden.hidden_repo("o/" + "a" * 96).split("/")[1]) <= 96


def _engine(monkeypatch: pytest.MonkeyPatch, path: str) -> list[tuple[str, dict[str, object]]]:
    sent: list[tuple[str, dict[str, object]]] = []

    def fetch(host: str, port: int, method: str, where: str, body: bytes, **_: object) -> Reply:
        sent.append((where, json.loads(body)))
        if where == "/tokenize":
            return Reply(200, json.dumps({"tokens": list(range(1, 40))}).encode(), "")
        return Reply(200, json.dumps({"kv_transfer_params": {"hidden_states_path": path}}).encode(), "")

    monkeypatch.setattr(hidden, "fetch_tcp", fetch)
    return sent


def test_one_conversation_is_tokenized_by_the_engine_and_sent_as_one_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    sent = _engine(monkeypatch, "/sparkpair/hf/sparkpair-hidden/x/cmpl-1-0-ab.safetensors")
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "12 12"}]
    name, tokens = hidden.capture_one("h", 1, "t", messages, 32, "/sparkpair/hf/sparkpair-hidden/x")
    assert (name, tokens) == ("cmpl-1-0-ab.safetensors", 32)
    assert sent[0][1]["add_generation_prompt"] is False and sent[1][1]["max_tokens"] == 1
    assert sent[1][1]["prompt"] == list(range(1, 33))


@pytest.mark.parametrize("path", ["/etc/passwd", "/sparkpair/hf/sparkpair-hidden/x/../../y.safetensors",
                                  "/sparkpair/hf/sparkpair-hidden/x/sub/a.safetensors",
                                  "/sparkpair/hf/sparkpair-hidden/x/a\n.safetensors", "/sparkpair/hf/sparkpair-hidden/xa"])
def test_a_path_the_engine_names_outside_its_folder_is_refused(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    _engine(monkeypatch, path)
    with pytest.raises(SparkpairError, match="computing hidden states"):
        hidden.capture_one("h", 1, "t", [{"role": "user", "content": "hi"}], 32, "/sparkpair/hf/sparkpair-hidden/x")


def _install(staging: Path, hub: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-", str(staging), str(hub), "models--local--mine-hidden", *extra],
                          input=export.installer_text(), capture_output=True, text=True, timeout=60)


def test_the_hidden_states_are_installed_as_named_and_the_engines_files_removed(tmp_path: Path) -> None:
    staging, hub = tmp_path / "raw", tmp_path / "hub"
    staging.mkdir()
    for index in range(3):
        (staging / f"cmpl-{index}.safetensors").write_bytes(bytes([index]) * 100)
    (staging / "cmpl-0.safetensors.lock").write_text("")
    (staging / "readiness-probe.safetensors").write_bytes(b"x")
    names = tmp_path / "names.json"
    names.write_text(json.dumps({f"cmpl-{i}.safetensors": f"{i:06d}.safetensors" for i in range(3)}))
    done = _install(staging, hub, "1000000", "--names", str(names), "--move")
    assert done.returncode == 0, done.stderr
    commit, files = export.parse_installed(done.stdout)
    assert sorted(files) == ["000000.safetensors", "000001.safetensors", "000002.safetensors"]
    snapshot = hub / "models--local--mine-hidden" / "snapshots" / commit
    assert (snapshot / "000001.safetensors").read_bytes() == b"\1" * 100
    assert sorted(p.name for p in staging.iterdir()) == ["cmpl-0.safetensors.lock", "readiness-probe.safetensors"]


def test_a_name_map_naming_a_path_is_refused(tmp_path: Path) -> None:
    staging = tmp_path / "raw"
    staging.mkdir()
    (staging / "a.safetensors").write_bytes(b"x")
    names = tmp_path / "names.json"
    names.write_text(json.dumps({"a.safetensors": "../../escape"}))
    done = _install(staging, tmp_path / "hub", "--names", str(names))
    assert done.returncode == 1 and "refused" in done.stderr


def test_with_a_cuda_plan_the_train_step_renders_the_gpu_container(monkeypatch: pytest.MonkeyPatch) -> None:
    from fakenode import fake_pair
    from test_draft_steps import _run

    from sparkpair.draft import training

    head = (FakeNode("spark-a", home="/home/nvidia").on(prefix("docker image inspect"), "sha256:feed\n")
            .on(prefix("mkdir -p"), "").on(prefix("printf '%s:%s'"), "1000:1000"))
    pair = fake_pair(head, FakeNode("spark-b", host="198.18.0.12"))
    run = _run(pair, EXAMPLE, device="cuda", precision="bf16", mode="offline")
    ran: list[str] = []
    monkeypatch.setattr(training.lifecycle, "stop", lambda *args: None)
    monkeypatch.setattr(training.modelsync, "link", lambda *args: None)
    monkeypatch.setattr(training.train, "run_training",
                        lambda connections, commands, seen, timeout: (ran.extend(c.text for c in commands), (0, {}))[1])
    training.run_step(run, {"sha256": "d" * 64, "target": "Qwen/Q"},  # type: ignore[arg-type]
                      {"repo": "local/mine-hidden", "commit": "c" * 40, "layers": [1, 46, 90]})
    assert "--gpus all" in ran[0] and "--device cuda" in ran[0] and "--mode offline" in ran[0]
