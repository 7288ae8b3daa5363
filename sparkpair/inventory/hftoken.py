"""The operator's Hugging Face token: where sparkpair finds it. Its value is never printed.

A token file is read only when it is a regular file, and at most TOKEN_CAP bytes of it (HF_TOKEN_PATH
may name anything: `/dev/zero`, a FIFO nobody writes, a directory). A token is one line of printable
ASCII; anything else is refused with one line naming where it came from, never what it holds.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from sparkpair.errors import UsageError

TOKEN_CAP = 4096
TOKEN = re.compile(r"[\x21-\x7e]{1,4096}")
FIX = "put only the token, on one line, in a regular file (or in HF_TOKEN)"


def find_token() -> str | None:
    """HF_TOKEN, else the file named by HF_TOKEN_PATH, else huggingface_hub's stored token ($HF_HOME/token);
    None when none of them holds one. UsageError (one line naming the source, never the token) when the
    first that exists is not a regular file of at most TOKEN_CAP bytes holding one token."""
    value = os.environ.get("HF_TOKEN", "").strip()
    if value:
        return _checked(value, "HF_TOKEN")
    candidates = [("HF_TOKEN_PATH", os.environ.get("HF_TOKEN_PATH", ""))]
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    candidates.append(("the stored token (HF_HOME/token)", str(home / "token")))
    for source, candidate in candidates:
        if not candidate:
            continue
        text = read_token_file(Path(candidate).expanduser(), source)
        if text:
            return _checked(text, f"{source} {candidate}")
    return None


def read_token_file(path: Path, source: str) -> str | None:
    """The stripped text of the token file at path; None when there is no such file; UsageError when it is not a
    regular file (a device, FIFO or directory: never read), is larger than TOKEN_CAP or cannot be read."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # not even opened: opening a device can do things
            raise UsageError(f"{source} {path}: not a regular file", hint=FIX)
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise UsageError(f"{source} {path}: cannot be read ({error.strerror})", hint=FIX) from None
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # replaced between the two looks
            raise UsageError(f"{source} {path}: not a regular file", hint=FIX)
        try:
            data = handle.read(TOKEN_CAP + 1)
        except OSError as error:
            raise UsageError(f"{source} {path}: cannot be read ({error.strerror})", hint=FIX) from None
    if len(data) > TOKEN_CAP:
        raise UsageError(f"{source} {path}: larger than {TOKEN_CAP} bytes, so not a token file", hint=FIX)
    return data.decode("utf-8", "replace").strip()


def _checked(token: str, source: str) -> str:
    """token when it is one token (printable ASCII, no spaces); UsageError naming source otherwise."""
    if not TOKEN.fullmatch(token):
        raise UsageError(f"{source}: does not hold one token (one line of printable characters, no spaces)",
                         hint=FIX)
    return token
