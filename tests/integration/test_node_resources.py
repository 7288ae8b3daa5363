"""Memory and disk judged for real on the simulated pair: each node shows a GB10's unified memory and a
Spark's NVMe disk (sparkpair_testbed/gb10.py), the inventory keeps the profile's real sizes
(qwen3-235b: 130 GiB target split over TP=2, the 2 GiB Eagle3 draft, 8 GiB headroom), and the
memory-low and disk-low faults take memory and disk away the way a node's own tools show it."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conftest import run_sparkpair

HUB = "/home/nvidia/.cache/huggingface/hub"
REPOS = ("models--nvidia--Qwen3-235B-A22B-FP4", "models--nvidia--Qwen3-235B-A22B-Eagle3")
REAL = Path(__file__).parent.parent / "fixtures" / "probes" / "real"
NEED_GIB = 130 / 2 + 2 + 8  # the node's weight shard, the whole draft, the headroom
DOWNLOAD_GIB = 130 + 2


@contextmanager
def models_away(bed, nodes: tuple[str, ...]) -> Iterator[None]:
    """Target and draft moved out of the nodes' HF cache for the block (as if never downloaded), then back."""
    for node in nodes:
        for repo in REPOS:
            bed.exec(node, f"[ ! -e {HUB}/{repo} ] || mv {HUB}/{repo} {HUB}/.{repo}.away")
    try:
        yield
    finally:
        for node in nodes:
            for repo in REPOS:
                bed.exec(node, f"[ ! -e {HUB}/.{repo}.away ] || mv {HUB}/.{repo}.away {HUB}/{repo}")


def findings(bed, *only: str) -> dict[tuple[str, str], dict]:
    """doctor --json --only ONLY: (check, node) -> finding (one per pair here)."""
    run = run_sparkpair(bed.inventory, "doctor", "--json", "--only", ",".join((*only, "reach.ssh")),
                        env={"HF_TOKEN": ""})
    assert run.code in (0, 1), run.text
    found = json.loads(run.out)["findings"]
    # not what this module tests, but say why when it happens (a final run once found spark-a unreachable here)
    assert not [f for f in found if f["check"] == "reach.ssh" and f["status"] != "OK"], found
    return {(f["check"], f["node"]): f for f in found}


def test_each_node_shows_a_gb10s_memory_and_a_sparks_disk(testbed) -> None:
    real_free = [line.split()[1:] for line in (REAL / "free-b__1.txt").read_text().splitlines()[1:]]
    for node in ("spark-a", "spark-b"):
        free = testbed.ssh(node, "free -b").stdout.splitlines()
        assert [line.split()[1:] for line in free[1:]] == real_free  # what the real GB10's free -b printed
        total = re.search(r"^MemTotal:\s+(\d+) kB", testbed.ssh(node, "cat /proc/meminfo").stdout, re.MULTILINE)
        assert total and 119 < int(total.group(1)) / 1024 ** 2 < 122
        disk = testbed.ssh(node, "df -h ~/.cache/huggingface").stdout.splitlines()
        assert disk[0] == "Filesystem      Size  Used Avail Use% Mounted on"
        assert disk[1].split()[:2] == ["/dev/nvme0n1p2", "3.7T"] and disk[1].endswith(" /")
        gpu = testbed.ssh(node, "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader").stdout
        assert gpu == "NVIDIA GB10, [N/A]\n"


def test_memory_check_counts_the_draft_and_fails_when_memory_is_taken(testbed) -> None:
    with models_away(testbed, ("spark-a", "spark-b")):
        healthy = findings(testbed, "memory")
        for node in ("spark-a", "spark-b"):
            row = healthy[("memory.available", node)]
            assert row["status"] == "OK" and f"needs {NEED_GIB:.1f} GiB" in row["detail"], row
            assert "MemAvailable 115.5 GiB" in row["detail"]
        testbed.fault("memory-low", node="spark-b", gib=NEED_GIB - 1)  # enough without the draft, not with it
        short = findings(testbed, "memory")
        row = short[("memory.available", "spark-b")]
        assert row["status"] == "FAIL" and f"MemAvailable {NEED_GIB - 1:.1f} GiB" in row["detail"], row
        assert "stop other GPU work or pick a smaller profile" in row["detail"]
        assert short[("memory.available", "spark-a")]["status"] == "OK"
        testbed.heal()
        testbed.fault("memory-low", node="spark-b", gib=NEED_GIB + 1)  # enough, but page cache holds MemFree down
        tight = findings(testbed, "memory")[("memory.available", "spark-b")]
        assert tight["status"] == "WARN" and "drop_caches" in tight["fix"], tight
        testbed.heal()
        assert findings(testbed, "memory")[("memory.available", "spark-b")]["status"] == "OK"


def test_disk_check_fails_when_the_download_does_not_fit(testbed) -> None:
    with models_away(testbed, ("spark-b",)):
        roomy = findings(testbed, "models.disk")[("models.disk", "spark-b")]
        assert roomy["status"] == "OK" and f"{DOWNLOAD_GIB:.2f} GiB to download" in roomy["detail"], roomy
        assert float(roomy["detail"].split(" GiB free")[0]) > 3000  # a 3.7T NVMe
        testbed.fault("disk-low", node="spark-b", gib=100)
        full = findings(testbed, "models.disk")[("models.disk", "spark-b")]
        assert full["status"] == "FAIL" and full["detail"] == f"100.00 GiB free, {DOWNLOAD_GIB:.2f} GiB to download"
        assert "free disk space under the HF cache on spark-b" in full["fix"]
        testbed.heal()
        testbed.fault("disk-low", node="spark-b", gib=DOWNLOAD_GIB + 8)
        enough = findings(testbed, "models.disk")[("models.disk", "spark-b")]
        assert enough["status"] == "OK" and enough["detail"].startswith(f"{DOWNLOAD_GIB + 8:.1f} GiB free"), enough


def nothing_started(bed) -> bool:
    return all("trtllm-multinode" not in bed.exec(node, "docker ps -a --format '{{.Names}}'").stdout
               for node in ("spark-a", "spark-b"))


def test_launch_refuses_a_node_without_the_memory(stopped, sparkpair) -> None:
    stopped.fault("memory-low", node="spark-b", gib=4)  # below the need with or without the models cached
    started = time.monotonic()
    run = sparkpair("launch", "--timeout", "60")
    assert run.code == 1, run.text
    assert "memory.available" in run.out and "MemAvailable 4.0 GiB" in run.out, run.text
    assert "launch-critical check(s) FAIL; nothing was started" in run.err
    assert time.monotonic() - started < 20 and nothing_started(stopped)


def test_launch_refuses_a_node_the_models_do_not_fit_on(stopped, sparkpair) -> None:
    with models_away(stopped, ("spark-b",)):
        stopped.fault("disk-low", node="spark-b", gib=100)
        run = sparkpair("launch", "--timeout", "60")
        assert run.code == 1, run.text
        assert "models.disk" in run.out and f"100.00 GiB free, {DOWNLOAD_GIB:.2f} GiB to download" in run.out
        assert "launch-critical check(s) FAIL; nothing was started" in run.err and nothing_started(stopped)
