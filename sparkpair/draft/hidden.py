"""The hidden step of offline training: the target's hidden states, computed by the engine serving it across the
ranks (so the target never has to fit one node), kept on the head as a content-hashed repo of the HF cache that
launch's model sync copies to every other training node over the QSFP twins, verified and resumable like any
model.

The engine serves the profile with `capture_hidden_states` instead of a draft (each runtime renders it its own
way: vLLM's `extract_hidden_states` method with its hidden-states connector, TensorRT-LLM's SaveState decoding
as ModelOpt's compute_hidden_states_trtllm sets it); sparkpair sends it each training conversation, tokenized by
the engine with the target's chat template, as one prompt with one token to generate; vLLM writes that prompt's
hidden states (the draft config's auxiliary layers, then the last layer before its norm) to one file and names
it in the answer. The answers are hostile: a path the engine names must be a plain file name in the capture's
own folder. The files then go into the repo ORG/NAME-hidden (data/draft_install.py: copied while hashed, the
engine's file removed).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from typing import Any

from sparkpair import boundedjson, paths
from sparkpair.bench import serving
from sparkpair.draft import evaluate, export
from sparkpair.draft.plan import TargetShape
from sparkpair.draft.record import digest, slug
from sparkpair.draft.run import Run
from sparkpair.errors import SparkpairError
from sparkpair.inventory import Inventory
from sparkpair.jsonfields import Field, ShapeError
from sparkpair.render.recipe import HIDDEN_STATES_DIR, hf_cache_on_node, repo_dirname
from sparkpair.transport import Shell
from sparkpair.transport.httpio import fetch_tcp, shown

ANSWER_CAP = 4 << 20
REQUEST_BASE_S = 120.0
REQUEST_PER_TOKEN_S = 0.05
MAX_FILES = 1000000
FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.safetensors")


def aux_layers(shape: TargetShape) -> list[int]:
    """The draft config's eagle_aux_hidden_state_layer_ids: ModelOpt's Eagle3 default (default_eagle_aux_layer_ids:
    one layer near the start, the middle and the end)."""
    layers = shape.layers
    return sorted({1, max(0, layers // 2 - 1), max(0, layers - 4)})


def hidden_repo(name: str) -> str:
    """The repo the hidden states of draft NAME are kept in: ORG/NAME-hidden (the name cut to stay a repo id)."""
    org, own = name.split("/", 1)
    return f"{org}/{own[:89].rstrip('.-_')}-hidden"


def with_capture(inventory: Inventory, profile: str, runtime: str, capture: dict[str, Any]) -> Inventory:
    """The inventory with PROFILE on RUNTIME serving no draft and capturing hidden states as CAPTURE says."""
    models = {name: dict(source) for name, source in inventory.models.items()}
    own = models.setdefault(profile, {})
    own.update(draft=None, capture_hidden_states=capture)
    variants = {key: dict(value) for key, value in (own.get("variants") or {}).items()}
    variants.setdefault(runtime, {}).update(draft=None, capture_hidden_states=capture)
    own["variants"] = variants
    return replace(inventory, models=models)


def _post(host: str, port: int, path: str, body: dict[str, Any], tokens: int) -> Field:
    raw = json.dumps(body).encode()
    reply = fetch_tcp(host, port, "POST", path, body=raw, cap=ANSWER_CAP,
                      timeout=REQUEST_BASE_S + REQUEST_PER_TOKEN_S * tokens,
                      headers={"Content-Type": "application/json"})
    if reply.status != 200:
        raise SparkpairError(f"computing hidden states: POST {path}: {reply.summary}",
                             hint="`sparkpair logs` shows what the engine says")
    try:
        return Field.parse(reply.body, f"the answer to {path}")
    except ShapeError as error:
        raise SparkpairError(f"computing hidden states: the engine answered malformed: {shown(str(error))}") from None


def capture_one(host: str, port: int, model: str, messages: list[dict[str, str]], limit: int, folder: str) -> \
        tuple[str, int]:
    """One conversation's hidden states: the engine's tokens of it (at most LIMIT), sent as a prompt of one
    token to generate; (the file the engine wrote in FOLDER, its token count)."""
    try:
        found = _post(host, port, "/tokenize", {"model": model, "messages": messages, "add_generation_prompt": False},
                      0)
        tokens = [item.count() for item in found.get("tokens").items()][:limit]
        answer = _post(host, port, "/v1/completions", {"model": model, "prompt": tokens, "max_tokens": 1},
                       len(tokens))
        path = answer.get("kv_transfer_params").get("hidden_states_path").text()
    except ShapeError as error:
        raise SparkpairError(f"computing hidden states: the engine answered malformed: {shown(str(error))}") from None
    name = path.removeprefix(folder + "/")
    if not tokens or name == path or not FILE.fullmatch(name):
        raise SparkpairError(f"computing hidden states: the engine wrote {shown(path)}, not a file of {folder}",
                             hint="docs/runbooks.md#train-draft-hidden-states")
    return name, len(tokens)


def _conversations(raw: bytes, node: str) -> list[list[dict[str, str]]]:
    """The data step's conversations read back from the head (as hostile as anything a node holds)."""
    try:
        rows = [boundedjson.loads(line)["conversations"] for line in raw.splitlines() if line.strip()]
    except (ValueError, KeyError, TypeError):
        rows = []
    if not rows or not all(isinstance(row, list) for row in rows):
        raise SparkpairError(f"{node}: the data step's conversations are not what it wrote",
                             hint="run train-draft again: a changed data file re-runs the data step")
    return rows


