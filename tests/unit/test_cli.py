"""The CLI layer: exit codes, one-line errors, JSON output, and a start-up that imports little."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkpair.cli import main

INVALID = Path(__file__).parent.parent / "fixtures" / "inventory" / "invalid"


def test_check_ok(example_inventory_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-i", str(example_inventory_path), "inventory", "check"]) == 0
    assert ": OK (spark-a (head), spark-b; profile qwen3-235b;" in capsys.readouterr().out


def test_check_bad_inventory_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-i", str(INVALID / "mtu-too-big.yaml"), "inventory", "check"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "cluster.mtu: got 9500" in err


def test_missing_inventory_names_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPARKPAIR_INVENTORY", raising=False)
    assert main(["inventory", "check"]) == 2
    assert "inventory.yaml: no such file; copy inventory.example.yaml" in capsys.readouterr().err


def test_show_json_has_defaults_and_resolved_profiles(example_inventory_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-i", str(example_inventory_path), "inventory", "show", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["nodes"][1]["port"] == 22 and data["container"]["mpi_transport"] == "exec"
    assert data["models"]["qwen3-235b"]["draft"] == "nvidia/Qwen3-235B-A22B-Eagle3"


def test_schema_is_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inventory", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["type"] == "object" and "nodes" in schema["required"]


def test_render_writes_files(example_inventory_path: Path, tmp_path: Path) -> None:
    assert main(["-i", str(example_inventory_path), "render", "qwen3-235b", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "spark-b" / "40-sparkpair-cx7.yaml").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "qwen3-235b" / "launch.sh").read_text().startswith("#!/usr/bin/env bash")


def test_render_unknown_profile_is_usage_error(example_inventory_path: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-i", str(example_inventory_path), "render", "nope", "--out", str(tmp_path)]) == 2
    assert "no profile 'nope'" in capsys.readouterr().err


def test_unknown_command_and_option_are_usage_errors() -> None:
    assert main(["frobnicate"]) == 2
    assert main(["inventory", "check", "--nope"]) == 2


def test_version() -> None:
    result = subprocess.run([sys.executable, "-m", "sparkpair", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("sparkpair, version ")


def test_the_process_ends_with_main_s_status_and_all_of_its_output(example_inventory_path: Path) -> None:
    """run() ends the process itself (no interpreter finalization): what was written still arrives whole,
    through a pipe, with the status main returned (0, 1, 2 alike)."""
    shown = subprocess.run([sys.executable, "-m", "sparkpair", "-i", str(example_inventory_path), "inventory",
                            "show", "--json"], capture_output=True, text=True)
    assert shown.returncode == 0 and json.loads(shown.stdout)["nodes"], shown.stderr
    bad = subprocess.run([sys.executable, "-m", "sparkpair", "-i", "/nonexistent/inventory.yaml", "doctor"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip().endswith("or set SPARKPAIR_INVENTORY"), bad.stderr


def test_a_profiler_still_gets_its_normal_exit(tmp_path: Path) -> None:
    """run() leaves the exit to the interpreter while a profiler watches, so cProfile writes its file."""
    out = tmp_path / "sparkpair.prof"
    result = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), "-m", "sparkpair", "--version"],
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("sparkpair, version "), result.stderr
    assert out.stat().st_size > 0


def test_a_reader_that_left_gets_no_traceback() -> None:
    """`sparkpair inventory schema | true`: stdout is a pipe nobody reads any more; the exit is quiet, with
    click's status for a broken pipe (1), also now that run() flushes and ends the process itself."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # closed before the first write: every write to the pipe fails (EPIPE)
    try:
        result = subprocess.run([sys.executable, "-m", "sparkpair", "inventory", "schema"], stdout=write_end,
                                stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr
    assert result.returncode == 1


def test_help_imports_no_transport_library() -> None:
    code = ("import sys; from sparkpair.cli import main; main(['--help']);"
            "heavy = [m for m in ('fabric', 'paramiko', 'docker', 'pydantic', 'jinja2') if m in sys.modules];"
            "print(heavy)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip().endswith("[]"), result.stdout
