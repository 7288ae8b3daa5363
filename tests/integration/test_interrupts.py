"""Ctrl-C and concurrent runs on the simulated pair: never a half-done node, never two runs at once.

Each interrupt is a real SIGINT sent to the sparkpair process the moment its stderr shows that it
reached the stage under test (a progress line, or with -vv the trace of a remote command). Then:
the exit status is 130, the output says what each node holds, every file on the nodes is whole,
the pair's lock is released, and the next run recovers.
"""

from __future__ import annotations

import getpass
import json
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import Background, Run, has_netplan, run_sparkpair
from test_setup_network import NETPLAN, network_state, nothing_left_running, ssh_state

from sparkpair.transport import lock

NODES = ("spark-a", "spark-b")
CONTAINER = "trtllm-multinode"
LOCK = "/home/nvidia/.sparkpair/lock"
MODELS = "/home/nvidia/.cache/huggingface/hub/models--nvidia--Qwen3-235B-A22B-*"


def interrupt(inventory: Path, stage: str, *args: str) -> Run:
    """Run sparkpair held at the first stderr line matching stage, send it SIGINT there, release it, and return
    how it ended."""
    run = Background(inventory, *args, hold_at=stage)
    run.held()
    run.proc.send_signal(signal.SIGINT)
    return run.finish()


def assert_whole(bed) -> None:
    """No temp file sparkpair uploads through is left, and every file it keeps parses."""
    for node in NODES:
        temps = bed.exec(node, "find /home/nvidia /etc/netplan /tmp \\( -name '*.sparkpair-*' -o "
                               "-name '.sparkpair-upload-*' -o -name 'lock.*' \\) -print").stdout
        assert temps == "", f"{node}: temp files left: {temps}"
        files = bed.exec(node, "for f in /home/nvidia/.sparkpair/journal/*.json /home/nvidia/.sparkpair/state/*.json"
                               " /etc/netplan/*.yaml /home/nvidia/.sparkpair/config/*.yml; do [ -f \"$f\" ] && "
                               "printf '\\034%s\\n' \"$f\" && cat \"$f\"; done; true").stdout
        for chunk in files.split("\x1c")[1:]:
            path, _, content = chunk.partition("\n")
            parsed = json.loads(content) if path.endswith(".json") else yaml.safe_load(content)
            assert content.strip() and parsed is not None, f"{node}: {path} is empty or unreadable"
    assert bed.exec("spark-a", f"test -e {LOCK}", check=False).returncode != 0, "the lock was not released"


def _interrupted(run: Run, message: str) -> None:
    assert run.code == 130, run.text
    assert message in run.err, run.err
    assert "Traceback" not in run.text and "internal error" not in run.err


@pytest.fixture
def pristine_pair(pristine):
    """Both nodes without sparkpair's network, keys or engine (the next `networked` test sets it up again)."""
    return pristine


@pytest.fixture
def slow(stopped, tmp_path: Path) -> Path:
    """An inventory whose engine loads for 5 s and whose hub downloads crawl (knobs of the simulator). The runs
    are held at the line they are interrupted at (Background's hold_at), so no window needs a longer load: each
    relaunch here waited out 15 s before."""
    data = yaml.safe_load(Path(stopped.inventory).read_text())
    data["container"]["env"] = {"SIM_LOAD_SECONDS": "5", "SIM_HF_BYTES_PER_SEC": "400000"}
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# --- setup-network --------------------------------------------------------------------------------

def test_sigint_while_planning_changes_nothing(pristine_pair) -> None:
    run = interrupt(pristine_pair.inventory, r"ip -j addr show", "-vv", "setup-network", "--yes")
    _interrupted(run, "interrupted before any change; nothing was changed on either node")
    assert_whole(pristine_pair)
    for node in NODES:
        assert not has_netplan(pristine_pair, node)
        assert pristine_pair.exec(node, "test -e /home/nvidia/.ssh/id_ed25519", check=False).returncode != 0
    recovered = run_sparkpair(pristine_pair.inventory, "setup-network", "--yes")
    assert recovered.code == 0 and "SSH trust verified" in recovered.out, recovered.text


def _before(bed) -> dict:
    """What setup-network may change on each node: netplan files, twins, SSH files (test_setup_network's view)."""
    return {node: (network_state(bed, node), ssh_state(bed, node)) for node in NODES}


def _undone(run: Run, bed, before: dict, stage: str) -> None:
    """Interrupted at stage, then undone: both nodes as before, said so, nothing left behind; the next run works."""
    _interrupted(run, f"interrupted while {stage}; each node finished the action it was in, then this run was "
                      "undone: both nodes are as before (states above)")
    assert _before(bed) == before
    assert_whole(bed)
    nothing_left_running(bed)
    recovered = run_sparkpair(bed.inventory, "setup-network", "--yes")
    assert recovered.code == 0 and "SSH trust verified" in recovered.out, recovered.text


