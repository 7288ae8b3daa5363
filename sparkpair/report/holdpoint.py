"""A test's hold point on a line sparkpair prints to stderr: how an interrupt lands exactly where a test means it.

tests/integration/test_interrupts.py sends SIGINT when a run reaches a stage (a progress line, or with -vv the
trace of a remote command). Sent on seeing the line, the signal raced the run: on a slower machine a short
stage finished first and the run ended with code 0. With SPARKPAIR_TEST_HOLD_AT (a regular expression) and
SPARKPAIR_TEST_RELEASE (a file) in the environment, the first line matching holds the thread that printed it,
after a `sparkpair-test: held` line, until the file exists; the test makes it after its signal. Unset (as
always outside tests), `reached` returns at once. Standard library only.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable

_AT = {"pattern": os.environ.get("SPARKPAIR_TEST_HOLD_AT", ""), "release": os.environ.get("SPARKPAIR_TEST_RELEASE", "")}
LONGEST_S = 900.0   # a test that never releases does not hold the run for ever


def reached(text: str, say: Callable[[str], None]) -> None:
    """Hold here (see above) when text is the first line matching SPARKPAIR_TEST_HOLD_AT; say prints the marker."""
    pattern, release = _AT["pattern"], _AT["release"]
    if not pattern or not release or not re.search(pattern, text):
        return
    _AT["pattern"] = ""   # the first match only
    say("sparkpair-test: held")
    deadline = time.monotonic() + LONGEST_S
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.01)
