"""Secrets out of text that leaves the pair: what looks like a token, a key or a password is replaced.

Pure: text in, redacted text and what was replaced out. Replaced (each by `[REDACTED]`): private keys
(PEM blocks), Hugging Face tokens (`hf_...`), `Bearer ...` credentials, the value of any variable
or key named like a secret (`*_TOKEN=`, `HF_TOKEN: `, `"api_key": "..."`, `password:`, `*_SECRET`,
`*_HMAC_KEY`; names ending in _PATH, _FILE or _DIR hold where a secret is, not the secret, and are
kept), a list given to such a key (vLLM's `non-default args: {... 'api_key': ['...']}`), a command-line
option named like one or named by the caller, with its value after a space or `=` (`--api-key VALUE`),
passwords in URLs, and any exact secret the caller knows (the operator's HF token).

Linear in the text, whatever its shape (a bundle redacts rank logs of 8 MiB, and an engine that logs
request text lets any API client write there): every pattern begins at a fixed literal or only where a run
of the characters it then scans begins (`_RUN_START`), so no run is scanned from more than one start
(tests/unit/test_redact_hardening.py times 1 MiB of every hostile shape).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from functools import cache

MARK = "[REDACTED]"
_NAME_CHARS = "A-Za-z0-9_.-"
_SECRET_WORD = r"(?:token|secret|password|passwd|api[_-]?key|access[_-]?key|hmac[_-]?key|private[_-]?key)"
_SECRET_NAME = rf"[{_NAME_CHARS}]*{_SECRET_WORD}"
_RUN_START = rf"(?<![{_NAME_CHARS}])"  # a name is tried only where a run of name characters begins
_VALUE = r"""(?!\[REDACTED\])([^\s"',;}\]]+)"""
_OPTION_VALUE = r"""(?!\[REDACTED\]|-)('[^'\n]*'|"[^"\n]*"|[^\s"',;}\]]+)"""
_KEPT_SUFFIXES = ("_path", "_file", "_dir", "_paths", "_files")

PEM = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.DOTALL)
HF_TOKEN = re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{16,}\b")
BEARER = re.compile(r"(?<![A-Za-z0-9_])(Bearer\s+)[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)
URL_PASSWORD = re.compile(r"(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*://[^/\s:@]+:)([^@\s/]+)(@)", re.IGNORECASE)
QUOTED_NAME = re.compile(r'(["\'](' + _SECRET_NAME + r')["\']\s*:\s*["\'])([^"\']+)(["\'])', re.IGNORECASE)
LISTED = re.compile(r'(["\'](' + _SECRET_NAME + r')["\']\s*:\s*\[)([^\[\]\n]*)(\])', re.IGNORECASE)
OPTION = re.compile(_RUN_START + r"(--" + _SECRET_NAME + r")([ \t]+)" + _OPTION_VALUE, re.IGNORECASE)
ASSIGNED = re.compile(_RUN_START + r"(" + _SECRET_NAME + r")(\s*[=:]\s*[\"']?)" + _VALUE, re.IGNORECASE)
PATTERNS = {"private key": PEM, "Hugging Face token": HF_TOKEN, "bearer credential": BEARER,
            "password in a URL": URL_PASSWORD, "quoted value": QUOTED_NAME, "listed values": LISTED,
            "secret option": OPTION, "assigned value": ASSIGNED}


@cache
def _named_options(names: tuple[str, ...]) -> re.Pattern[str] | None:
    """The options a caller names as secret (an engine's: `--api-key`), each with its value after a space or `=`."""
    if not names:
        return None
    alternatives = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
    return re.compile(_RUN_START + rf"({alternatives})([ \t]+|=)" + _OPTION_VALUE)


def _kept(name: str) -> bool:
    return name.lower().endswith(_KEPT_SUFFIXES)


def _label(name: str) -> str:
    return name.lstrip("-.")


def redact(text: str, known: Iterable[str] = (), options: Iterable[str] = ()) -> tuple[str, Counter[str]]:
    """text without secrets, and how many of each kind were replaced; known: exact secrets, options: command-line
    options whose value is a secret whatever their name (a runtime's `secret_options`)."""
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
    named = _named_options(tuple(sorted(set(options))))
    if named is not None:
        text = named.sub(lambda m: count(f"value of {_label(m.group(1))}", m.group(1) + m.group(2) + MARK), text)
    text = OPTION.sub(lambda m: m.group(0) if _kept(m.group(1)) else
                      count(f"value of {_label(m.group(1))}", m.group(1) + m.group(2) + MARK), text)
    text = LISTED.sub(lambda m: m.group(0) if _kept(m.group(2)) or not m.group(3).strip() else
                      count(f"value of {m.group(2)}", m.group(1) + repr(MARK) + m.group(4)), text)
    text = QUOTED_NAME.sub(lambda m: m.group(0) if _kept(m.group(2)) or m.group(3) == MARK else
                           count(f"value of {m.group(2)}", m.group(1) + MARK + m.group(4)), text)
    text = ASSIGNED.sub(lambda m: m.group(0) if _kept(m.group(1)) else
                        count(f"value of {_label(m.group(1))}", m.group(1) + m.group(2) + MARK), text)
    return text, found
