#!/usr/bin/env python3
"""Where `sparkpair doctor`'s time goes: imports, inventory, SSH connect, and each node's probe batch.

Prints (1) the wall time of each client-side phase measured in this process, and (2) a timeline
of each node's probe batch: every probe's start and end relative to the batch start, measured on
the node itself (the probes run as doctor runs them, concurrently, each wrapped with a clock read).
Run on the simulated pair while nothing else uses it (it holds /tmp/sparkpair-pair.lock):

    .venv/bin/python scripts/bench/doctor_profile.py [-i INVENTORY] [--profile NAME]
"""

from __future__ import annotations

import argparse
import fcntl
import time

START = time.perf_counter()

DEFAULT_INVENTORY = "/var/lib/sparkpair-testbed/inventory.yaml"


def phase(name: str, since: float) -> float:
    now = time.perf_counter()
    print(f"{name:<28} {1000 * (now - since):7.1f} ms")
    return now


def timeline(connection: object, probes: list, timeout: float = 60.0) -> list[tuple[str, float, float]]:
    """Each probe's (label, start ms, end ms) relative to the batch start, read from the node's clock."""
    from sparkpair.probes import Probe, batch_script, parse_batch
    from sparkpair.transport import Shell

    timed = []
    for probe in probes:
        stamped = Shell.compose([Shell("sp_t0=$(date +%s%N)"), probe.command,
                                 Shell('r=$?; printf "\\n@@%s %s\\n" "$sp_t0" "$(date +%s%N)"; exit $r')], "; ")
        timed.append(Probe(probe.kind, probe.args, stamped, str, probe.sudo, probe.ok_codes, probe.waits))
    script = Shell.compose([Shell("printf '@@0 %s\\n' \"$(date +%s%N)\""), batch_script(timed)], "; ")
    result = connection.run(script, timeout=timeout)  # type: ignore[attr-defined]
    base = int(result.stdout.split("\n", 1)[0].split()[-1])
    raw = parse_batch(result.stdout.split("\n", 1)[1])
    rows = []
    for index, probe in enumerate(timed):
        stdout = raw.get(index, (0, "", ""))[1]
        marks = [line for line in stdout.splitlines() if line.startswith("@@")]
        if marks:
            begin, end = (int(v) for v in marks[-1][2:].split())
            rows.append((probe.label, (begin - base) / 1e6, (end - base) / 1e6))
    return sorted(rows, key=lambda row: row[2])


def serial_costs(connection: object, probes: list, repeats: int = 3, timeout: float = 120.0) -> list[tuple[str, float]]:
    """Each probe run alone, one after the other, `repeats` times: its mean wall time in ms on an otherwise
    idle node, about its CPU cost plus its own waits (what a probe costs the batch on a 2-core machine)."""
    from sparkpair.transport import Shell

    parts = []
    for index, probe in enumerate(probes):
        command = Shell("sudo -n sh -c {}", probe.command.text) if probe.sudo else probe.command
        loop = Shell.compose([Shell(f"s=$(date +%s%N); for k in $(seq {repeats}); do ( "), command,
                              Shell(f' ) >/dev/null 2>&1 </dev/null; done; echo "{index} $(( ($(date +%s%N) - s) / '
                                    f'{repeats * 1000} ))"')], "")
        parts.append(loop)
    result = connection.run(Shell.compose(parts, "\n"), timeout=timeout)  # type: ignore[attr-defined]
    costs = []
    for line in result.stdout.splitlines():
        index, _, micros = line.partition(" ")
        costs.append((probes[int(index)].label, int(micros) / 1000))
    return sorted(costs, key=lambda row: -row[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", default=DEFAULT_INVENTORY)
    parser.add_argument("--profile", default=None)
    parser.add_argument("--serial", action="store_true",
                        help="also run each probe alone on spark-a's side (the head), and print its cost")
    args = parser.parse_args()
    lock = open("/tmp/sparkpair-pair.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    mark = phase("python start to main", START)
    from sparkpair.inventory import read_inventory
    mark = phase("import inventory", mark)
    from sparkpair.engine import collect
    from sparkpair.transport import Pair, SshTarget
    mark = phase("import checks+transport", mark)
    inventory = read_inventory(args.inventory)
    mark = phase("read inventory", mark)
    cluster = inventory.cluster
    pair = Pair([SshTarget(n.name, n.host, n.port, cluster.user, cluster.ssh_key, cluster.known_hosts)
                 for n in inventory.nodes])
    pair.connect()
    mark = phase("connect both nodes", mark)
    profile = inventory.profile(args.profile)
    lines = pair.each(lambda c: timeline(c, collect.node_probes(inventory, inventory.node(c.name), profile)))
    phase("timed probe batch (both)", mark)
    for name, rows in lines.raise_failures().values.items():
        print(f"\n{name}: probe timeline on the node (ms from batch start)")
        for label, begin, end in rows:
            print(f"  {begin:7.1f} {end:7.1f} {end - begin:7.1f}  {label[:70]}")
    if args.serial:
        head = pair.head
        rows = serial_costs(head, collect.node_probes(inventory, inventory.node(head.name), profile))
        print(f"\n{head.name}: each probe alone, mean of 3 (ms)")
        for label, cost in rows:
            print(f"  {cost:7.1f}  {label[:70]}")
        print(f"  {sum(cost for _, cost in rows):7.1f}  all, one after the other")
    pair.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
