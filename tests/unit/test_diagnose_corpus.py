"""`sparkpair diagnose` over the whole corpus, as an operator runs it: every failure log gives a finding and
exit 1, every healthy log (and every log that only stops, issue 38) none and exit 0.

The corpus: every log of tests/fixtures/logs listed in SOURCES.md (the reference corpus of
shared/reference/realworld/logs with its INDEX.md cause ids, the real samples from public threads, and the
simulated pair's real vLLM), and each node's own log of the simulated pair's runs (tests/fixtures/logs/vllm,
what happened on each node in its README.md).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from sparkpair.cli import main

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
LISTED = dict(re.findall(r"^\| (\S+\.log) \| `([^`]+)` \|", (LOGS / "SOURCES.md").read_text(), re.MULTILINE))
# Each node's log of tests/fixtures/logs/vllm (README.md): what that node's log alone shows.
NODE_LOGS = {
    "healthy-tp2-eagle3.head.log": "none", "healthy-tp2-eagle3.worker.log": "none",  # the headless worker never serves
    "fault-draft-missing.head.log": "model.access", "fault-draft-missing.worker.log": "model.access",
    "fault-gloo-ifname-missing.head.log": "fabric.interface", "fault-gloo-ifname-missing.worker.log": "fabric.interface",
    "fault-kv-cache-too-small.head.log": "memory.kvcache",
    "fault-kv-cache-too-small.worker.log": "none",        # keeps running: the head holds the error
    "fault-master-unreachable.head.log": "none",          # waits silently: the worker holds the error
    "fault-master-unreachable.worker.log": "fabric.unreachable",
    "fault-port-taken.head.log": "port.busy", "fault-port-taken.worker.log": "none",   # keeps waiting
    "fault-ray-backend-nnodes.head.log": "config.invalid", "fault-ray-backend-nnodes.worker.log": "config.invalid",
    "fault-ray-backend.head.log": "engine.ray", "fault-ray-backend.worker.log": "none",  # `ray start`'s own output
    "fault-ray-not-installed.head.log": "engine.ray",
    "fault-shm-too-small.head.log": "memory.shm", "fault-shm-too-small.worker.log": "none",   # keeps waiting
    "fault-top-k-engine-dead.head.log": "engine.died", "fault-top-k-engine-dead.worker.log": "unknown.fatal",
}
CORPUS = {**{name: cause for name, cause in LISTED.items()}, **{f"vllm/{name}": cause for name, cause in NODE_LOGS.items()}}


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_the_corpus_holds_every_node_log_and_both_kinds() -> None:
    assert sorted(NODE_LOGS) == sorted(path.name for path in (LOGS / "vllm").glob("*.log"))
    assert sum(cause == "none" for cause in CORPUS.values()) >= 10 and sum(cause != "none" for cause in CORPUS.values()) > 60


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_diagnose_over_the_corpus(name: str) -> None:
    code, out, err = run(["diagnose", "--json", str(LOGS / name)])
    findings = json.loads(out)["findings"]
    assert err == ""
    if CORPUS[name] == "none":
        assert (code, findings) == (0, []), [item["cause"] for item in findings]
    else:
        assert code == 1 and findings and findings[0]["cause"] == CORPUS[name], [item["cause"] for item in findings]