def test_sigint_while_arming_the_watchdogs_changes_nothing(pristine_pair) -> None:
    before = _before(pristine_pair)
    run = interrupt(pristine_pair.inventory, r"sparkpair-root watchdog-arm ", "-vv", "setup-network", "--yes")
    _interrupted(run, "interrupted while arming the watchdogs; nothing was changed on either node (both are as "
                      "before)")
    assert _before(pristine_pair) == before
    assert_whole(pristine_pair)
    nothing_left_running(pristine_pair)


def test_sigint_during_apply_undoes_it_on_both_nodes(pristine_pair) -> None:
    before = _before(pristine_pair)
    run = interrupt(pristine_pair.inventory, r"^spark-.: create /etc/netplan/", "setup-network", "--yes")
    for node in NODES:
        assert re.search(rf"^{node}: now enp1s0f1np1 down mtu 1500 no address", run.err, re.M), run.err
    _undone(run, pristine_pair, before, "applying the network")


def test_sigint_while_verifying_reverts_both_nodes(pristine_pair) -> None:
    before = _before(pristine_pair)
    pristine_pair.fault("link-down")  # verification keeps polling: a wide window for the signal
    run = interrupt(pristine_pair.inventory, r"\( ping -n", "-vv", "setup-network", "--yes")
    assert "rolling back both nodes (interrupted)" in run.err
    pristine_pair.heal()
    _undone(run, pristine_pair, before, "verifying the link")


def test_sigint_during_the_key_exchange_undoes_the_whole_run(pristine_pair) -> None:
    before = _before(pristine_pair)
    run = interrupt(pristine_pair.inventory, r"^spark-.: make ~/.ssh/id_ed25519", "setup-network", "--yes")
    assert re.search(r"^spark-.: undone: .*restored /etc/netplan|^spark-.: undone: .*removed /etc/netplan", run.err,
                     re.M), run.err
    _undone(run, pristine_pair, before, "exchanging SSH keys")


def test_sigint_while_a_cut_off_node_comes_back_still_ends_with_both_as_before(pristine_pair) -> None:
    before = _before(pristine_pair)
    pristine_pair.fault("strand-on-apply", node="spark-b")
    run = interrupt(pristine_pair.inventory, r"spark-b: not reachable; its watchdog puts it back by itself",
                    "setup-network", "--yes", "--confirm-timeout", "15")
    assert re.search(r"^spark-b: came back by itself", run.err, re.M), run.err
    pristine_pair.heal()
    _interrupted(run, "interrupted while rolling back; ")
    assert "both nodes are as before" in run.err
    assert _before(pristine_pair) == before
    assert_whole(pristine_pair)
    nothing_left_running(pristine_pair)


def test_sigint_during_restore_finishes_it_on_both_nodes(pristine_pair) -> None:
    before = _before(pristine_pair)
    assert run_sparkpair(pristine_pair.inventory, "setup-network", "--yes").code == 0
    run = interrupt(pristine_pair.inventory, r"ls -A /home/nvidia/.sparkpair/first-touch", "-vv", "setup-network",
                    "--restore")
    _interrupted(run, "interrupted during --restore; each node finished restoring first: both nodes are as planned "
                      "(restored, above)")
    for node in NODES:
        assert re.search(rf"^{node}: .*removed {NETPLAN}", run.out, re.M), run.out
    assert _before(pristine_pair) == before
    assert_whole(pristine_pair)
    again = run_sparkpair(pristine_pair.inventory, "setup-network", "--restore")
    assert again.code == 0 and again.out.count("nothing to restore") == 2, again.text


# --- launch -----------------------------------------------------------------------------------------

def test_sigint_while_starting_containers_reports_them_and_launch_reuses_them(stopped) -> None:
    run = interrupt(stopped.inventory, r"mkdir -p \S+/\.sparkpair/config \S+/\.sparkpair/secrets", "-vv", "launch",
                    "--timeout", "120")
    _interrupted(run, "interrupted while starting the engine containers; spark-a: engine container "
                      f"{CONTAINER} running, engine not started; spark-b: engine container {CONTAINER} running")
    assert "Continue with: sparkpair launch qwen3-235b; undo with: sparkpair stop" in run.err
    assert_whole(stopped)
    status = json.loads(run_sparkpair(stopped.inventory, "status", "--json").out)
    assert {name: node["container"] for name, node in status["nodes"].items()} == \
        {"spark-a": "running", "spark-b": "running"}
    again = run_sparkpair(stopped.inventory, "launch", "--timeout", "120")
    assert again.code == 0 and "reused (same spec, running)" in again.err, again.text


