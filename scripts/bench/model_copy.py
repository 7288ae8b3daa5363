#!/usr/bin/env python3
"""How fast launch copies a model to the worker, against raw TCP on one twin measured in the same run.

On the simulated pair (needs root; holds the pair's lock /tmp/sparkpair-pair.lock while it measures):

1. makes a synthetic repo of N GiB (default 2) in a real hub layout on the head, with the stand-in
   `hf download` in a throwaway engine container (blob names are the real hashes of the content),
   and syncs it to disk (both simulated nodes share one kernel's dirty-page budget, two Sparks do not);
2. verifies it on the head (so the copy below is not mixed with the head's first hashing);
   warm-up: copies it to the worker once and removes it again, with the VM's free page reporting held
   (below), so the measured copy writes into memory the hypervisor backs already; the warm-up's own
   figure is printed too, `--no-warmup` skips it;
3. floor: the same bytes over one raw TCP connection on the first twin, sender `sendfile`, receiver
   reading into a buffer it drops (first byte to last); measured before and after the copy, the
   higher of the two kept (the harder floor to beat);
4. removes the repo from the worker and copies it the way `sparkpair launch` does by default
   (`modelsync.sync`, transport tcp: both twins, several streams per twin, chunks largest file first),
   the receiver verifying every file before it links it;
5. prints each twin's share of the bytes and, last:

   model copy: X MB/s over K streams on T twins; floor Y MB/s (raw TCP, one twin); ratio R; verify S s

   X is the transfer, first connection to the last byte written on the worker; S is the worker's
   verification apart (1 MB = 10^6 bytes). Exit 1 when the copy did not verify.

This VM (not a Spark) hands memory the guest frees back to its host (virtio free page reporting,
/sys/module/page_reporting): the next write to such a page faults on the host, several times slower
than a write to backed memory. Left on, a copy that starts a few seconds after memory was freed ran
at 557-648 MB/s, and the same copy at 1265-1400 MB/s with reporting held (the floor, which drops what
it receives, never writes new memory). A Spark's memory is always backed, so the script holds the
reporting (page_reporting_order above the largest free block) while it measures, and restores it.

Usage: .venv/bin/python scripts/bench/model_copy.py [--gib N] [--keep] [--no-warmup]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from sparkpair import report
from sparkpair.engine import modelsync
from sparkpair.inventory import Inventory, read_inventory
from sparkpair.probes import models
from sparkpair.transport import Pair, SshTarget

ROOT = Path(__file__).resolve().parents[2]
TESTBED = str(ROOT / "scripts" / "testbed")
LOCK = "/tmp/sparkpair-pair.lock"
HUB = "/home/nvidia/.cache/huggingface/hub"

FLOOR_RECEIVER = """import socket, sys, time
server = socket.socket()
server.bind((sys.argv[1], 0))
server.listen(1)
print(server.getsockname()[1], flush=True)
connection, _ = server.accept()
buffer, count, first = bytearray(4 << 20), 0, None
while True:
    got = connection.recv_into(buffer)
    if not got:
        break
    first = first or time.monotonic()
    count += got
print(count, time.monotonic() - first, flush=True)
"""
FLOOR_SENDER = """import glob, socket, sys
connection = socket.create_connection((sys.argv[2], int(sys.argv[3])), source_address=(sys.argv[1], 0))
for path in sorted(glob.glob(sys.argv[4] + "/*")):
    with open(path, "rb") as handle:
        connection.sendfile(handle)
