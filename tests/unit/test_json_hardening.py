"""Deeply nested or oversized JSON from outside is one clear line or a failed probe, never a crash (issue 33, item 4).

`json.loads` of 64 KiB of `[` raises RecursionError, which the readers' `except ValueError` did not catch: a draft
repository shipping such a `sparkpair-draft.json` crashed doctor's probe round, `sparkpair diff --lock` on such a
file printed `internal error (RecursionError ...)` with exit 1, and the launch state, train-draft's training record
and the apply journal did the same. Every JSON document from outside now goes through one reader
(`sparkpair.boundedjson.loads`: a size cap, a depth cap, NaN refused), and no other module parses JSON but the
package data readers.
"""

from __future__ import annotations

import ast
import base64
from pathlib import Path

import pytest

from sparkpair import boundedjson
from sparkpair.apply import executor
from sparkpair.cli import main
from sparkpair.draft import export
from sparkpair.engine.state import LaunchState
from sparkpair.jsonfields import Field, ShapeError
from sparkpair.probes import ProbeFailure, docker, drafts, judge, ranks
from sparkpair.transport import lock

ROOT = Path(__file__).resolve().parents[2]
NESTED = b"[" * (64 << 10)
DEEP = b"[" * 100 + b"]" * 100  # parses in Python, but deeper than any document sparkpair reads
# Modules that read sparkpair's own package data (sparkpair/data/*.json), not anything from outside.
PACKAGE_DATA_READERS = {"sparkpair/checks/playbook.py", "sparkpair/runtimes/vllm.py", "sparkpair/runtimes/sglang.py",
                        "sparkpair/render/engine_schema.py",
                        "sparkpair/boundedjson.py"}


@pytest.mark.parametrize("text", [NESTED, DEEP, b"[NaN]", b"x" * 10, b'{"a": 1', b"\xff"])
def test_the_reader_refuses_in_a_value_error(text: bytes) -> None:
    with pytest.raises(boundedjson.Refused):
        boundedjson.loads(text)


def test_the_reader_refuses_over_its_cap_and_reads_what_is_fine() -> None:
    with pytest.raises(boundedjson.Refused, match="larger than 10 bytes"):
        boundedjson.loads(b'"' + b"a" * 20 + b'"', cap=10)
    assert boundedjson.loads('{"a": [[[1]]]}') == {"a": [[[1]]]}


def test_a_draft_record_of_nested_brackets_is_no_record_and_the_round_goes_on() -> None:
    probe = drafts.training_record("~/.cache/huggingface", "org/draft")
    assert judge(probe, 0, base64.b64encode(NESTED).decode(), "") is None


@pytest.mark.parametrize("probe,output", [
    (docker.container("engine"), NESTED.decode()),
    (ranks.processes("engine", "x"), NESTED.decode()),
])
def test_a_probe_answering_nested_json_fails_that_probe_only(probe: object, output: str) -> None:
    assert isinstance(judge(probe, 0, output, ""), ProbeFailure)  # type: ignore[arg-type]


def test_a_nested_lock_file_is_one_line_exit_2(example_inventory_path: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "nested.lock"
    bad.write_bytes(NESTED)
    code = main(["-i", str(example_inventory_path), "diff", "--lock", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and str(bad) in err and "nested deeper" in err and len(err.strip().splitlines()) == 1, err


def test_the_states_and_records_from_a_node_read_nested_json_as_unreadable() -> None:
    assert LaunchState.from_json(NESTED) is None
    assert export.parse_training(NESTED) == {}
    assert lock.parse(NESTED) is None
    with pytest.raises(ValueError, match="nested deeper"):
        executor.parse_journal(NESTED, "network", "/home/nvidia")
    with pytest.raises(ShapeError):
        Field.parse(NESTED, "an answer")


def test_nothing_but_the_reader_parses_json() -> None:
    """Every json.load/json.loads in sparkpair is boundedjson's, or reads sparkpair's own package data."""
    found = []
    for path in sorted((ROOT / "sparkpair").rglob("*.py")):
        relative = str(path.relative_to(ROOT))
        if relative.startswith("sparkpair/data/") or relative in PACKAGE_DATA_READERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("load", "loads") and \
                    isinstance(node.value, ast.Name) and node.value.id == "json":
                found.append(f"{relative}:{node.lineno}")
    assert not found, found
