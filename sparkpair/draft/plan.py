"""The plan of a train-draft run, before anything runs (pure): per node, the memory each phase needs and the
disk the hidden states of offline training take; the mode (online: the target in memory beside the draft on
one Spark; offline: the target's hidden states computed by the engine serving it across the ranks, written to
disk, then only the draft trains beside the target's embedding and LM head); the device and precision; the
time, from a measured throughput where there is one. A plan whose figures fit nowhere is one refusal naming
the figure.

Sources of the figures: the target's shape from its config.json (the head's copy, or the figures below for
the built-in profiles' targets, each from the model's config.json on the hub); its size at serving precision
from the head's cache (the files' bytes) or the profile's `target_gib`; a node's memory from its
/proc/meminfo, or a Spark's (a real GB10's `free -b`); the memory the serving engine keeps beside the
weights is the profile's `headroom_gib` (what doctor's memory check keeps for it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkpair import boundedjson

GIB = 1024 ** 3
TIB = 1024 ** 4
# A DGX Spark's memory, from a real GB10 (`free -b` on a Lenovo ThinkStation PGX, DGX OS;
# tests/testbed/sparkpair_testbed/gb10.py quotes it): MemTotal, and what the OS held at idle (total - available).
SPARK_MEM_TOTAL = 128_452_014_080          # ~119.6 GiB
SPARK_OS_KEEPS = 128_452_014_080 - 124_065_050_624   # ~4.1 GiB
# A Spark's disk (one 3.7 TB NVMe partition, `df -h` on a DGX Spark), used when the node is not asked.
SPARK_DISK = 3_700_000_000_000
BF16 = 2
TRAINED_BYTES = 16        # per trained parameter: fp32 weights 4, gradients 4, Adam's two moments 8
TTT_STEPS = 3             # ModelOpt's eagle_ttt_steps (its Eagle3 default): the draft runs this often per token
BATCH = {"cuda": 1, "cpu": 4}   # sequences per training step on each device (train_eagle3.py's batch)
MODES = ("auto", "online", "offline")


@dataclass(frozen=True)
class TargetShape:
    """What the plan needs of the target's config.json."""

    hidden: int
    layers: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int          # config.json's intermediate_size (an MoE's dense width, used by none of its layers)
    experts: int               # routed experts per layer (0: dense)
    experts_per_token: int
    moe_intermediate: int
    tied: bool = False
    source: str = ""

    @property
    def attention(self) -> int:
        """Parameters of one attention block: q, k, v and o projections."""
        return self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)

    @property
    def parameters(self) -> int:
        """The target's parameters: embedding and LM head (once when tied), per layer attention and the MLP (every
        expert and the router of an MoE), norms left out (under a millionth)."""
        mlp = (self.experts * 3 * self.hidden * self.moe_intermediate + self.hidden * self.experts if self.experts
               else 3 * self.hidden * self.intermediate)
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.layers * (self.attention + mlp)

    @property
    def draft_width(self) -> int:
        """The Eagle3 layer's MLP width, as train_eagle3.py sizes it: intermediate_size, else experts per token x
        the expert width."""
        return self.intermediate or self.experts_per_token * self.moe_intermediate

    def draft_parameters(self, draft_vocab: int) -> int:
        """The Eagle3 head ModelOpt trains: fc (3 captured layers to one), one decoder layer reading twice the
        hidden size (embedding and hidden state) into attention, its MLP, and its own LM head over the draft
        vocabulary."""
        fc = 3 * self.hidden * self.hidden
        attention = 2 * self.hidden * self.head_dim * (self.heads + 2 * self.kv_heads) + \
            self.heads * self.head_dim * self.hidden
        return fc + attention + 3 * self.hidden * self.draft_width + self.hidden * draft_vocab

    @property
    def frozen_bytes(self) -> int:
        """What offline training keeps of the target: its embedding and LM head, bf16."""
        return self.vocab * self.hidden * (1 if self.tied else 2) * BF16


def _count(data: dict[str, Any], key: str, default: int | None = None) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 40:
        raise ValueError(f"config.json {key}: expected a count, got {str(value)[:40]!r}")
    return value


