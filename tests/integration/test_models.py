"""Model files on the simulated pair, content-verified: a byte changed inside a blob (same size) on either node
makes doctor's models.match FAIL naming the repo and the file, and the next launch repairs it (the worker's
copy sent again, the head's downloaded again); an interrupted copy (Ctrl-C, a killed stream, a QSFP twin taken
down) keeps only whole, verified files, never links a half-written one into a snapshot, and a rerun sends the
rest; progress lines appear while a copy runs.

The stand-in's models are a few MiB, copied in a blink over the twins. To interrupt a copy mid-way, a token
bucket (`tc qdisc ... tbf`) on the head's two QSFP twins slows what the head sends to SHAPED_RATE per twin for
the interrupted run only; the rerun goes at full speed.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Iterator

import pytest
from conftest import Run, run_sparkpair
from test_interrupts import Background

TARGET = "nvidia/Qwen3-235B-A22B-FP4"
HUB = "/home/nvidia/.cache/huggingface/hub"
REPOS = f"{HUB}/models--nvidia--Qwen3-235B-A22B-*"
TWINS = ("enp1s0f1np1", "enP2p1s0f1np1")
SHAPED_RATE = "3mbit"            # per twin: the ~6.5 MiB of both models take about 9 s over the two
PROGRESS = r"spark-b: copy from spark-a \(tcp\): ([\d.]+) (B|KiB|MiB|GiB)/([\d.]+) (B|KiB|MiB|GiB)"
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}

# Run as root on a node: every blob of both repos (hashed against its name), every file in blobs/ that is not
# a blob (a partial copy), every snapshot entry and what it resolves to; problems named.
AUDIT = r"""
import glob, hashlib, json, os, re, sys
BLOB = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64})$")
def digest(path, name):
    found = hashlib.sha256() if len(name) == 64 else hashlib.sha1(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as handle:
        for piece in iter(lambda: handle.read(1 << 20), b""):
            found.update(piece)
    return found.hexdigest()
out = {"blobs": {}, "parts": [], "links": {}, "problems": []}
for repo in sorted(glob.glob(sys.argv[1])):
    name, blobs = os.path.basename(repo), os.path.join(repo, "blobs")
    for entry in (os.scandir(blobs) if os.path.isdir(blobs) else []):
        if not BLOB.match(entry.name):
            out["parts"].append(f"{name}/{entry.name}")
            continue
        out["blobs"][f"{name}/{entry.name}"] = [entry.inode(), entry.stat().st_ctime_ns]   # the file, not its name
        if digest(entry.path, entry.name) != entry.name:
            out["problems"].append(f"{name}: blob {entry.name} does not hash to its name")
    for base, _, files in os.walk(os.path.join(repo, "snapshots")):
        for file in files:
            path = os.path.join(base, file)
            shown = f"{name}/{os.path.relpath(path, os.path.join(repo, 'snapshots'))}"
            if not os.path.islink(path):
                out["problems"].append(f"{shown} is not a link")
                continue
            target = os.path.normpath(os.path.join(base, os.readlink(path)))
            out["links"][shown] = os.path.basename(target)
            if os.path.dirname(target) != blobs or not BLOB.match(os.path.basename(target)):
                out["problems"].append(f"{shown} links to {target}, not to a blob")
            elif not os.path.isfile(target):
                out["problems"].append(f"{shown} links to a missing blob")
print(json.dumps(out))
"""

# Run as root on a node: flip one byte in the middle of a file (same size); with "keep", put the mtime back.
FLIP = r"""
import os, sys
path, keep = sys.argv[1], sys.argv[2] == "keep"
before = os.stat(path)
fd = os.open(path, os.O_RDWR)
at = before.st_size // 2
os.pwrite(fd, bytes([os.pread(fd, 1, at)[0] ^ 0xFF]), at)
os.close(fd)
if keep:
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
after = os.stat(path)
print(after.st_size == before.st_size, after.st_mtime_ns == before.st_mtime_ns)
"""

# Run as root on a node: the model copy's node programs playing the given role (send or recv), by pid; with
# "kill", SIGKILL them.
PROGRAMS = r"""
import os, signal, sys
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[:-1]
    except OSError:
        continue
    at = argv.index(b"-c") if b"-c" in argv else -1  # python3 [options] -c PROGRAM ROLE
    if int(pid) != os.getpid() and at > 0 and len(argv) == at + 3 and b"mn_main" in argv[at + 1] and \
            argv[at + 2] == sys.argv[1].encode():
        if sys.argv[2] == "kill":
            os.kill(int(pid), signal.SIGKILL)
        print(pid)
"""


def audit(bed, node: str) -> dict:
    """The node's blobs (name -> inode and ctime), partial files, snapshot links and every problem found hashing them."""
    return json.loads(bed.exec(node, ["python3", "-c", AUDIT, REPOS]).stdout)


def assert_sound(bed, node: str, finished: bool) -> dict:
    """Every blob hashes to its name and every snapshot entry links to such a blob; once a copy finished, no
    partial file is left either. The audit."""
    found = audit(bed, node)
    assert found["problems"] == [], f"{node}: {found['problems']}"
    assert not (finished and found["parts"]), f"{node}: partial files left: {found['parts']}"
    return found


def shard(bed, node: str) -> tuple[str, str]:
    """The first weight shard of the target on the node: its snapshot file name and its blob's path."""
    links = audit(bed, node)["links"]
    name = next(path for path in sorted(links) if path.startswith("models--nvidia--Qwen3-235B-A22B-FP4/")
                and path.endswith(".safetensors"))
    return name.rsplit("/", 1)[1], f"{HUB}/models--nvidia--Qwen3-235B-A22B-FP4/blobs/{links[name]}"


def flip(bed, node: str, path: str, keep_mtime: bool) -> None:
    same_size, same_mtime = bed.exec(node, ["python3", "-c", FLIP, path, "keep" if keep_mtime else "touch"]
                                     ).stdout.split()
    assert same_size == "True" and same_mtime == str(keep_mtime)


def model_match(bed) -> tuple[int, list[dict]]:
    """doctor --only models.match: its exit code and its findings."""
    run = run_sparkpair(bed.inventory, "doctor", "--only", "models.match", "--json")
    return run.code, json.loads(run.out)["findings"]


def assert_matches(bed) -> list[dict]:
    """doctor passes models.match: content verified on both nodes, the same blobs on both. Its findings."""
    code, found = model_match(bed)
    assert code == 0 and found and all(f["status"] == "OK" for f in found), found
    assert {f["node"] for f in found} == {"spark-a", "spark-b", "pair"}
    return found


def served(run: Run) -> None:
    assert run.code == 0 and "serving: " in run.out, run.text
    assert "Traceback" not in run.text and "internal error" not in run.err


class Shaper:
    """A token bucket on the head's QSFP twins (what the head sends), removed by `release`."""

    def __init__(self, bed) -> None:
        self.bed, self.on = bed, False

    def slow(self) -> None:
        for twin in TWINS:
            self.bed.exec("spark-a", f"tc qdisc replace dev {twin} root tbf rate {SHAPED_RATE} burst 64kb latency 1s")
        self.on = True

    def release(self) -> None:
        if self.on:
            for twin in TWINS:
                self.bed.exec("spark-a", f"tc qdisc del dev {twin} root", check=False)
        self.on = False


@pytest.fixture
def copying(stopped, monkeypatch: pytest.MonkeyPatch) -> Iterator[Shaper]:
    """The pair with both models on the head only and the head's twins slowed; plain progress lines every
    0.2 s. Afterwards the twins are as before (speed, links up)."""
    if not complete(audit(stopped, "spark-a")):       # another test removed them: download them again
        assert run_sparkpair(stopped.inventory, "launch", "--no-wait", "--timeout", "120").code == 0
        assert run_sparkpair(stopped.inventory, "stop").code == 0
    stopped.exec("spark-b", f"rm -rf {REPOS}")
    monkeypatch.setenv("SPARKPAIR_PROGRESS_EVERY", "0.2")
    shaper = Shaper(stopped)
    shaper.slow()
    try:
        yield shaper
    finally:
        shaper.release()
        for twin in TWINS:
            stopped.exec("spark-b", f"ip link set {twin} up", check=False)


def complete(found: dict) -> bool:
    """Whether an audit shows both models linked, every link to a good blob."""
    repos = {path.split("/", 1)[0] for path in found["links"]}
    return not found["problems"] and repos == {"models--nvidia--Qwen3-235B-A22B-FP4",
                                               "models--nvidia--Qwen3-235B-A22B-Eagle3"}


def next_line(run: Background, pattern: str, start: int, timeout: float = 60) -> tuple[int, str]:
    """The first stderr line from index start on that matches pattern, and its index; fails when the run
    ends or the deadline passes first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = list(run.err)
        for index in range(start, len(lines)):
            if lines[index] == "":
                pytest.fail(f"sparkpair ended before {pattern!r}:\n{''.join(lines)}")
            if re.search(pattern, lines[index]):
                return index, lines[index]
        start = max(start, len(lines))
        time.sleep(0.05)
    pytest.fail(f"no {pattern!r} within {timeout} s:\n{''.join(run.err)}")


def copy_over(bed) -> bool:
    """Whether no node program of a copy runs on either node any more (a receiver keeps what arrived whole
    only once it has verified it)."""
    return not any(bed.exec(node, ["python3", "-c", PROGRAMS, role, "list"]).stdout.strip()
                   for node, role in (("spark-a", "send"), ("spark-b", "recv")))


def amount(match: re.Match[str]) -> tuple[float, float]:
    return float(match[1]) * UNITS[match[2]], float(match[3]) * UNITS[match[4]]


def wait_progress(run: Background, start: int, above: float) -> tuple[int, float, float]:
    """The next progress line of the copy from stderr index start on that shows more than `above` bytes
    copied: its index, the bytes copied and the total. A copy counts a file once the receiver holds it whole."""
    index = start - 1
    while True:
        index, line = next_line(run, PROGRESS, index + 1)
        done, total = amount(re.search(PROGRESS, line))
        if done > above:
            return index, done, total


def interrupted_then_resumed(bed, shaper: Shaper, run: Run, head: dict, keeps: bool = True) -> None:
    """After an interrupted copy: the worker holds only whole, verified files (some, not all, when it keeps
    what arrived), nothing half-written linked; the rerun at full speed sends the rest only (the files kept
    stay as they are), and the engine serves."""
    bed.wait_until(lambda: copy_over(bed), 60, "the copy's node programs to end")
    kept = assert_sound(bed, "spark-b", finished=False)
    assert kept["blobs"] or not keeps, f"nothing had arrived: the interruption proves nothing\n{run.err}"
    assert set(kept["blobs"]) < set(head["blobs"]), f"the copy had finished before the interruption\n{run.err}"
    shaper.release()
    again = run_sparkpair(bed.inventory, "launch", "--timeout", "120")
    served(again)
    assert "spark-b: nvidia/Qwen3-235B-A22B-" in again.err and "copying from spark-a" in again.err, again.err
    after = assert_sound(bed, "spark-b", finished=True)
    assert set(after["blobs"]) == set(head["blobs"]) and after["links"] == head["links"]
    resent = [name for name, file in kept["blobs"].items() if after["blobs"][name] != file]
    assert resent == [], f"whole files kept by the interrupted copy were sent again: {resent}"
    assert_matches(bed)


# --- corruption -------------------------------------------------------------------------------------------------

def test_a_changed_byte_on_the_worker_fails_doctor_by_name_and_launch_copies_it_again(stopped) -> None:
    """Same size and, put back, the same mtime (a cache of name, size and mtime alone would be fooled): doctor
    still hashes the file (its ctime moved), FAILs naming repo and file; launch copies that file only."""
    served(run_sparkpair(stopped.inventory, "launch", "--timeout", "120"))
    assert run_sparkpair(stopped.inventory, "stop").code == 0
    found = assert_matches(stopped)                  # the launch verified every file: the node caches vouch for all
    assert all("all vouched for by the node's cache" in f["detail"] for f in found if f["node"] != "pair"), found
    name, blob = shard(stopped, "spark-b")
    flip(stopped, "spark-b", blob, keep_mtime=True)
    code, found = model_match(stopped)
    failed = [f for f in found if f["status"] == "FAIL"]
    assert code == 1 and [f["node"] for f in failed] == ["spark-b"], found
    assert failed[0]["detail"].startswith(f"{TARGET}: {name} is corrupt on spark-b (content hashes to "), failed
    assert "sparkpair launch (copies it again from spark-a)" == failed[0]["fix"]
    before = audit(stopped, "spark-b")["blobs"]
    run = run_sparkpair(stopped.inventory, "launch", "--timeout", "120")
    served(run)
    assert re.search(rf"^warning: spark-b: {TARGET}: {re.escape(name)} is corrupt \(content hashes to [0-9a-f]+\); removed, "
                     r"copying it again from spark-a$", run.err, re.M), run.err
    after = assert_sound(stopped, "spark-b", finished=True)
    changed = sorted(key for key, file in after["blobs"].items() if before.get(key) != file)
    assert changed == [f"models--nvidia--Qwen3-235B-A22B-FP4/{blob.rsplit('/', 1)[1]}"]   # only that file moved
    assert_matches(stopped)


def test_a_changed_byte_on_the_head_fails_doctor_by_name_and_launch_downloads_it_again(stopped) -> None:
    served(run_sparkpair(stopped.inventory, "launch", "--timeout", "120"))
    assert run_sparkpair(stopped.inventory, "stop").code == 0
    name, blob = shard(stopped, "spark-a")
    flip(stopped, "spark-a", blob, keep_mtime=False)
    code, found = model_match(stopped)
    failed = [f for f in found if f["status"] == "FAIL"]
    assert code == 1 and [f["node"] for f in failed] == ["spark-a"], found
    assert failed[0]["detail"].startswith(f"{TARGET}: {name} is corrupt on spark-a (content hashes to "), failed
    assert failed[0]["fix"] == "sparkpair launch (downloads it again)"
    run = run_sparkpair(stopped.inventory, "launch", "--timeout", "120")
    served(run)
    assert re.search(rf"^warning: spark-a: {TARGET}: {re.escape(name)} is corrupt \(content hashes to [0-9a-f]+\); removed, "
                     r"downloading it again$", run.err, re.M), run.err
    assert f"spark-a: downloaded {TARGET}: " in run.err, run.err
    assert "copying from spark-a" not in run.err      # the worker's file was good all along
    for node in ("spark-a", "spark-b"):
        assert_sound(stopped, node, finished=True)
    assert_matches(stopped)


# --- interrupted copies ---------------------------------------------------------------------------------------

def test_ctrl_c_during_the_copy_keeps_whole_files_and_the_rerun_sends_the_rest(copying, stopped) -> None:
    head = assert_sound(stopped, "spark-a", finished=True)
    run = Background(stopped.inventory, "launch", "--timeout", "120")
    _, done, total = wait_progress(run, 0, 0)           # a file arrived whole, others did not yet
    assert done < total
    run.proc.send_signal(signal.SIGINT)
    ended = run.finish()
    assert ended.code == 130, ended.text
    assert "interrupted while getting the models onto every node (a rerun resumes)" in ended.err, ended.err
    interrupted_then_resumed(stopped, copying, ended, head)


@pytest.mark.parametrize("node,role", [("spark-a", "send"), ("spark-b", "recv")])
def test_a_killed_stream_keeps_whole_files_and_the_rerun_sends_the_rest(copying, stopped, node, role) -> None:
    """The copy's sender on the head, or its receiver on the worker, killed (SIGKILL) mid-copy: the launch
    says which and that a rerun sends the rest; the rerun does."""
    head = assert_sound(stopped, "spark-a", finished=True)
    run = Background(stopped.inventory, "launch", "--timeout", "120")
    _, done, total = wait_progress(run, 0, 0)
    assert done < total
    assert stopped.exec(node, ["python3", "-c", PROGRAMS, role, "kill"]).stdout.strip(), f"no {role} on {node}"
    ended = run.finish()
    assert ended.code == 1, ended.text
    assert "Traceback" not in ended.text and "internal error" not in ended.err
    said = "sender on spark-a ended without a result" if role == "send" else "receiver on spark-b stopped"
    assert re.search(rf"^error: {node}: the model copy's {said} \(.+\); what had arrived whole and been verified "
                     "stays, a rerun of sparkpair launch sends the rest$", ended.err, re.M), ended.err
    # A receiver on fewer than 8 cores verifies what arrived only once the transfer ends (hashing would slow
    # it): killed before that, it leaves partial files (never linked) and the rerun sends everything.
    interrupted_then_resumed(stopped, copying, ended, head, keeps=role == "send")


def test_a_twin_taken_down_mid_copy_and_back_the_copy_resumes_and_finishes_verified(copying, stopped) -> None:
    """Progress lines show the copy moving; with one twin down it goes on over the other; back up, the copy
    finishes in the same launch with every file verified, and the engine serves."""
    head = assert_sound(stopped, "spark-a", finished=True)
    run = Background(stopped.inventory, "launch", "--timeout", "120")
    index, done, total = wait_progress(run, 0, -1)
    stopped.exec("spark-b", f"ip link set {TWINS[0]} down")
    try:                               # a shard (at least 700 KiB) arrives over the other twin meanwhile
        index, moved, _ = wait_progress(run, index + 1, done + 700 * 1024)
        assert moved < total, "the copy ended before the twin came back: nothing was shown resuming"
    finally:
        stopped.exec("spark-b", f"ip link set {TWINS[0]} up")
    copying.release()
    ended = run.finish()
    served(ended)
    lines = [amount(m) for m in re.finditer(PROGRESS, ended.err)]
    assert len(lines) >= 3 and lines[-1][0] == lines[-1][1] == total, lines
    assert re.search(r"^spark-b: copy from spark-a \(tcp\): [\d.]+ [KMG]?i?B in [\d.]+ s, \d+ MB/s over 8 streams on "
                     r"(1 twin|2 twins)$", ended.err, re.M), ended.err
    after = assert_sound(stopped, "spark-b", finished=True)
    assert set(after["blobs"]) == set(head["blobs"]) and after["links"] == head["links"]
    assert_matches(stopped)
