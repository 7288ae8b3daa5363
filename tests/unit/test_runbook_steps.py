"""The rendered runbook (launch.sh) works when a person runs it (issue 38, item 5): every `sparkpair` line names
the runtime, the download turns the hub on that the container's environment turns off, each node's container
carries its own label on a step of its own, the stable model paths the engine names are made, and readiness
waits, then prints each answer on a line of its own. tests/integration/test_runbook_by_hand.py runs one on the simulated pair."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkpair.cli import main


def steps(path: Path) -> list[tuple[str, str, list[str]]]:
    """(title, where, lines) of each numbered step of a launch.sh."""
    found: list[tuple[str, str, list[str]]] = []
    for line in path.read_text().splitlines():
        header = re.fullmatch(r"# \d+\. (.+)  \[on (.+)\]", line)
        if header:
            found.append((header.group(1), header.group(2), []))
        elif found and line and not line.startswith("#"):
            found[-1][2].append(line)
    return found


@pytest.fixture
def rendered(example_inventory_path: Path, tmp_path: Path) -> Path:
    assert main(["-i", str(example_inventory_path), "render", "qwen3-235b", "--out", str(tmp_path / "trtllm")]) == 0
    assert main(["-i", str(example_inventory_path), "render", "qwen3-235b", "--runtime", "vllm",
                 "--out", str(tmp_path / "vllm")]) == 0
    return tmp_path


@pytest.mark.parametrize("runtime, script", [("trtllm", "trtllm/qwen3-235b/launch.sh"),
                                             ("vllm", "vllm/vllm/qwen3-235b/launch.sh")])
def test_every_sparkpair_line_names_the_runtime(rendered: Path, runtime: str, script: str) -> None:
    text = (rendered / script).read_text()
    assert f"# `sparkpair launch qwen3-235b --runtime {runtime}` as shell commands" in text
    assert [line for line in text.splitlines() if line.startswith("sparkpair ")] == \
        [f"sparkpair doctor qwen3-235b --runtime {runtime}"]


def test_the_download_turns_on_the_hub_the_container_keeps_off(rendered: Path) -> None:
    assert "HF_HUB_OFFLINE=1" in (rendered / "trtllm" / "container.env").read_text().splitlines()
    (download,) = [item for item in steps(rendered / "trtllm/qwen3-235b/launch.sh") if item[0].startswith("Models into")]
    assert download[1] == "spark-a" and len(download[2]) == 2
    assert all(" -e HF_HUB_OFFLINE=0 " in line and " hf download " in line for line in download[2])


def test_each_node_s_container_is_its_own_step_with_its_own_label(rendered: Path) -> None:
    for script in ("trtllm/qwen3-235b/launch.sh", "vllm/vllm/qwen3-235b/launch.sh"):
        containers = [item for item in steps(rendered / script) if item[0] == "Engine container"]
        assert [where for _, where, _ in containers] == ["spark-a", "spark-b"]
        for _, where, lines in containers:
            (line,) = lines
            assert f"--label sparkpair.node={where} " in line and line.count("sparkpair.node=") == 1


def test_the_paths_the_engine_names_are_made_on_every_rank_node(rendered: Path) -> None:
    script = steps(rendered / "vllm/vllm/qwen3-235b/launch.sh")
    (links,) = [item for item in script if item[0].startswith("Stable model paths")]
    serve = next(lines[0] for title, _, lines in script if title.startswith("Serve"))
    assert links[1] == "spark-a and spark-b"
    for name in ("Qwen--Qwen3-235B-A22B-GPTQ-Int4", "RedHatAI--Qwen3-235B-A22B-speculator.eagle3"):
        assert f"/sparkpair/hf/sparkpair-models/{name}" in serve
        assert any(line.startswith("ln -sfn ") and line.endswith(f'/sparkpair-models/{name}"') for line in links[2])


def test_readiness_waits_for_the_server_before_it_asks(rendered: Path) -> None:
    (ready,) = [lines for title, _, lines in steps(rendered / "trtllm/qwen3-235b/launch.sh")
                if title.startswith("Readiness")]
    assert ready[0].startswith("for try in $(seq 360); do curl -sf http://localhost:8355/health")
    assert all(line.startswith("curl -sf -w '\\n' ") for line in ready[1:])   # each answer on a line of its own