def parse_shape(raw: bytes, source: str) -> TargetShape:
    """The shape in a config.json (a multimodal model's text_config); ValueError naming the field."""
    try:
        data = boundedjson.loads(raw)
    except boundedjson.Refused as error:
        raise ValueError(f"config.json: {error}") from None
    if not isinstance(data, dict):
        raise ValueError("config.json: not an object")
    text = data.get("text_config")
    data = text if isinstance(text, dict) else data
    heads = _count(data, "num_attention_heads")
    hidden = _count(data, "hidden_size")
    head_dim = data.get("head_dim") or (hidden // heads if heads else 0)
    experts = _count(data, "num_experts", _count(data, "num_local_experts", 0))
    return TargetShape(hidden=hidden, layers=_count(data, "num_hidden_layers"), vocab=_count(data, "vocab_size"),
                       heads=heads, kv_heads=_count(data, "num_key_value_heads", heads), head_dim=int(head_dim),
                       intermediate=_count(data, "intermediate_size", 0), experts=experts,
                       experts_per_token=_count(data, "num_experts_per_tok", 0),
                       moe_intermediate=_count(data, "moe_intermediate_size", _count(data, "intermediate_size", 0)),
                       tied=data.get("tie_word_embeddings") is True, source=source)


QWEN3_235B = TargetShape(hidden=4096, layers=94, vocab=151936, heads=64, kv_heads=4, head_dim=128,
                         intermediate=12288, experts=128, experts_per_token=8, moe_intermediate=1536,
                         source="Qwen3-235B-A22B's config.json (hidden_size 4096, num_hidden_layers 94, vocab_size "
                                "151936, num_experts 128, num_experts_per_tok 8, moe_intermediate_size 1536, "
                                "intermediate_size 12288)")
# The built-in profiles' targets whose shape the plan knows without the head's copy of config.json.
KNOWN_SHAPES = {"Qwen/Qwen3-235B-A22B-GPTQ-Int4": QWEN3_235B, "nvidia/Qwen3-235B-A22B-FP4": QWEN3_235B}


@dataclass(frozen=True)
class NodeRoom:
    """One node's room: its memory (and what the OS keeps of it), its free disk under the HF cache; `asked`:
    read from the node (else a Spark's figures)."""

    name: str
    mem_total: int = SPARK_MEM_TOTAL
    os_keeps: int = SPARK_OS_KEEPS
    disk_free: int = SPARK_DISK
    asked: bool = False

    @property
    def usable(self) -> int:
        return self.mem_total - self.os_keeps


@dataclass(frozen=True)
class PlanInputs:
    """What a plan is made from (`draft.flow` gathers it)."""

    target: str
    shape: TargetShape
    target_bytes: int                  # the target's weights at serving precision
    target_bytes_source: str
    headroom: int                      # what the serving engine keeps beside the weights (the profile's)
    ranks: list[NodeRoom]              # the nodes that serve the target, head first
    trainers: list[NodeRoom]           # the nodes that train, head first
    samples: int
    max_length: int
    steps: int
    device: str = "cuda"
    device_reason: str = ""
    draft_vocab: int = 0               # 0: the target's vocabulary
    mode: str = "auto"
    throughput: dict[str, dict[str, float]] = field(default_factory=dict)   # per mode, measured tokens/s of
    # training ("train") and of the engine computing hidden states ("extract")


@dataclass(frozen=True)
class Plan:
    """The plan: the mode and device, each figure, each node's lines, and the refusal when nothing fits."""

    mode: str
    device: str
    precision: str
    lines: list[str]
    refusal: str | None = None
    figures: dict[str, int] = field(default_factory=dict)


def size(value: float) -> str:
    """Bytes as GiB (MiB below 1 GiB, TiB from 1 TiB)."""
    if value >= TIB:
        return f"{value / TIB:.2f} TiB"
    return f"{value / GIB:.1f} GiB" if value >= GIB else f"{value / 2**20:.1f} MiB"


def count(value: float) -> str:
    """A parameter count in billions, millions below a billion."""
    return f"{value / 1e9:.1f} B" if value >= 1e9 else f"{value / 1e6:.1f} M"


def hidden_bytes(inputs: PlanInputs) -> int:
    """Offline training's hidden states on disk: samples x tokens x hidden size x captured layers (three auxiliary
    and the last) x 2 bytes (bf16), and each token's id (8 bytes)."""
    tokens = inputs.samples * inputs.max_length
    return tokens * inputs.shape.hidden * 4 * BF16 + tokens * 8


def make_plan(inputs: PlanInputs) -> Plan:
    """The plan of INPUTS: online when the target and training fit one Spark, offline when the training beside the
    embedding and LM head fits and the hidden states fit every training node's disk, else a refusal naming the
    figure (a mode asked for is kept, or refused the same way)."""
    shape, draft_vocab = inputs.shape, inputs.draft_vocab or inputs.shape.vocab
    batch = BATCH.get(inputs.device, 1)
    draft = shape.draft_parameters(draft_vocab)
    trained = draft * TRAINED_BYTES
    activations = batch * inputs.max_length * ((shape.vocab + TTT_STEPS * draft_vocab) * 4 +
                                               TTT_STEPS * 64 * shape.hidden * BF16)
    training = trained + activations
    online = inputs.target_bytes + training + inputs.headroom
    offline_train = shape.frozen_bytes + training + inputs.headroom
    shard = inputs.target_bytes // max(1, len(inputs.ranks)) + inputs.headroom
    disk = hidden_bytes(inputs)
    usable = min(node.usable for node in inputs.trainers)
    precision = "bf16" if inputs.device == "cuda" else "float32"
    figures = {"draft_parameters": draft, "training": training, "online": online, "offline": offline_train,
               "shard": shard, "hidden_states": disk, "usable": usable}
    online_fits = online <= usable
    online_why = (f"online needs {size(online)} on one node ({size(inputs.target_bytes)} target, {size(training)} "
                  f"training, {size(inputs.headroom)} the engine keeps), {size(usable)} usable")
    offline_why = _offline_problem(inputs, offline_train, shard, disk)
    if inputs.mode == "online":
        mode, refusal = "online", None if online_fits else f"train-draft --mode online: {online_why}"
    elif inputs.mode == "offline":
        mode, refusal = "offline", None if offline_why is None else f"train-draft --mode offline: {offline_why}"
    elif online_fits:
        mode, refusal = "online", None
    else:
        mode = "offline"
        refusal = None if offline_why is None else f"train-draft: neither mode fits: {online_why}; {offline_why}"
    lines = [f"target {inputs.target}: {count(shape.parameters)} parameters, {size(inputs.target_bytes)} at "
             f"serving precision ({inputs.target_bytes_source}); shape from {shape.source}",
             f"draft: Eagle3, {count(draft)} parameters, vocabulary {draft_vocab}"
             + ("" if draft_vocab == shape.vocab else f" of the target's {shape.vocab}"),
             f"mode: {mode} — " + (f"{online_why}" if mode == "online" else
                                   f"{online_why}; offline trains beside the target's embedding and LM head "
                                   f"({size(shape.frozen_bytes)})" if not online_fits else
                                   "asked for with --mode offline"),
             f"device: {inputs.device}, {precision}" + (f" ({inputs.device_reason})" if inputs.device_reason else "")]
    if mode == "offline":
        lines.append(f"hidden states: {inputs.samples} samples x {inputs.max_length} tokens x {shape.hidden} hidden x "
                     f"4 layers (3 auxiliary and the last) x 2 B = {size(disk)}, computed by the engine serving the "
                     f"target on {len(inputs.ranks)} node(s), kept on each training node")
    training_nodes = {node.name for node in inputs.trainers}
    for node in _all_nodes(inputs):
        parts = []
        if node.name in {n.name for n in inputs.ranks}:   # the data step serves the target (offline: the capture)
            parts.append(f"serving {size(shard)} (target shard and engine)")
        if node.name in training_nodes:
            parts.append(f"training {size(online if mode == 'online' else offline_train)}")
            if mode == "offline":
                parts.append(f"disk {size(disk)} of {size(node.disk_free)} free")
        figures_of = "" if node.asked else " (a Spark's figures: not asked)"
        lines.append(f"{node.name}: {', '.join(parts)}; {size(node.usable)} usable of {size(node.mem_total)}"
                     f"{figures_of}")
    lines.append("time: " + _time(inputs, mode, batch))
    return Plan(mode, inputs.device, precision, lines, refusal, figures)


def _all_nodes(inputs: PlanInputs) -> list[NodeRoom]:
    seen: dict[str, NodeRoom] = {}
    for node in inputs.ranks + inputs.trainers:
        seen.setdefault(node.name, node)
    return list(seen.values())


def _offline_problem(inputs: PlanInputs, train: int, shard: int, disk: int) -> str | None:
    """Why offline training does not fit (None when it does): the training node's memory, a serving node's
    memory for its shard, or a training node's disk for the hidden states."""
    for node in inputs.trainers:
        if train > node.usable:
            return f"offline training needs {size(train)} on {node.name}, {size(node.usable)} usable"
        if disk > node.disk_free:
            return (f"offline needs {size(disk)} of disk on {node.name} for the hidden states "
                    f"({inputs.samples} samples x {inputs.max_length} tokens), {size(node.disk_free)} free")
    for node in inputs.ranks:
        if shard > node.usable:
            return f"serving the target needs {size(shard)} on {node.name}, {size(node.usable)} usable"
    return None


def _time(inputs: PlanInputs, mode: str, batch: int) -> str:
    """The time from the measured throughput on this device and mode (training tokens per second, and for offline
    the engine's tokens per second computing hidden states); unknown until a run measured it."""
    measured = inputs.throughput.get(mode, {})
    rate, extract = measured.get("train"), measured.get("extract")
    if not rate:
        return f"unknown: no training on {inputs.device} ({mode}) measured yet; this run measures it"
    seconds = inputs.steps * batch * inputs.max_length / rate
    text = f"training about {_duration(seconds)} at the {rate:.0f} tokens/s measured on {inputs.device} ({mode})"
    if mode == "offline" and extract:
        text += f", hidden states about {_duration(inputs.samples * inputs.max_length / extract)} at {extract:.0f} tokens/s"
    return text + " (an upper bound: every sample counted at --max-length)"


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{max(1, round(seconds / 60))} min"
