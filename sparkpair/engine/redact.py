"""Secrets out of text that leaves the pair: what looks like a token, a key or a password is replaced.

Pure: text in, redacted text and what was replaced out. Replaced (each by `[REDACTED]`): private keys
(PEM blocks), Hugging Face tokens (`hf_...`), `Bearer ...` credentials, the value of any variable
or key named like a secret (`*_TOKEN=`, `HF_TOKEN: `, `"api_key": "..."`, `password:`, `*_SECRET`,
`*_HMAC_KEY`; names ending in _PATH, _FILE or _DIR hold where a secret is, not the secret, and are
kept), passwords in URLs, and any exact secret the caller knows (the operator's HF token).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

MARK = "[REDACTED]"
_SECRET_NAME = r"[A-Za-z0-9_.-]*(?:token|secret|password|passwd|api[_-]?key|access[_-]?key|hmac[_-]?key|private[_-]?key)"
_KEPT_SUFFIXES = ("_path", "_file", "_dir", "_paths", "_files")

PEM = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.DOTALL)
HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{16,}\b")
BEARER = re.compile(r"\b(Bearer\s+)[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)
URL_PASSWORD = re.compile(r"\b([a-z][a-z0-9+.-]*://[^/\s:@]+:)([^@\s/]+)(@)", re.IGNORECASE)
QUOTED_NAME = re.compile(r'(["\'](' + _SECRET_NAME + r')["\']\s*:\s*["\'])([^"\']+)(["\'])', re.IGNORECASE)
ASSIGNED = re.compile(r"\b(" + _SECRET_NAME + r")(\s*[=:]\s*[\"']?)(?!\[REDACTED\])([^\s\"',;}\]]+)", re.IGNORECASE)


def _kept(name: str) -> bool:
    return name.lower().endswith(_KEPT_SUFFIXES)


def redact(text: str, known: Iterable[str] = ()) -> tuple[str, Counter[str]]:
    """text without secrets, and how many of each kind were replaced."""
    found: Counter[str] = Counter()

    def count(kind: str, replacement: str) -> str:
        found[kind] += 1
        return replacement

    for secret in sorted({value for value in known if value and len(value) >= 8}, key=len, reverse=True):
        if secret in text:
            found["known secret"] += text.count(secret)
            text = text.replace(secret, MARK)
    text = PEM.sub(lambda m: count("private key", MARK), text)
    text = HF_TOKEN.sub(lambda m: count("Hugging Face token", MARK), text)
    text = BEARER.sub(lambda m: count("bearer credential", m.group(1) + MARK), text)
    text = URL_PASSWORD.sub(lambda m: count("password in a URL", m.group(1) + MARK + m.group(3)), text)
    text = QUOTED_NAME.sub(lambda m: m.group(0) if _kept(m.group(2)) or m.group(3) == MARK else
                           count(f"value of {m.group(2)}", m.group(1) + MARK + m.group(4)), text)
    text = ASSIGNED.sub(lambda m: m.group(0) if _kept(m.group(1)) else
                        count(f"value of {m.group(1)}", m.group(1) + m.group(2) + MARK), text)
    return text, found
