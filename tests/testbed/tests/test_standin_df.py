"""The df stand-in (standins/df): laid out exactly as the real df for every option it models, and the
node's disk shown as a Spark's NVMe partition. Runs in a private mount namespace (root needed)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from sparkpair_testbed import gb10
from sparkpair_testbed.layout import STANDINS_DIR

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                reason="needs root (a private mount namespace with tmpfs mounts)")
STANDIN = STANDINS_DIR / "df"
OPTIONS = ["", "-h", "-H", "-k", "-B1", "-BM", "-BK", "-BG", "-B1024", "-B512", "-P", "-Ph", "-T", "-hT", "-PT",
           "-B1 --output=avail", "-h --output=source,size,pcent,target", "--output=target,fstype,used", "-t tmpfs -h",
           "-x proc -h", "-a -h", "-i", "--output"]


def in_private_mounts(script: str) -> str:
    """Run SCRIPT (sh) in a private mount namespace; its stdout."""
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


USED = (0, 999, 12_288, 3_000_000, 10_400_000, 123_456_789)  # rounding cases of -h/-H/-B (tmpfs: real RAM)


def test_other_filesystems_show_exactly_as_the_real_df_shows_them() -> None:
    mounts = " ".join(f"/mnt/{i}" for i in range(len(USED)))
    setup = [f"mkdir -p /mnt/{i} && mount -t tmpfs -o size=20g sparkpair-test-{i} /mnt/{i}"
             + (f" && fallocate -l {used} /mnt/{i}/f" if used else "") for i, used in enumerate(USED)]
    compare = [f'a=$(df {option} {mounts} /proc /nonexistent 2>&1; echo "rc=$?"); '
               f'b=$({STANDIN} {option} {mounts} /proc /nonexistent 2>&1; echo "rc=$?"); '
               f'[ "$a" = "$b" ] || printf "DIFF %s\\n%s\\n%s\\n" "{option}" "$a" "$b"' for option in OPTIONS]
    out = in_private_mounts("mount -t tmpfs tmpfs /mnt && " + " && ".join(setup) + "\n" + "\n".join(compare))
    assert out == ""


def test_the_node_disk_shows_as_the_spark_nvme_with_the_fault_cap() -> None:
    script = f"""set -e
mount -t tmpfs tmpfs /run && mkdir -p /run/sparkpair-testbed
cat > {gb10.DISK_STATE} <<'EOF'
{gb10.disk_state()}EOF
{STANDIN} -h /
{STANDIN} -B1 --output=avail /var
{STANDIN} -h /proc
cat > {gb10.DISK_STATE} <<'EOF'
{gb10.disk_state(free_cap=40 * gb10.GIB)}EOF
{STANDIN} -B1 --output=size,used,avail,target /
{STANDIN} -h | grep -c nvme0n1p2
"""
    lines = in_private_mounts(script).splitlines()
    assert lines[0] == "Filesystem      Size  Used Avail Use% Mounted on"
    device, size, _, avail, _, target = lines[1].split()
    assert (device, size, target) == ("/dev/nvme0n1p2", "3.7T", "/") and avail.endswith("T")
    assert int(lines[3]) > 3 * 1024 ** 4  # /var lies on the node's disk too
    assert lines[5].split()[0] == "proc"  # other filesystems untouched
    total, used, free, target = lines[7].split()
    assert (int(total), int(free), target) == (gb10.DISK_BYTES, 40 * gb10.GIB, "/")
    assert int(used) == gb10.DISK_BYTES - gb10.DISK_RESERVED - 40 * gb10.GIB
    assert lines[8] == "1"  # listing every filesystem shows the disk once


def test_without_the_node_disk_the_root_shows_as_it_is() -> None:
    assert json.loads(gb10.disk_state())["free_cap"] is None
    out = in_private_mounts(f"mount -t tmpfs tmpfs /run && {STANDIN} -B1 --output=source,target /")
    assert "nvme0n1p2" not in out and out.splitlines()[1].endswith(" /")
