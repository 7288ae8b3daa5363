"""A rendered runbook, run by hand on the simulated pair, reaches a serving endpoint (issue 38, item 5).

`sparkpair render` writes qwen3-235b's launch.sh for the pair's inventory (the stand-in TensorRT-LLM image);
each numbered step then runs as written where its header says: `[on this machine]` in a shell here with the
inventory in SPARKPAIR_INVENTORY, `[on spark-a]` / `[on spark-b]` over SSH as the inventory's user, the lines
fed to `bash -euo pipefail`. The one step that is an instruction (copy the rendered files) is done as a
person does it: each listed file from the folder render wrote, a node's own copy where there is one. The
readiness step's completion must answer, and the stop step must leave no engine container. So the runbook
cannot drift from what launch does: a line that only works under sparkpair fails here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import run_sparkpair

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
    """Step 2's instruction: each listed ~/.sparkpair/config file from render's folder (the node's own first)."""
    for entry in listed:
        name = entry.rsplit("/", 1)[-1]
        source = next(path for path in (rendered / node / name, rendered / PROFILE / name, rendered / name)
                      if path.is_file())
        mode = "755" if os.access(source, os.X_OK) else "644"
        done = subprocess.run(bed.ssh_argv(node) + [f"cat > .sparkpair/config/{name} && chmod {mode} "
                                                    f".sparkpair/config/{name}"],
                              input=source.read_text(), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr


def test_the_rendered_runbook_run_by_hand_serves_a_completion(stopped, tmp_path: Path) -> None:
    rendered = tmp_path / "rendered"
    render = run_sparkpair(stopped.inventory, "render", PROFILE, "--out", rendered)
    assert render.code == 0, render.text
    script = steps(rendered / PROFILE / "launch.sh")
    assert [title.split(":")[0] for title, _, _ in script][:2] == ["Preflight", "Files"]
    answered = ""
    try:
        for title, where, lines in script:
            commands = [line for line in lines if not line.startswith("#")]
            for place in where:
                done = on_this_machine(stopped, commands) if place == "this machine" else \
                    on_node(stopped, place, commands)
                assert done.returncode == 0, f"step '{title}' on {place}:\n{done.stdout}{done.stderr}"
                if title.startswith("Files"):
                    copy_rendered(stopped, place, rendered, [line.split()[-1] for line in lines
                                                             if line.startswith("#   ")])
                if title.startswith("Readiness"):
                    answered = done.stdout
        completion = json.loads(answered.splitlines()[-1])
        assert completion["choices"][0]["message"]["content"].strip()
        for node in ("spark-a", "spark-b"):   # the stop step ran on both
            names = stopped.exec(node, "docker ps -a --format '{{.Names}}'").stdout.split()
            assert "trtllm-multinode" not in names
    finally:
        run_sparkpair(stopped.inventory, "stop")
