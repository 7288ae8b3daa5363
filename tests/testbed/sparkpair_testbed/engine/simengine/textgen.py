"""Deterministic pseudo-text: one token is one word from a fixed list.

The words a request produces depend only on its prompt text and ``SIM_SEED``, so the same
request always yields the same text on every machine. Prompt token counts are
whitespace-split word counts (plus a fixed per-message overhead for chat templates).
"""

import hashlib
import random

WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when if "
    "so no will can more other its into time only some could new them these two may first "
    "then do any like my now over such our man me even most made after also did many before "
    "must through back years where much your way well down should because each just those "
    "people how too little state good very make world still own see men work long get here "
    "between both life being under never day same another know while last might us great old "
    "year off come since against go came right used take three spark cable tensor node draft "
    "token eagle model serve cache rank signal kernel memory batch stream latency throughput"
).split()

CHAT_TOKENS_PER_MESSAGE = 5  # <|im_start|>, role, newline, <|im_end|>, newline
CHAT_TOKENS_FOR_REPLY = 3  # <|im_start|>assistant\n


def count_prompt_tokens(text):
    """Tokens in a plain prompt: its whitespace-separated words (at least 1)."""
    return max(1, len(text.split()))


def message_text(content):
    """The text of a chat message content: a string or a list of ``{"type": "text"}`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return " ".join(part.get("text", "") for part in content if isinstance(part, dict))


def count_chat_tokens(messages):
    """Approximate tokens of a rendered ChatML prompt for ``messages``."""
    words = sum(len(message_text(m.get("content")).split()) for m in messages)
    return words + CHAT_TOKENS_PER_MESSAGE * len(messages) + CHAT_TOKENS_FOR_REPLY


def chat_seed_text(messages):
    """The text that seeds generation for a chat request."""
    return "\n".join(f"{m.get('role')}: {message_text(m.get('content'))}" for m in messages)


def _seed_int(*parts):
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def natural_length(seed_text, sim_seed):
    """How many tokens a request without ``max_tokens`` generates before its end-of-sequence."""
    return 16 + _seed_int("length", sim_seed, seed_text) % 48


class WordStream:
    """The deterministic sequence of words generated for one prompt."""

    def __init__(self, seed_text, sim_seed):
        self._rng = random.Random(_seed_int("words", sim_seed, seed_text))

    def take(self, count):
        """The next ``count`` words."""
        return [WORDS[self._rng.randrange(len(WORDS))] for _ in range(count)]


def join_words(words, first):
    """Render words as text; every word but the very first of a reply gets a leading space."""
    text = " ".join(words)
    return text if first else " " + text
