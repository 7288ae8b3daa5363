"""The lock on the simulated pair (issue 27): launch writes it; `launch --locked` refuses a new image under the
same name on one node and a same-size change to one model file, naming the node, the field and both values,
and starts when nothing changed; `sparkpair diff` shows a planted kernel string and MTU first and nothing on a
healthy pair; the bundle holds the lock and the diff. One launch is shared by the module."""

from __future__ import annotations

import json
import re
import tarfile

import pytest
from conftest import ensure_networked, run_sparkpair

MODEL = "nvidia/Qwen3-235B-A22B-FP4"
SNAPSHOTS = f"/home/nvidia/.cache/huggingface/hub/models--{MODEL.replace('/', '--')}/snapshots"
HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# Flips the first byte of FILE's blob in place: same size, and the mtime put back (only the ctime tells).
FLIP = ("import os, sys; p = os.path.realpath(sys.argv[1]); s = os.stat(p); f = open(p, 'r+b'); b = f.read(1); "
        "f.seek(0); f.write(bytes([b[0] ^ 0xFF])); f.close(); os.utime(p, ns=(s.st_atime_ns, s.st_mtime_ns)); print(p)")


@pytest.fixture(scope="module")
def locked_pair(testbed, tmp_path_factory):
    """A networked pair serving the default profile, launched once with its lock at a path of the module's."""
    ensure_networked(testbed)
    lock = tmp_path_factory.mktemp("lock") / "sparkpair.lock"
    run_sparkpair(testbed.inventory, "stop")
    launched = run_sparkpair(testbed.inventory, "launch", "--timeout", "120", "--lock", lock)
    assert launched.code == 0, launched.text
    assert f"lock written: {lock} (spark-a, spark-b)" in launched.err
    yield testbed, lock
    run_sparkpair(testbed.inventory, "stop")


def sparkpair(bed, *args):
    return run_sparkpair(bed.inventory, *args)


def test_launch_writes_the_lock_and_launch_locked_starts_when_nothing_changed(locked_pair) -> None:
    bed, lock = locked_pair
    data = json.loads(lock.read_text())
    assert data["profile"] == "qwen3-235b" and set(data["nodes"]) == {"spark-a", "spark-b"}
    for node in data["nodes"].values():
        assert node["image_id"].startswith("sha256:") and node["runtime_version"] == "1.3.0rc12"
        assert (node["driver"], node["cuda"]) == ("580.95.05", "13.0") and node["kernel"]
        assert node["mtu"] == {"enp1s0f1np1": "9000", "enP2p1s0f1np1": "9000"}
        assert node["environment"]["NCCL_IB_HCA"] and set(node["rendered"]) >= {"container.env"}
        files = node["models"][MODEL]["files"]
        assert files and all(HASH.fullmatch(value) for value in files.values()), files
    assert sparkpair(bed, "stop").code == 0
    started = sparkpair(bed, "launch", "--locked", "--lock", lock, "--timeout", "120")
    assert started.code == 0 and "ready in" in started.out, started.text
    assert "drift from" not in started.err and "refused" not in started.err


def test_a_new_image_under_the_same_name_on_one_node_makes_launch_locked_refuse(locked_pair) -> None:
    bed, lock = locked_pair
    locked_id = json.loads(lock.read_text())["nodes"]["spark-b"]["image_id"]
    bed.fault("image-mismatch", node="spark-b")
    found_id = bed.exec("spark-b", "docker image inspect -f '{{.Id}}' sparkpair/trtllm-sim:1.3.0rc12").stdout.strip()
    assert found_id != locked_id
    refused = sparkpair(bed, "launch", "--locked", "--lock", lock, "--timeout", "60")
    assert refused.code == 1, refused.text
    assert f"spark-b: image_id: locked {locked_id}, found {found_id}; fix: " in refused.err
    assert "spark-a: image_id" not in refused.err
    assert "launch --locked refused: 1 difference(s)" in refused.err and "nothing was changed" in refused.err
    assert "starting:" not in refused.text


def test_a_same_size_change_to_one_model_file_makes_launch_locked_refuse_naming_it(locked_pair) -> None:
    bed, lock = locked_pair
    locked_hash = json.loads(lock.read_text())["nodes"]["spark-a"]["models"][MODEL]["files"]["config.json"]
    path = f"{SNAPSHOTS}/*/config.json"
    size = bed.exec("spark-a", f"stat -L -c %s {path}").stdout
    blob = bed.exec("spark-a", f"python3 -c \"{FLIP}\" {path}", user="nvidia").stdout.strip()
    try:
        assert bed.exec("spark-a", f"stat -L -c %s {path}").stdout == size
        refused = sparkpair(bed, "launch", "--locked", "--lock", lock, "--timeout", "60")
        assert refused.code == 1, refused.text
        assert f"spark-a: model {MODEL} file config.json: locked {locked_hash}, found content hashes to " in refused.err
        assert "spark-b: model" not in refused.err
    finally:
        bed.exec("spark-a", f"python3 -c \"{FLIP}\" {blob}", user="nvidia")
    assert sparkpair(bed, "diff", "--lock", lock).code == 0


def test_diff_shows_a_planted_kernel_and_mtu_first_and_nothing_on_a_healthy_pair(locked_pair) -> None:
    bed, lock = locked_pair
    healthy = sparkpair(bed, "diff", "--json")
    assert healthy.code == 0 and json.loads(healthy.out)["differing"] == 0, healthy.text
    assert sparkpair(bed, "diff", "--lock", lock).code == 0
    bed.fault("kernel-string", node="spark-b")
    bed.fault("mtu-mismatch", node="spark-b")
    kernel = bed.exec("spark-a", "uname -r").stdout.strip()
    planted = sparkpair(bed, "diff", "--json")
    assert planted.code == 1
    rows = json.loads(planted.out)["fields"]
    assert [(row["field"], row["values"]) for row in rows[:2]] == [
        ("kernel", {"spark-a": kernel, "spark-b": "6.11.0-1099-nvidia-drifted"}),
        ("mtu enp1s0f1np1", {"spark-a": "9000", "spark-b": "1500"})]
    assert all(row["same"] for row in rows[2:])
    text = sparkpair(bed, "diff")
    assert text.out.splitlines()[1].startswith("≠ kernel") and "2 field(s) differ" in text.out
    against = sparkpair(bed, "diff", "--lock", lock)
    assert against.code == 1 and "spark-b: kernel: locked " in against.out and "spark-a: kernel" not in against.out


def test_the_bundle_holds_the_lock_and_the_diff(locked_pair, tmp_path) -> None:
    bed, lock = locked_pair
    out = tmp_path / "bundle.tar.gz"
    run = sparkpair(bed, "bundle", "--out", out, "--lock", lock)
    assert run.code == 0, run.text
    with tarfile.open(out) as archive:
        members = {member.name.split("/", 1)[1]: member for member in archive.getmembers()}
        assert {"sparkpair.lock", "diff.json", "diff-lock.json"} <= set(members)
        held = json.loads(archive.extractfile(members["sparkpair.lock"]).read())  # type: ignore[union-attr]
        pair = json.loads(archive.extractfile(members["diff.json"]).read())  # type: ignore[union-attr]
    assert held["nodes"] == json.loads(lock.read_text())["nodes"]
    assert pair["nodes"] == ["spark-a", "spark-b"] and pair["differing"] == 0