def capture_inputs(run: Run, produced: dict[str, Any], shape: TargetShape) -> str:
    """What the hidden step is made from: the data, the target's revision, the layers, the length, the runtime."""
    options = run.options
    return digest("hidden", produced.get("sha256"), produced.get("target_revision"), aux_layers(shape), shape.layers,
                  options.max_length, options.runtime)


def compute(run: Run, produced: dict[str, Any], shape: TargetShape) -> dict[str, Any]:
    """The step: every training conversation's hidden states from the serving engine, installed on the head as
    ORG/NAME-hidden; skipped when the record has it from the same inputs and the head still holds that revision."""
    options, head = run.options, run.head
    inputs = capture_inputs(run, produced, shape)
    repo = hidden_repo(options.name)
    hub = f"{hf_cache_on_node(run.inventory, head.home)}/hub"
    done = run.record.done("hidden", inputs)
    held = head.read(f"{hub}/{repo_dirname(repo)}/refs/main") or b""
    skipped = run.skip("hidden", inputs, done is not None and held[:40].decode("ascii", "replace") ==
                       done.outputs.get("commit"))
    if skipped is not None:
        return skipped
    folder = slug(options.name)
    host_folder = f"{hf_cache_on_node(run.inventory, head.home)}/{paths.HIDDEN_STATES}/{folder}"
    head.check(Shell("rm -rf {} && mkdir -p -m 755 {}", host_folder, host_folder))   # the node user's: the engine
    # (root in its container) writes its files into it, sparkpair moves them out
    capture = {"layers": aux_layers(shape), "last": shape.layers, "folder": folder}
    inventory = with_capture(run.inventory, options.profile, options.runtime, capture)
    evaluate.serve(run.pair, inventory, options.profile, options.runtime, "hidden-state capture", run.progress)
    endpoint = serving(run.pair, inventory.for_runtime(options.runtime), options.profile).endpoint
    rows = _conversations(head.read(f"{run.work}/data.jsonl") or b"", head.name)
    began, names, tokens = time.monotonic(), {}, 0
    for index, messages in enumerate(rows):
        name, count = capture_one(endpoint.host, endpoint.port, endpoint.model, messages, options.max_length,
                                  f"{HIDDEN_STATES_DIR}/{folder}")
        names[name], tokens = f"{index:06d}.safetensors", tokens + count
        run.say("hidden: the engine computes the target's hidden states", key="draft hidden", done=index + 1,
                total=len(rows), unit="conversations")
    seconds = time.monotonic() - began
    head.put(json.dumps(names), f"{run.work}/hidden-names.json", mode=0o600)
    result = head.run(Shell("python3 - {} {} {} {} --names {} --move", host_folder, hub, export.repo_folder(repo),
                            MAX_FILES, f"{run.work}/hidden-names.json"), stdin=export.installer_text(), timeout=7200.0)
    if not result.ok:
        raise SparkpairError(f"{head.name}: keeping the hidden states failed: {result.stderr.strip()[-300:]}",
                             hint="docs/runbooks.md#train-draft-hidden-states")
    commit, files = export.parse_installed(result.stdout)
    head.run(Shell("rm -rf {}", host_folder))
    size = sum(int(item[1]) for item in files.values())
    run.say(f"hidden: {len(files)} conversations, {size / 2**30:.2f} GiB in {repo} at {commit[:12]} on {head.name}")
    return run.finish("hidden", inputs, {"repo": repo, "commit": commit, "files": len(files), "bytes": size,
                                         "tokens": tokens, "seconds": round(seconds, 3),
                                         "tokens_per_s": round(tokens / max(seconds, 1e-6), 3),
                                         "layers": capture["layers"], "last": shape.layers})
