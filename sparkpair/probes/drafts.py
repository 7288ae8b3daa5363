"""The training record of a draft `sparkpair train-draft` made (`sparkpair-draft.json` in the repo's snapshot
at refs/main): what doctor says of a profile's trained draft. Read as hostile: capped at RECORD_CAP bytes,
base64 on the wire (no line of it can pose as another probe's), every field read typed."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from sparkpair import boundedjson
from sparkpair.probes import Probe, expanded_path
from sparkpair.transport import Shell

RECORD_FILE = "sparkpair-draft.json"
RECORD_CAP = 64 << 10
REVISION = re.compile(r"[0-9a-f]{40}")
NONE = "none"


@dataclass(frozen=True)
class TrainingRecord:
    """What a trained draft was made from and with."""

    base_model: str
    base_revision: str
    steps: int
    modelopt_version: str
    data_sha256: str
    mode: str = ""             # online or offline ('' in a record from before train-draft said)
    device: str = ""           # cuda or cpu
    precision: str = ""        # bf16 or float32
    vocab_size: int = 0
    draft_vocab_size: int = 0  # the draft's own vocabulary (ModelOpt's d2t): below vocab_size when compressed


def _text(value: object, limit: int = 200) -> str:
    return value[:limit] if isinstance(value, str) and value.isprintable() else ""


def parse_record(text: str) -> TrainingRecord | None:
    """The record in the probe's output (None when the draft has none, or it is not one)."""
    text = text.strip()
    if not text or text == NONE:
        return None
    try:
        data = boundedjson.loads(base64.b64decode(text, validate=True)[:RECORD_CAP])
    except (ValueError, binascii.Error):
        return None
    if not isinstance(data, dict) or not _text(data.get("base_model")):
        return None
    revision = _text(data.get("base_revision"))
    return TrainingRecord(_text(data.get("base_model")), revision if REVISION.fullmatch(revision) else "",
                          _count(data.get("steps")), _text(data.get("modelopt_version"), 40),
                          _text(data.get("data_sha256"), 64), _choice(data.get("mode"), ("online", "offline")),
                          _choice(data.get("device"), ("cuda", "cpu")), _choice(data.get("precision"), ("bf16", "float32")),
                          _count(data.get("vocab_size")), _count(data.get("draft_vocab_size")))


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 40 else 0


def _choice(value: object, choices: tuple[str, ...]) -> str:
    return value if value in choices else ""


def training_record(hf_cache: str, repo: str) -> Probe[TrainingRecord | None]:
    """The training record of REPO's snapshot at refs/main in the node's HF cache, if it has one."""
    directory = f"{hf_cache.rstrip('/')}/hub/models--{repo.replace('/', '--')}"
    command = Shell.compose([expanded_path(directory), Shell(
        'cd "$p" 2>/dev/null && [ -f refs/main ] && [ ! -h refs/main ] || { echo {}; exit 0; }; '
        "r=$(head -c 64 refs/main); case \"$r\" in *[!0-9a-f]*|'') echo {}; exit 0;; esac; "
        'f="snapshots/$r/{}"; [ -f "$f" ] || { echo {}; exit 0; }; head -c {} "$f" | base64 -w0; echo',
        NONE, NONE, RECORD_FILE, NONE, RECORD_CAP)], "")
    return Probe("draft-record", (hf_cache, repo), command, parse_record)