def test_sigint_during_model_download_ends_it_and_launch_resumes(slow, stopped) -> None:
    for node in NODES:
        stopped.exec(node, f"rm -rf {MODELS}")
    run = interrupt(slow, r"downloading nvidia/Qwen3-235B-A22B-FP4: (?!0 B)[\d.]+ [KMG]?i?B", "launch", "--timeout", "120")
    _interrupted(run, "interrupted while getting the models onto every node (a rerun resumes); spark-a: engine "
                      f"container {CONTAINER} running, engine not started")
    assert_whole(stopped)
    downloads = stopped.exec("spark-a", f"docker exec {CONTAINER} ps -eo args").stdout
    assert "hf download" not in downloads, downloads  # nothing keeps writing behind the report
    again = run_sparkpair(slow, "launch", "--timeout", "120")
    assert again.code == 0 and "serving: " in again.out, again.text


def test_sigint_while_waiting_for_readiness_leaves_the_engine_starting(slow, stopped) -> None:
    run = interrupt(slow, r"port: nothing listens on port 8355", "launch", "--timeout", "120")
    _interrupted(run, "interrupted while waiting for the engine to become ready; spark-a: engine container "
                      f"{CONTAINER} running, engine running; spark-b: engine container {CONTAINER} running")
    assert_whole(stopped)
    again = run_sparkpair(slow, "launch", "--timeout", "120")
    assert again.code == 0 and "already running with this configuration" in again.out, again.text
    assert "serving: " in again.out


# --- the lock ------------------------------------------------------------------------------------------

def _holder(pid: int, command: str) -> str:
    return f"{getpass.getuser()}@{socket.gethostname()} pid {pid} ({command}, since "


def test_a_second_run_cannot_interleave_with_a_running_one(slow, stopped) -> None:
    first = Background(slow, "launch", "--timeout", "120", hold_at=r"port: nothing listens on port 8355")
    first.held()   # holds the pair's lock there while the others try
    for args in (["stop"], ["setup-network", "--yes"], ["launch"]):
        second = run_sparkpair(stopped.inventory, *args)
        assert second.code == 1, second.text
        assert "another sparkpair run holds the pair: " + _holder(first.proc.pid, "launch qwen3-235b") in second.err
        assert "wait for it; if it is gone, sparkpair unlock" in second.err
    finished = first.finish()
    assert finished.code == 0 and "serving: " in finished.out, finished.text  # the first run was not disturbed
    assert stopped.exec("spark-a", f"test -e {LOCK}", check=False).returncode != 0
    assert run_sparkpair(stopped.inventory, "stop").code == 0


def _plant_lock(bed, holder: dict) -> None:
    bed.exec("spark-a", ["sh", "-c", 'mkdir -p "$(dirname "$1")" && printf %s "$2" > "$1" && chmod 600 "$1"', "-",
                         LOCK, json.dumps(holder)], user="nvidia")


def test_a_stale_lock_of_a_dead_run_is_detected_and_replaced(stopped) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    _plant_lock(stopped, {**lock.holder("launch qwen3-235b"), "pid": gone.pid, "started": "1",
                          "since": time.time() - 60})
    run = run_sparkpair(stopped.inventory, "stop")
    assert run.code == 0, run.text
    assert "warning: removing a stale lock left by " + _holder(gone.pid, "launch qwen3-235b") in run.err
    assert stopped.exec("spark-a", f"test -e {LOCK}", check=False).returncode != 0


def test_a_killed_run_leaves_a_lock_the_next_run_replaces(slow, stopped) -> None:
    killed = Background(slow, "launch", "--timeout", "120", hold_at=r"port: nothing listens on port 8355")
    killed.held()
    killed.proc.kill()
    killed.finish()
    held = json.loads(stopped.exec("spark-a", f"cat {LOCK}").stdout)
    assert held["pid"] == killed.proc.pid and held["command"] == "launch qwen3-235b"
    again = run_sparkpair(slow, "launch", "--timeout", "120")
    assert again.code == 0, again.text
    assert "removing a stale lock left by " + _holder(killed.proc.pid, "launch qwen3-235b") in again.err
    assert "already running with this configuration" in again.out
    assert_whole(stopped)


def test_a_lock_held_from_another_machine_is_named_and_only_unlock_removes_it(stopped) -> None:
    _plant_lock(stopped, {"user": "alice", "host": "alice-laptop", "pid": 4242, "command": "setup-network",
                          "since": time.time()})
    refused = run_sparkpair(stopped.inventory, "stop")
    assert refused.code == 1, refused.text
    assert "another sparkpair run holds the pair: alice@alice-laptop pid 4242 (setup-network, since " in refused.err
    unlocked = run_sparkpair(stopped.inventory, "unlock")
    assert unlocked.code == 0 and "removed the lock of alice@alice-laptop pid 4242" in unlocked.out, unlocked.text
    assert run_sparkpair(stopped.inventory, "stop").code == 0