connection.close()
"""


REPORTING_ORDER = Path("/sys/module/page_reporting/parameters/page_reporting_order")


@contextlib.contextmanager
def free_pages_kept() -> Iterator[str]:
    """Hold this VM's free page reporting (no free block is large enough to report) while inside; says
    what it did. Without the knob (a machine that is not such a VM) nothing changes."""
    try:
        before = REPORTING_ORDER.read_text().strip()
        orders = len(Path("/proc/buddyinfo").read_text().splitlines()[0].split()) - 4
        REPORTING_ORDER.write_text(f"{orders}\n")
    except (OSError, IndexError):
        yield "free page reporting: no knob here, nothing held"
        return
    try:
        yield f"free page reporting held (page_reporting_order {before} -> {orders}), restored after"
    finally:
        REPORTING_ORDER.write_text(f"{before}\n")


def node(name: str, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TESTBED, "exec", name, "--user", "nvidia", "--", *command], capture_output=True, text=True,
                          check=check)


def floor(inventory: Inventory, blobs: str) -> float:
    """Bytes per second of one raw TCP stream over the first twin, head to worker, data dropped on arrival."""
    twin, address = next(iter(inventory.head.links.items()))
    peer = str(inventory.worker.links[twin].ip)
    receiver = subprocess.Popen([TESTBED, "exec", inventory.worker.name, "--user", "nvidia", "--", "python3", "-c",
                                 FLOOR_RECEIVER, peer], stdout=subprocess.PIPE, text=True)
    assert receiver.stdout is not None
    port = receiver.stdout.readline().strip()
    node(inventory.head.name, "python3", "-c", FLOOR_SENDER, str(address.ip), peer, port, blobs)
    count, seconds = receiver.stdout.readline().split()
    receiver.wait(timeout=60)
    return int(count) / float(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=2.0, help="size of the synthetic repo (default 2)")
    parser.add_argument("--keep", action="store_true", help="leave the synthetic repo on both nodes")
    parser.add_argument("--no-warmup", action="store_true", help="measure the first copy (a cold VM's memory)")
    options = parser.parse_args()
    repo = f"sparkpair-bench/synthetic-{options.gib:g}g"
    repo_dir = f"{HUB}/{models.repo_dirname(repo)}"
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run([TESTBED, "up"], check=True, capture_output=True)
        path = subprocess.run([TESTBED, "inventory"], capture_output=True, text=True, check=True).stdout.strip()
        inventory = read_inventory(Path(path))
        setup = subprocess.run([sys.executable, "-m", "sparkpair", "-i", path, "setup-network", "--yes"],
                               capture_output=True, text=True, cwd=ROOT)
        if setup.returncode != 0:
            sys.exit(f"setup-network failed:\n{setup.stderr}")
        head, worker = inventory.head.name, inventory.worker.name
        made = node(head, "sh", "-c", f"docker run --rm -u $(id -u):$(id -g) -v {HUB}:/hub -e HF_HUB_CACHE=/hub "
                                      f"-e SIM_HF_MODEL_BYTES={int(options.gib * 2 ** 30)} {inventory.container.image} "
                                      f"hf download {repo} --quiet", check=False)
        if made.returncode != 0:
            sys.exit(f"making the synthetic repo failed:\n{made.stderr}")
        # Write the new repo to disk now. The simulated nodes share one kernel, hence one budget of dirty
        # pages: left dirty, the head's fresh N GiB would throttle the worker's writes to the disk's
        # writeback speed, which two real Sparks (each its own kernel and memory) never do to each other.
        node(head, "sync")
        node(worker, "rm", "-rf", repo_dir)
        cluster = inventory.cluster
        targets = [SshTarget(n.name, n.host, n.port, cluster.user, cluster.ssh_key, cluster.known_hosts)
                   for n in inventory.nodes]
        with Pair(targets) as pair, free_pages_kept() as held:
            print(held)
            modelsync.verify(pair.nodes[head], inventory, [repo], report.event, remove_bad=False)
            if not options.no_warmup:
                warm = modelsync.sync(pair, inventory, [repo], [head, worker], report.event,
                                      modelsync.ModelOptions("hub")).copies[0]
                print(f"warm-up copy: {warm.rate / 1e6:.0f} MB/s ({warm.bytes / 1e6:.0f} MB in {warm.seconds:.2f} s)")
                node(worker, "rm", "-rf", repo_dir)
                node(worker, "sync")
            floors = [floor(inventory, f"{repo_dir}/blobs")]
            synced = modelsync.sync(pair, inventory, [repo], [head, worker], report.event,
                                    modelsync.ModelOptions("hub"))
            floors.append(floor(inventory, f"{repo_dir}/blobs"))
        if not options.keep:
            for name in (head, worker):
                node(name, "rm", "-rf", repo_dir)
    copied = synced.copies[0]
    best = max(floors)
    for twin, count in copied.by_twin.items():
        print(f"{twin}: {count / 1e6:.0f} MB, {count / copied.bytes:.0%} of the bytes")
    print(f"floor runs: {', '.join(f'{value / 1e6:.0f}' for value in floors)} MB/s; copied {copied.bytes / 1e6:.0f} MB "
          f"in {copied.seconds:.2f} s; {len(copied.verified)} files verified, {len(copied.bad)} corrupt")
    twins_used = sum(1 for count in copied.by_twin.values() if count)
    print(f"model copy: {copied.rate / 1e6:.0f} MB/s over {copied.streams} streams on {twins_used} twins; "
          f"floor {best / 1e6:.0f} MB/s (raw TCP, one twin); ratio {copied.rate / best:.2f}; "
          f"verify {copied.verify_seconds:.1f} s")
    return 0 if copied.ok else 1


if __name__ == "__main__":
    sys.exit(main())
