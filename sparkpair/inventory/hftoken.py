"""The operator's Hugging Face token: where sparkpair finds it. Its value is never printed."""

from __future__ import annotations

import os
from pathlib import Path


def find_token() -> str | None:
    """HF_TOKEN, else the file named by HF_TOKEN_PATH, else huggingface_hub's stored token."""
    value = os.environ.get("HF_TOKEN", "").strip()
    if value:
        return value
    candidates = [os.environ.get("HF_TOKEN_PATH", "")]
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    candidates.append(str(home / "token"))
    for candidate in filter(None, candidates):
        try:
            text = Path(candidate).expanduser().read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if text:
            return text
    return None
