"""Slow or stuck on the simulated pair: the launch watchdog, liveness beyond /health, the evidence bundle.

The faults are real behaviours of the stand-in engine (docs/testbed.md): `stall-at-nccl` drops NCCL's
socket handshakes on spark-b (both ranks stay alive, waiting in NCCL's bootstrap), `slow-load` puts
spark-b's GPU in HW slowdown (rank 1 loads its weights in about 90 s, reading the files and growing its
memory as it goes), `engine-wedged` stops spark-b's rank with SIGSTOP (/health keeps answering 200).
"""

from __future__ import annotations

import json
import re
import tarfile
import time
import uuid
from pathlib import Path

NODES = ("spark-a", "spark-b")
CONTAINER = "trtllm-multinode"
WIFI_NETPLAN = "/etc/netplan/90-wifi.yaml"
LOAD_LINE = re.compile(r"spark-b: rank 1 model load: ([\d.]+) MiB of ([\d.]+) MiB loaded \(\d+ %\), "
                       r"([\d.]+) MiB read from the model files")


def _nothing_runs(bed) -> None:
    for node in NODES:
        assert CONTAINER not in bed.exec(node, "docker ps -a --format '{{.Names}}'").stdout, node
        assert bed.exec(node, "pgrep -f '[t]rtllm-'", check=False).stdout.strip() == "", node


def test_stall_in_nccl_init_fails_early_tears_down_and_bundle_holds_both_nodes_without_secrets(
        stopped, sparkpair, tmp_path: Path) -> None:
    """launch --timeout 900 --stall-after nccl=15 with NCCL's handshakes dropped: fails within 120 s naming NCCL
    init, the lack of progress and the limit it was given, leaves nothing running; then the bundle holds both
    nodes' evidence and the ranks' logs, and neither the HF token given to the launch nor a Wi-Fi password in a
    node's netplan file is in it. (The default limit, 90 s, is test_watch.py's: waiting it out here cost a minute
    of the suite and proved nothing more.)"""
    canary = f"hf_SparkpairCanary{uuid.uuid4().hex}"
    stopped.fault("stall-at-nccl")
    started = time.monotonic()
    run = sparkpair("launch", "--timeout", "900", "--stall-after", "nccl=15", env={"HF_TOKEN": canary}, timeout=900)
    took = time.monotonic() - started
    assert run.code == 1, run.text
    assert took < 120, f"the stalled launch took {took:.0f} s"
    failed = next((line for line in run.err.splitlines() if "launch failed:" in line), run.err)
    assert "no progress for" in failed and "in NCCL init" in failed and "spark-b (rank 1)" in failed, failed
    assert "stall limit for NCCL init: 15 s" in failed, failed
    assert "--- last lines from spark-a:" in run.err and "--- last lines from spark-b:" in run.err
    assert "Model init total --" in run.err
    assert "cause startup.stalled:" in run.err and "it stopped in 'nccl'" in run.err
    assert "sparkpair bundle" in run.err
    _nothing_runs(stopped)

    wifi = f"WifiCanary{uuid.uuid4().hex}"
    stopped.exec("spark-b", f"printf 'network:\\n  wifis:\\n    wlP9s9:\\n      access-points:\\n        home:\\n"
                            f"          password: \"{wifi}\"\\n' > {WIFI_NETPLAN} && chmod 600 {WIFI_NETPLAN}")
    try:
        out = tmp_path / "evidence.tar.gz"
        bundle = sparkpair("bundle", "--out", str(out), env={"HF_TOKEN": "", "HF_TOKEN_PATH": "",
                                                            "HF_HOME": str(tmp_path / "hf-home")})
    finally:
        stopped.exec("spark-b", f"rm -f {WIFI_NETPLAN}")
    assert bundle.code == 0, bundle.text
    assert out.stat().st_mode & 0o777 == 0o600
    extracted = tmp_path / "extracted"
    with tarfile.open(out) as archive:
        archive.extractall(extracted, filter="data")
    files = {str(path.relative_to(extracted)).split("/", 1)[1]: path for path in extracted.rglob("*") if path.is_file()}
    for node in NODES:
        for part in ("versions/uname.txt", "versions/engine-image.txt", "versions/dgx-release.txt", "memory/meminfo.txt",
                     "network/ip-addr.json", "kernel/dmesg-nvrm-aer-oom.txt", "sparkpair/config/container.env",
                     "netplan/50-cloud-init.yaml"):
            assert f"{node}/{part}" in files, (node, part, sorted(files))
    assert "openmpi: 4.1" in files["spark-a/versions/engine-image.txt"].read_text()
    assert "Model init total --" in files["spark-a/logs/failed-launch/ranks/1/rank.0/stderr"].read_text()
    assert "[RANK 1]" in files["spark-b/logs/failed-launch/ranks/1/rank.1/stderr"].read_text()
    assert "spark-a/sparkpair/launch-state.json" in files and "doctor.json" in files
    assert "password: \"[REDACTED]\"" in files["spark-b/netplan/90-wifi.yaml"].read_text()
    for name, path in files.items():
        content = path.read_bytes()
        assert canary.encode() not in content, f"the HF token is in {name}"
        assert wifi.encode() not in content, f"the Wi-Fi password is in {name}"
    manifest = files["MANIFEST.txt"].read_text()
    assert all(name in manifest for name in files if name != "MANIFEST.txt")
    assert "spark-b/netplan/90-wifi.yaml" in manifest and "1 value of password" in manifest


def test_slow_load_succeeds_and_shows_load_progress_while_waiting(stopped, sparkpair) -> None:
    stopped.fault("slow-load")
    started = time.monotonic()
    run = sparkpair("launch", "--timeout", "600")
    assert run.code == 0, run.text
    assert time.monotonic() - started > 30, "slow-load did not slow the load"   # about 40 s; healthy, 10-20 s
    progress = [tuple(map(float, found.groups())) for found in map(LOAD_LINE.search, run.err.splitlines()) if found]
    assert len(progress) >= 3, run.err
    loaded, reads = [item[0] for item in progress], [item[2] for item in progress]
    assert loaded == sorted(loaded) and loaded[-1] > loaded[0], progress
    assert reads == sorted(reads) and reads[-1] > reads[0], progress
    assert all(item[0] <= item[1] * 1.5 for item in progress), progress
    assert "no progress for" not in run.err and "serving: " in run.out


def test_wedged_engine_is_not_serving_and_status_says_why(stopped, sparkpair) -> None:
    assert sparkpair("launch", "--timeout", "120").code == 0
    stopped.fault("engine-wedged")
    status = sparkpair("status")
    assert status.code == 1, status.text
    assert "state: wedged" in status.out and "serving" not in status.out.split("\n")[0]
    assert "rank stopped (process state T" in status.out and "on spark-b" in status.out
    assert "generation got no answer within 5 s" in status.out
    data = json.loads(sparkpair("status", "--json").out)
    assert data["state"] == "wedged" and data["health"] == "ok", data
    assert data["nodes"]["spark-b"]["rank_state"] == "stopped" and data["generation"] == "no answer within 5 s"
    assert "/health answers 200 but a one-token generation got no answer within 5 s" in data["reason"]
