"""The parts of the Triton setup that need no pair: the delta archive of the image (the vLLM image's layers
left out), the image key, and the model repository whose model.json holds the same engine arguments as the
worker's `vllm serve` flags (tests/test_triton.py runs them on the pair)."""
from __future__ import annotations

import io
import json
import tarfile

import pytest
from saved_archive import write_saved_image
from sparkpair_testbed import image_delta, triton_image, triton_serve, vllm_serve
from sparkpair_testbed.hostexec import CommandError
from sparkpair_testbed.layout import CACHE_DIR, HEAD


def test_the_delta_keeps_everything_but_the_base_layers_files(tmp_path):
    write_saved_image(tmp_path / "full.tar", ["base1", "base2", "triton"])
    dropped = image_delta.strip_base_layers(tmp_path / "full.tar", tmp_path / "delta.tar", 2)
    with tarfile.open(tmp_path / "delta.tar") as delta:
        names = delta.getnames()
        assert delta.extractfile("triton/layer.tar").read() == b"triton" * 1000
    assert dropped == 2
    assert "base1/layer.tar" not in names and "base2/layer.tar" not in names
    assert {"base1/json", "base2/VERSION", "triton/layer.tar", "cfg.json", "manifest.json"} <= set(names)


def test_an_archive_of_more_than_one_image_is_refused(tmp_path):
    manifest = json.dumps([{"Layers": []}, {"Layers": []}]).encode()
    with tarfile.open(tmp_path / "two.tar", "w") as archive:
        member = tarfile.TarInfo("manifest.json")
        member.size = len(manifest)
        archive.addfile(member, io.BytesIO(manifest))
    with pytest.raises(CommandError, match="2 images in the archive"):
        image_delta.strip_base_layers(tmp_path / "two.tar", tmp_path / "delta.tar", 0)


def test_an_image_with_no_layer_on_top_of_the_base_is_refused(tmp_path):
    """A delta of nothing would load as the base image under the new tag: refused instead."""
    write_saved_image(tmp_path / "full.tar", ["base1", "base2"])
    with pytest.raises(CommandError, match="2 layers, none on top of the base's 2"):
        image_delta.strip_base_layers(tmp_path / "full.tar", tmp_path / "delta.tar", 2)


def test_the_triton_image_keeps_its_label_and_delta_name(tmp_path):
    key = triton_image.image_key(tmp_path, "sha256:aaa")
    assert triton_image.IMAGE.delta_tar(key) == CACHE_DIR / f"triton-image-{key}.tar"
    assert triton_image.IMAGE.key_label == "sparkpair-testbed.triton-image-key"


def test_the_image_key_follows_the_vllm_image_the_wheels_and_the_backend_file(tmp_path, monkeypatch):
    (tmp_path / "numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.whl").write_bytes(b"x" * 10)
    key = triton_image.image_key(tmp_path, "sha256:aaa")
    assert key != triton_image.image_key(tmp_path, "sha256:bbb") and len(key) == 16
    (tmp_path / "nvidia_pytriton-0.7.0-py3-none-manylinux_2_35_x86_64.whl").write_bytes(b"y")
    assert triton_image.image_key(tmp_path, "sha256:aaa") != key
    names = [name for name, _ in triton_image.input_files()]
    assert "vllm_backend/model.py" in names and "install-triton.sh" in names and "NOTES.md" not in names


def test_model_json_holds_the_engine_arguments_the_worker_gets_as_flags():
    """Rank 0 inside Triton and rank 1 (`vllm serve --headless`) must build the same engine: every flag of the
    worker's command line is a model.json key with the same value, but its rank and --headless."""
    args = triton_serve.engine_args(0)
    argv = vllm_serve.serve_argv(1, extra=triton_serve.WORKER_EXTRA)
    assert argv[:3] == ["vllm", "serve", args.pop("model")]
    rest = [item for item in argv[3:] if item != "--headless"]
    as_keys = {}
    while rest:  # --flag value, or a switch (--enforce-eager) standing for True
        flag = rest.pop(0)
        as_keys[flag[2:].replace("-", "_")] = rest.pop(0) if rest and not rest[0].startswith("--") else "True"
    assert as_keys.pop("node_rank") == "1" and args.pop("node_rank") == 0
    assert json.loads(as_keys.pop("speculative_config")) == args.pop("speculative_config")
    assert {key: str(value) for key, value in args.items() if key != "disable_log_stats"} == as_keys
    assert args["master_addr"] == vllm_serve.qsfp_ip(HEAD) and args["nnodes"] == 2 and args["tensor_parallel_size"] == 2


def test_the_repository_is_seed_003s_shape(tmp_path):
    root = triton_serve.write_repository(triton_serve.engine_args(0), tmp_path / "repo")
    config = (root / "eagle_model" / "config.pbtxt").read_text()
    assert 'backend: "vllm"' in config and "kind: KIND_MODEL" in config and '"REPORT_CUSTOM_METRICS"' in config
    assert json.loads((root / "eagle_model" / "1" / "model.json").read_text())["tensor_parallel_size"] == 2
    argv = triton_serve.server_argv()
    assert argv[:5] == ["tritonserver", "--model-repository", "/models", "--model-control-mode", "explicit"]
    assert argv[5:7] == ["--load-model", "eagle_model"]
    run = triton_serve.head_run_argv(argv, root)
    assert run[run.index(triton_image.TRITON_IMAGE_TAG) + 1:] == argv and f"{root}:/models:ro" in run


def test_server_sent_events_are_read_as_json_objects():
    text = 'data: {"text_output": "a"}\n\ndata: {"text_output": "b"}\n\n'
    assert [event["text_output"] for event in triton_serve.events(text)] == ["a", "b"]
