"""`sparkpair train-draft --mode offline` on the simulated pair, end to end with the real engines: the real vLLM
(CPU build) at TP=2 across both nodes computes the tiny target's hidden states (vLLM's extract_hidden_states,
sparkpair's connector), they are kept content-hashed on the head and land on the worker over the QSFP twins
through launch's model sync (data parallel training on both nodes), the real ModelOpt trains only the draft
beside the target's embedding and LM head, and the export is served by the real vLLM with bench counting its
drafts against the testbed's random draft.

Shares test_train_draft.py's draft (its name, prompts and answer length): run after that module, as the suite
runs it, the data step is found done and only the capture and the evaluation start vLLM; alone, it makes its
data first. """

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import EAGER_VLLM, WithInventory, ensure_networked, run_sparkpair, variant_inventory

# test_train_draft.py's draft and settings (the same data step: its record is found and reused)
NAME = "local/qwen3-tiny-eagle3-ci"
SLUG = "local--qwen3-tiny-eagle3-ci"
IMAGE = "sparkpair/modelopt-cpu:0.47.0"
PROMPTS = Path(__file__).parent / "train_draft_prompts.jsonl"
COMMON = ("train-draft", "qwen3-235b", "--name", NAME, "--image", IMAGE, "--prompts", str(PROMPTS),
          "--max-tokens", "16", "--requests", "2")
OFFLINE = ("--mode", "offline", "--nodes", "2", "--max-length", "128", "--draft-vocab", "64")
STEPS = "120"
HIDDEN = f"~/.cache/huggingface/hub/models--{SLUG}-hidden"
REPO = f"~/.cache/huggingface/hub/models--{SLUG}"


def _on(bed, node: str, command: str) -> str:
    return bed.exec(node, command, user="nvidia", check=False).stdout


@pytest.fixture(scope="module")
def offline(testbed, testbed_vllm, tmp_path_factory):
    """One offline run (120 steps, data parallel on both nodes): (bed, run, its --out folder)."""
    testbed.cli("modelopt", timeout=2400)
    ensure_networked(testbed)
    for node in ("spark-a", "spark-b"):   # no hidden states from an earlier run: the copy to the worker is this one
        _on(testbed, node, f"rm -rf {HIDDEN} ~/.cache/huggingface/sparkpair-models/{SLUG}-hidden")
    out = tmp_path_factory.mktemp("train-draft-offline")
    eager = variant_inventory(testbed.inventory, tmp_path_factory.mktemp("eager"), EAGER_VLLM)  # as test_train_draft
    run = run_sparkpair(eager, *COMMON, *OFFLINE, "--steps", STEPS, "--out", str(out), "--json",
                        timeout=2700)
    yield WithInventory(testbed, eager), run, out
    run_sparkpair(testbed.inventory, "stop")


def test_the_plan_is_offline_on_the_cpu_and_says_why(offline) -> None:
    _, run, _ = offline
    assert run.code == 0, run.text[-4000:]
    plan = "\n".join(json.loads(run.out)["plan"])
    assert "mode: offline" in plan and "asked for with --mode offline" in plan
    assert "device: cpu, float32 (torch" in plan and "sees no CUDA device although nvidia-smi on spark-a lists" in plan
    assert "hidden states: 8 samples x 128 tokens" in plan and "spark-b: serving" in plan


def test_vllm_at_tp2_computed_the_hidden_states_and_the_worker_received_them_verified(offline) -> None:
    bed, run, _ = offline
    assert run.code == 0, run.text[-4000:]
    assert "hidden: the engine computes the target's hidden states" in run.err
    revision = _on(bed, "spark-a", f"cat {HIDDEN}/refs/main").strip()
    assert len(revision) == 40 and _on(bed, "spark-b", f"cat {HIDDEN}/refs/main").strip() == revision
    for node in ("spark-a", "spark-b"):   # every file named by the hash of its bytes, on both nodes
        listing = _on(bed, node, f"cd {HIDDEN}/snapshots/{revision} && for f in *; do "
                                 "printf '%s %s %s\\n' \"$f\" \"$(readlink \"$f\")\" \"$(sha256sum < \"$f\" | cut -c1-64)\"; done")
        rows = [line.split() for line in listing.splitlines()]
        assert len(rows) == 8 and all(name.endswith(".safetensors") and link == f"../../blobs/{sha}"
                                      for name, link, sha in rows), listing


def test_modelopt_trained_only_the_draft_on_both_nodes_and_recorded_how(offline) -> None:
    bed, run, _ = offline
    result = json.loads(run.out)
    assert result["skipped"][:1] == ["data"] or "data" in result["ran"]
    assert {"hidden", "train", "export", "evaluate"} <= set(result["ran"])
    revision = result["revision"]
    record = json.loads(_on(bed, "spark-a", f"cat {REPO}/snapshots/{revision}/sparkpair-draft.json"))
    assert record["mode"] == "offline" and record["device"] == "cpu" and record["precision"] == "float32"
    assert record["world_size"] == 2 and record["steps"] == int(STEPS)
    assert record["draft_vocab_size"] == 64 and record["vocab_size"] == 1024 and 0 < record["vocab_coverage"] <= 1
    config = json.loads(_on(bed, "spark-b", f"cat {REPO}/snapshots/{revision}/config.json"))
    assert config["draft_vocab_size"] == 64 and config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]


def test_the_real_vllm_serves_the_offline_draft_above_the_random_one(offline) -> None:
    _, run, out = offline
    results = json.loads((out / "results.json").read_text())
    by_config = {row["config"]: row for row in results["rows"]}
    trained = by_config[f"trained draft ({NAME})"]
    current = next(row for label, row in by_config.items() if label.startswith("current draft"))
    assert trained["errors"] == 0 and trained["draft_tokens"] and trained["draft_tokens"] > 0
    assert (trained["acceptance_rate"] or 0) >= (current["acceptance_rate"] or 0) + 0.05, (trained, current)


def test_a_dry_run_afterwards_finds_every_offline_step_done(offline) -> None:
    bed, _, _ = offline
    dry = run_sparkpair(bed.inventory, *COMMON, *OFFLINE, "--steps", STEPS, "--dry-run", "--json")
    assert dry.code == 0, dry.text[-2000:]
    states = json.loads(dry.out)
    assert [step for step in ("data", "hidden", "train", "export", "evaluate") if states[step].startswith("done")] == \
        ["data", "hidden", "train", "export", "evaluate"]
    assert states["plan"]["mode"] == "offline" and states["plan"]["device"] == "cpu"


def test_the_training_image_runs_one_thread_per_rank(offline) -> None:
    """The testbed's training image (its Dockerfile): torch runs one thread, as the two ranks share this machine's
    two cores (two threads each made a step 0.9-1.0 s instead of 0.17 s: they spun for each other's core)."""
    bed, _, _ = offline
    threads = _on(bed, "spark-b", f"docker run --rm --network none {IMAGE} python -c "
                                  "'import torch; print(torch.get_num_threads())'")
    assert threads.strip() == "1", threads
