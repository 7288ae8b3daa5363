"""The export step: the checkpoint ModelOpt's `export_speculative_decoding` wrote, with its training record
(`sparkpair-draft.json`: base model and revision, data digest, steps, ModelOpt's version), put into the
head's HF cache as the repo the operator named (`data/draft_install.py` on the node: every file under its
sha256, a snapshot, refs/main), so that launch's `modelsync` verifies it and copies it to every rank node
like any other model, and doctor's model checks know it.

What the training left is checked before anything is installed: the config names an Eagle3 architecture a
runtime serves and sizes that match the target (hidden size, vocabulary); a mismatch is one line naming
the field and both values.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from sparkpair import boundedjson
from sparkpair.jsonfields import Field, ShapeError

INSTALLER = "draft_install.py"
RECORD_FILE = "sparkpair-draft.json"   # the training record, inside the exported repo's snapshot
CONFIG_CAP = 1 << 20
ARCHITECTURES = ("LlamaForCausalLMEagle3",)   # what vLLM's and TensorRT-LLM's Eagle3 loaders take
MATCHED = ("hidden_size", "vocab_size")       # sizes the draft shares with its target


def installer_text() -> str:
    """The node-side installer (package data)."""
    return resources.files("sparkpair.data").joinpath(INSTALLER).read_text(encoding="utf-8")


def repo_folder(name: str) -> str:
    """The HF cache folder of repo NAME (ORG/NAME, already validated)."""
    return "models--" + name.replace("/", "--")


def draft_problems(draft_config: bytes, target_config: bytes) -> list[str]:
    """Why the exported draft's config.json does not fit the target's (empty when it does): its architecture,
    and each size in MATCHED, each problem one line naming the field."""
    try:
        draft = Field.parse(draft_config[:CONFIG_CAP], "the draft's config.json")
        target = Field.parse(target_config[:CONFIG_CAP], "the target's config.json")
        architectures = [item.text() for item in draft.get("architectures").items()]
    except ShapeError as error:
        return [str(error)]
    problems = []
    if not set(architectures) & set(ARCHITECTURES):
        problems.append(f"draft config.json architectures {architectures}: expected {ARCHITECTURES[0]}")
    for key in MATCHED:
        try:
            mine, theirs = draft.get(key).count(), target.get(key).count()
        except ShapeError as error:
            problems.append(str(error))
            continue
        if mine != theirs:
            problems.append(f"draft config.json {key} {mine} differs from the target's {theirs}")
    return problems


def training_record(*, name: str, profile: str, target: str, target_revision: str, data_sha256: str,
                    prompts_source: str, steps: int, seed: int, trained: dict[str, Any]) -> str:
    """sparkpair-draft.json: what the draft was trained from and with (what doctor reads back)."""
    record = {"name": name, "profile": profile, "base_model": target, "base_revision": target_revision,
              "data_sha256": data_sha256, "prompts": prompts_source, "steps": steps, "seed": seed,
              "modelopt_version": str(trained.get("modelopt_version", "")),
              "transformers_version": str(trained.get("transformers_version", "")),
              "torch_version": str(trained.get("torch_version", "")),
              "world_size": trained.get("world_size", 1), "losses": trained.get("losses", [])[-5:],
              "accuracy": trained.get("accuracy"), "mode": trained.get("mode", "online"),
              "device": trained.get("device", "cpu"), "precision": trained.get("precision", "float32"),
              "vocab_size": trained.get("vocab_size"), "draft_vocab_size": trained.get("draft_vocab_size"),
              "vocab_coverage": trained.get("vocab_coverage")}
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


def parse_installed(stdout: str) -> tuple[str, dict[str, Any]]:
    """(commit, files) from the installer's one JSON line; ValueError when it is not that."""
    data = boundedjson.loads(stdout.strip().splitlines()[-1] if stdout.strip() else "")
    commit, files = data.get("commit"), data.get("files")
    if not (isinstance(commit, str) and len(commit) == 40 and isinstance(files, dict)):
        raise ValueError("not the installer's answer")
    return commit, files


def parse_training(raw: bytes) -> dict[str, Any]:
    """The training script's training.json, the fields sparkpair keeps (typed; {} when it is not one)."""
    try:
        data = boundedjson.loads(raw)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    kept: dict[str, Any] = {key: str(data[key])[:64] for key in ("modelopt_version", "transformers_version",
                                                                   "torch_version", "mode", "device", "precision")
                            if key in data}
    losses = data.get("losses")
    if isinstance(losses, list):
        kept["losses"] = [float(x) for x in losses if isinstance(x, (int, float))][-20:]
    if isinstance(data.get("accuracy"), float):
        kept["accuracy"] = data["accuracy"]
    for key in ("steps", "world_size", "conversations", "samples", "vocab_size", "draft_vocab_size"):
        if isinstance(data.get(key), int) and not isinstance(data.get(key), bool):
            kept[key] = data[key]
    for key in ("vocab_coverage", "seconds", "tokens_per_s"):
        if isinstance(data.get(key), (int, float)) and not isinstance(data.get(key), bool):
            kept[key] = float(data[key])
    return kept
