"""A rendered runbook, run by hand on the simulated pair, reaches a serving endpoint (issue 38, item 5; issue 34).

`sparkpair render` writes qwen3-235b's launch.sh for the pair's inventory, and both runbooks of CASES run by hand:
the stand-in TensorRT-LLM's, and Triton Inference Server's (the real tritonserver with the real vLLM; its models
step runs the image's real `hf download`, against the testbed's stand-in hub, which serves the tiny models the
testbed planted). Each numbered step runs as written where its header says: `[on this machine]` in a shell here
with the inventory in SPARKPAIR_INVENTORY, `[on spark-a]` / `[on spark-b]` over SSH as the inventory's user, the
lines fed to `bash -euo pipefail`. The one step that is an instruction (copy the rendered files) is done as a
person does it: each listed file from the folder render wrote, a node's own copy where there is one. The
readiness step's answer (a chat completion; Triton's generate) must hold text, and the stop step must leave no
engine container. So the runbook cannot drift from what launch does: a line that only works under sparkpair
fails here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import WithInventory, run_sparkpair, variant_inventory

from sparkpair.runtimes import runtime_named

ROOT = Path(__file__).resolve().parents[2]
PROFILE = "qwen3-235b"
STEP_TIMEOUT_S = 900   # a step that waits (readiness) has its own deadline inside; this only bounds a hung one


def steps(script: Path) -> list[tuple[str, list[str], list[str]]]:
    """(title, where, lines) of each numbered step; lines keep the step's comments (the file list)."""
    found: list[tuple[str, list[str], list[str]]] = []
    for line in script.read_text().splitlines():
        header = re.fullmatch(r"# \d+\. (.+)  \[on (.+)\]", line)
        if header:
            found.append((header.group(1), header.group(2).split(" and "), []))
        elif found and line:
            found[-1][2].append(line)
    return found


def on_this_machine(bed, lines: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPARKPAIR_INVENTORY": str(bed.inventory),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-euo", "pipefail", "-s"], input="\n".join(lines), capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=STEP_TIMEOUT_S)


def on_node(bed, node: str, lines: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(bed.ssh_argv(node) + ["bash -euo pipefail -s"], input="\n".join(lines),
                          capture_output=True, text=True, timeout=STEP_TIMEOUT_S)


def copy_rendered(bed, node: str, rendered: Path, listed: list[str]) -> None:
    """Step 2's instruction: each listed ~/.sparkpair/config file (a path under it for a model repository's) from
    render's folder for the runtime, the node's own copy first, then the profile's, then the runtime's shared one."""
    for entry in listed:
        relative = entry.split("/.sparkpair/config/", 1)[1]
        source = next(path for path in (rendered / node / relative, rendered / PROFILE / relative,
                                        rendered / relative) if path.is_file())
        mode = "755" if os.access(source, os.X_OK) else "644"
        target = f".sparkpair/config/{relative}"
        done = subprocess.run(bed.ssh_argv(node) + [f"mkdir -p \"$(dirname {target})\" && cat > {target} && "
                                                    f"chmod {mode} {target}"],
                              input=source.read_text(), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr


def openai_answer(stdout: str) -> str:
    """The readiness step's chat completion (the last line it printed): the answer's text."""
    return str(json.loads(stdout.splitlines()[-1])["choices"][0]["message"]["content"])


def triton_answer(stdout: str) -> str:
    """The readiness step's generation through Triton's generate endpoint (the last line): its text_output."""
    return str(json.loads(stdout.splitlines()[-1])["text_output"])


@dataclass(frozen=True)
class Case:
    """One runtime's runbook: its render arguments and folder, the inventory changes it runs with, its container,
    how its readiness answer reads, and the testbed setup it needs beyond the pair (a fixture's name)."""

    runtime: str
    changes: dict
    container: str
    answer: Callable[[str], str]
    needs: str = ""


CASES = [
    Case("trtllm", {}, "trtllm-multinode", openai_answer),
    # Triton's vLLM engine eager, as test_launch_triton's (the vLLM backend's sample model.json): the runbook's start
    Case("triton", {"models": {PROFILE: {"variants": {"triton": {"serve_args": {
        "max_model_len": 8192, "gpu_memory_utilization": 0.85, "max_num_seqs": 4, "enforce_eager": True}}}}}},
         "triton-multinode", triton_answer, needs="testbed_triton"),
]


@pytest.mark.parametrize("case", CASES, ids=[case.runtime for case in CASES])
def test_the_rendered_runbook_run_by_hand_serves_a_completion(stopped, tmp_path: Path, request, case: Case) -> None:
    if case.needs:
        request.getfixturevalue(case.needs)
    inventory = variant_inventory(stopped.inventory, tmp_path, case.changes)
    bed = WithInventory(stopped, inventory)
    rendered = tmp_path / "rendered"
    chosen = ("--runtime", case.runtime) if case.runtime != "trtllm" else ()
    render = run_sparkpair(inventory, "render", PROFILE, *chosen, "--out", rendered)
    assert render.code == 0, render.text
    folder = rendered / runtime_named(case.runtime).render_dir
    script = steps(folder / PROFILE / "launch.sh")
    assert [title.split(":")[0] for title, _, _ in script][:2] == ["Preflight", "Files"]
    answered = ""
    try:
        for title, where, lines in script:
            commands = [line for line in lines if not line.startswith("#")]
            for place in where:
                done = on_this_machine(bed, commands) if place == "this machine" else on_node(bed, place, commands)
                assert done.returncode == 0, f"step '{title}' on {place}:\n{done.stdout}{done.stderr}"
                if title.startswith("Files"):
                    copy_rendered(bed, place, folder, [line.split()[-1] for line in lines if line.startswith("#   ")])
                if title.startswith("Readiness"):
                    answered = done.stdout
        assert case.answer(answered).strip(), answered
        for node in ("spark-a", "spark-b"):   # the stop step ran on both
            names = stopped.exec(node, "docker ps -a --format '{{.Names}}'").stdout.split()
            assert case.container not in names
    finally:
        run_sparkpair(inventory, "stop")
        for node in ("spark-a", "spark-b"):   # a step that failed may have left the runbook's container
            stopped.exec(node, f"docker rm -f {case.container} >/dev/null 2>&1 || true", check=False)
