"""Benchmark prompts: the bundled set (sparkpair/data/prompts.jsonl) or the operator's JSONL file.

Each line is {"messages": [{"role": ..., "content": ...}, ...]} or {"prompt": "..."}, optionally
with a "category", or a conversation in NVIDIA ModelOpt's format ({"conversation_id": ..., "conversations":
[...]}: its turns before the first assistant turn are the prompt). Only role and content are sent: servers
refuse unknown message fields.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sparkpair import boundedjson
from sparkpair.errors import UsageError

ROLES = ("system", "user", "assistant")
EXPECTED = 'expected {"prompt": "..."} or {"messages": [{"role": "user", "content": "..."}]}'


@dataclass(frozen=True)
class PromptSet:
    """The prompts a run sends, where they came from, and a digest of their bytes."""

    source: str
    sha256: str
    messages: list[list[dict[str, str]]]
    categories: list[str]


def bundled_text() -> str:
    """The bundled prompts.jsonl."""
    return resources.files("sparkpair.data").joinpath("prompts.jsonl").read_text(encoding="utf-8")


def load_prompts(path: Path | None) -> PromptSet:
    """The prompts from path, or the bundled set; UsageError names the file and line of a bad entry."""
    if path is None:
        text, source = bundled_text(), "bundled (sparkpair/data/prompts.jsonl)"
    else:
        try:
            text, source = path.read_text(encoding="utf-8"), str(path)
        except (OSError, UnicodeDecodeError) as error:
            raise UsageError(f"--prompts {path}: cannot read: {error}") from None
    entries = [_parse_line(source, number, raw) for number, raw in enumerate(text.splitlines(), 1) if raw.strip()]
    if not entries:
        raise UsageError(f"{source}: no prompts; {EXPECTED}, one per line")
    return PromptSet(source, hashlib.sha256(text.encode()).hexdigest(), [e[0] for e in entries],
                     [e[1] for e in entries])


def _parse_line(source: str, number: int, raw: str) -> tuple[list[dict[str, str]], str]:
    where = f"{source}:{number}"
    try:
        entry: Any = boundedjson.loads(raw)
    except ValueError as error:
        raise UsageError(f"{where}: not JSON ({error.args[0]}); {EXPECTED}") from None
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: got {type(entry).__name__}; {EXPECTED}")
    category = str(entry.get("category") or "uncategorized")
    if isinstance(entry.get("prompt"), str) and entry["prompt"].strip():
        return [{"role": "user", "content": entry["prompt"]}], category
    messages = entry.get("messages")
    conversation = entry.get("conversations")
    if messages is None and isinstance(conversation, list):  # ModelOpt's format: the turns the target answers
        first = next((i for i, item in enumerate(conversation) if isinstance(item, dict)
                      and item.get("role") == "assistant"), len(conversation))
        messages = conversation[:first]
    if not isinstance(messages, list) or not messages:
        raise UsageError(f"{where}: {EXPECTED}")
    return [_message(where, index, item) for index, item in enumerate(messages)], category


def _message(where: str, index: int, item: Any) -> dict[str, str]:
    if not isinstance(item, dict) or item.get("role") not in ROLES or not isinstance(item.get("content"), str):
        raise UsageError(f"{where}: messages[{index}]: expected {{\"role\": one of {', '.join(ROLES)}, "
                         "\"content\": \"...\"}")
    return {"role": item["role"], "content": item["content"]}
