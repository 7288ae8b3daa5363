"""`sparkpair diagnose` in-process: exit codes 0/1/2, the JSON shape, standard input, and never a
traceback whatever the input; `inventory check` shows the inventory's own warnings."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkpair.cli import main

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "fixtures" / "logs"


def run(argv: list[str], stdin: bytes | None = None, monkeypatch: pytest.MonkeyPatch | None = None
        ) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    if stdin is not None and monkeypatch is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_a_failure_exits_1_with_cause_evidence_fix_and_runbook() -> None:
    code, out, err = run(["diagnose", str(LOGS / "mpi_host_key_verification__1.log")])
    assert code == 1 and err == ""
    assert out.startswith("1. mpi.ssh: ")
    assert "| Host key verification failed." in out and "fix: sparkpair setup-network" in out
    assert "runbook: docs/runbooks.md#mpi-ssh" in out


def test_a_healthy_log_exits_0() -> None:
    code, out, _ = run(["diagnose", str(LOGS / "healthy__1.log")])
    assert code == 0 and "no failure found: the start reached serving" in out


def test_json_lists_findings_most_likely_first() -> None:
    code, out, _ = run(["diagnose", "--json", str(LOGS / "nccl_ifname_missing__1.log")])
    data = json.loads(out)
    assert code == 1 and list(data) == ["findings"]
    first = data["findings"][0]
    assert list(first) == ["cause", "summary", "fix", "evidence", "runbook"]
    assert first["cause"] == "fabric.interface" and "[rank0]: Bootstrap : no socket interface found" in first["evidence"]
    assert json.loads(run(["diagnose", "--json", str(LOGS / "healthy__2.log")])[1]) == {"findings": []}


def test_several_files_are_read_as_one_start() -> None:
    code, out, _ = run(["diagnose", "--json", str(LOGS / "healthy__1.log"), str(LOGS / "port_in_use__1.log")])
    assert code == 1 and json.loads(out)["findings"][0]["cause"] == "port.busy"


@pytest.mark.parametrize("argv", [["diagnose"], ["diagnose", "-"], ["diagnose", "--json", "-"]])
def test_standard_input(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    data = (LOGS / "container_platform_mismatch__1.log").read_bytes()
    code, out, _ = run(argv, data, monkeypatch)
    assert code == 1 and "image.platform" in out


@pytest.mark.parametrize("data", [b"", b"\n" * 1000, b"  \r\n\t\n"])
def test_empty_input_is_one_line_and_exit_2(data: bytes, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    code, out, err = run(["diagnose"], data, monkeypatch)
    assert code == 2 and out == "" and err == "error: standard input: empty; give the log of a start\n"
    path = tmp_path / "empty.log"
    path.write_bytes(data)
    assert run(["diagnose", str(path)])[0] == 2


@pytest.mark.parametrize("name, words", [
    ("missing.log", "no such file"),
    (".", "is a directory"),
])
def test_an_unreadable_file_is_one_line_exit_2(name: str, words: str, tmp_path: Path) -> None:
    path = str(tmp_path / name) if name != "." else str(tmp_path)
    code, out, err = run(["diagnose", str(LOGS / "healthy__1.log"), path])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: {words}")


def test_a_file_without_read_permission_is_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "secret.log"
    path.write_text("x")
    path.chmod(0)
    try:
        code, _, err = run(["diagnose", str(path)])
    finally:
        path.chmod(0o600)
    if code == 0:  # root reads it anyway
        return
    assert code == 2 and err.startswith(f"error: {path}: cannot be read")


def test_standard_input_that_cannot_be_read_is_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    class Closed(io.StringIO):
        def read(self, *args: object) -> str:
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(sys, "stdin", Closed())
    code, _, err = run(["diagnose"])
    assert code == 2 and err.startswith("error: standard input: cannot be read")


def test_bad_usage_exits_2() -> None:
    assert run(["diagnose", "--nope"])[0] == 2


def test_no_inventory_is_needed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPARKPAIR_INVENTORY", raising=False)
    assert run(["-i", "/nonexistent.yaml", "diagnose", str(LOGS / "hf_gated_repo__1.log")])[0] == 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=3000) | st.sampled_from(sorted(LOGS.glob("*.log"))).map(lambda p: p.read_bytes()),
       tail=st.binary(max_size=200), as_json=st.booleans())
def test_any_input_ends_cleanly_without_a_traceback(tmp_path: Path, data: bytes, tail: bytes, as_json: bool) -> None:
    path = tmp_path / "input.log"
    path.write_bytes(data + tail)
    code, out, err = run(["diagnose", *(["--json"] if as_json else []), str(path)])
    # sparkpair's own traceback would start a line; a log's quoted in the evidence (`| ... Traceback ...`) does not
    assert code in (0, 1, 2) and not any(line.startswith("Traceback") for line in (out + err).splitlines())
    if code == 2:  # empty or binary: one line naming the file
        assert out == "" and err.count("\n") == 1 and err.startswith(f"error: {path}: ")
    else:
        assert err == ""
    if as_json and code != 2:
        assert isinstance(json.loads(out)["findings"], list)


def test_inventory_check_shows_the_one_subnet_warning_and_exits_0() -> None:
    code, out, err = run(["-i", str(ROOT / "tests" / "fixtures" / "inventory" / "one-subnet.yaml"), "inventory",
                          "check"])
    assert code == 0 and ": OK (" in out
    assert err.startswith("warning: spark-a: inventory.twin-subnets: ") and "asymmetric routing" in err
    assert all(line.startswith("warning: ") for line in err.splitlines())


def test_inventory_check_of_the_shipped_example_has_no_warning() -> None:
    code, _, err = run(["-i", str(ROOT / "inventory.example.yaml"), "inventory", "check"])
    assert code == 0 and err == ""


def _classified_sizes(monkeypatch: pytest.MonkeyPatch, keep: int) -> list[int]:
    """KEEP_BYTES set to keep; the sizes of the texts diagnose then classifies, as they come."""
    from sparkpair.cli import diagnose as diagnose_cli
    from sparkpair.engine import diagnose

    monkeypatch.setattr(diagnose_cli, "KEEP_BYTES", keep)
    sizes: list[int] = []
    examine = diagnose.examine
    monkeypatch.setattr(diagnose, "examine", lambda text: sizes.append(len(text)) or examine(text))
    return sizes


def test_several_inputs_share_one_read_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = _classified_sizes(monkeypatch, 3000)
    files = []
    for number in range(4):
        files.append(tmp_path / f"rank{number}.log")
        files[-1].write_bytes(b"x" * 4000 + b"\nHost key verification failed.\n")
    code, out, _ = run(["diagnose", *map(str, files)])
    assert code == 1 and "mpi.ssh" in out  # each input's end is read
    assert sizes and sizes[0] <= 3000 + len(files) - 1  # all of them together: at most KEEP_BYTES (and the joins)


def test_standard_input_without_a_byte_buffer_is_read_to_its_tail_only(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = _classified_sizes(monkeypatch, 1000)
    monkeypatch.setattr(sys, "stdin", io.StringIO("x" * 50_000 + "\nHost key verification failed.\n"))
    code, out, _ = run(["diagnose"])
    assert code == 1 and "mpi.ssh" in out and len(sizes) == 1 and sizes[0] <= 1000
