"""The training set: the operator's prompts (or the bundled ones), split into prompts to train on and
prompts held back for the evaluation, and the target's own answers to them, generated through the served
endpoint at the profile's settings (greedy, as bench measures), kept as ModelOpt's conversation JSONL.

A prompt file is hostile input: read capped (PROMPTS_CAP bytes, MAX_PROMPTS lines) and parsed by bench's
own reader, every bad line one error naming the file and line. An answer is hostile too: one deadline and
a byte cap per request (`transport.httpio`), its fields read typed; a malformed answer is one line.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparkpair.bench.prompts import PromptSet, load_prompts
from sparkpair.errors import SparkpairError, UsageError
from sparkpair.jsonfields import Field, ShapeError
from sparkpair.transport.httpio import fetch_tcp, shown

PROMPTS_CAP = 8 << 20          # bytes of an operator's prompt file
MAX_PROMPTS = 20000            # prompts in it
HELD_BACK_EVERY = 5            # every 5th prompt is held back for the evaluation, never trained on
ANSWER_CAP = 4 << 20           # bytes of one generation's answer
GENERATE_BASE_S = 120.0        # one generation's deadline: this plus GENERATE_PER_TOKEN_S per token asked for
GENERATE_PER_TOKEN_S = 0.5
Messages = list[dict[str, str]]


@dataclass(frozen=True)
class Split:
    """The prompts: those the draft trains on and those held back for bench; the set's digest and source."""

    train: list[Messages]
    held_back: list[Messages]
    sha256: str
    source: str


def read_prompts(path: Path | None) -> PromptSet:
    """The prompts in PATH (the bundled bench set when None), refused past PROMPTS_CAP bytes or MAX_PROMPTS
    lines, or when PATH is not a regular file; UsageError names the file (and the line) and the fix."""
    if path is not None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as error:
            raise UsageError(f"--prompts {path}: cannot open ({error.strerror or error})",
                             hint="pass a JSONL file you can read (not a symlink)") from None
        try:
            info = os.fstat(fd)
        finally:
            os.close(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"--prompts {path}: not a regular file", hint="pass a JSONL file")
        if info.st_size > PROMPTS_CAP:
            raise UsageError(f"--prompts {path}: {info.st_size} bytes, more than {PROMPTS_CAP}",
                             hint="split the prompts, or keep the first ones")
    prompts = load_prompts(path)
    if len(prompts.messages) > MAX_PROMPTS:
        raise UsageError(f"--prompts {prompts.source}: {len(prompts.messages)} prompts, more than {MAX_PROMPTS}",
                         hint="keep fewer prompts")
    if len(prompts.messages) < 2:
        raise UsageError(f"--prompts {prompts.source}: {len(prompts.messages)} prompt; at least 2 are needed "
                         "(one to train on, one held back)", hint="add prompts")
    return prompts


def split(prompts: PromptSet) -> Split:
    """Every HELD_BACK_EVERY-th prompt held back (at least one), the rest to train on."""
    held = [m for index, m in enumerate(prompts.messages) if index % HELD_BACK_EVERY == HELD_BACK_EVERY - 1]
    train = [m for index, m in enumerate(prompts.messages) if index % HELD_BACK_EVERY != HELD_BACK_EVERY - 1]
    if not held:
        held, train = train[-1:], train[:-1]
    return Split(train, held, prompts.sha256, prompts.source)


def answer_text(raw: bytes) -> str:
    """The assistant's text in a chat completion answer; ShapeError when it is not one."""
    message = Field.parse(raw, "a chat completion").get("choices").at(0).get("message")
    return message.get("content").text(default="") or message.get("reasoning_content").text(default="")


def generate_one(host: str, port: int, model: str, messages: Messages, max_tokens: int,
                 auth: dict[str, str] | None = None) -> str:
    """The target's greedy answer to MESSAGES; SparkpairError (one line) when there is none."""
    body = json.dumps({"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0}).encode()
    reply = fetch_tcp(host, port, "POST", "/v1/chat/completions", body=body, cap=ANSWER_CAP,
                      timeout=GENERATE_BASE_S + GENERATE_PER_TOKEN_S * max_tokens,
                      headers={"Content-Type": "application/json", **(auth or {})})  # auth: the engine's API key
    if reply.status != 200:
        raise SparkpairError(f"generating the training set: POST /v1/chat/completions: {reply.summary}",
                             hint="`sparkpair status` and `sparkpair logs` show what the server does")
    try:
        text = answer_text(reply.body)
    except ShapeError as error:
        raise SparkpairError(f"generating the training set: the server answered malformed: {shown(str(error))}") \
            from None
    if not text:
        raise SparkpairError("generating the training set: the server answered with no text",
                             hint="raise --max-tokens, or check the target with `sparkpair status`")
    return text


def conversation_line(index: int, messages: Messages, answer: str) -> str:
    """One line of ModelOpt's conversation JSONL: the prompt's messages and the target's answer."""
    turns = [{"role": m["role"], "content": m["content"]} for m in messages]
    return json.dumps({"conversation_id": index, "conversations": turns + [{"role": "assistant", "content": answer}]},
                      ensure_ascii=False)


def generate(host: str, port: int, model: str, prompts: list[Messages], max_tokens: int,
             advance: Callable[[int], None], auth: dict[str, str] | None = None) -> str:
    """The conversation JSONL of the target's answers to PROMPTS (ADVANCE(done) after each)."""
    lines = []
    for index, messages in enumerate(prompts):
        answer = generate_one(host, port, model, messages, max_tokens, auth)
        lines.append(conversation_line(index, messages, answer))
        advance(index + 1)
    return "\n".join(lines) + "\n"


def prompts_jsonl(prompts: list[Messages]) -> str:
    """PROMPTS as bench's JSONL ({"messages": [...]} a line): the held-back set bench reads."""
    return "".join(json.dumps({"messages": m}, ensure_ascii=False) + "\n" for m in prompts)
