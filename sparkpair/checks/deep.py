"""doctor --deep, the checks: what the MPI jobs across every node showed, judged (rows under `Facts.whole`).

The jobs themselves (where they run and how) are in `engine.mpijobs`; they come back as a `DeepRun`,
and these checks are pure functions of it and the facts, like every other doctor check.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from sparkpair import boundedjson
from sparkpair.checks import CheckFunction, Facts, Finding, Status, fail, ok, roce, skip, warn
from sparkpair.checks.bandwidth import HEALTHY_BUSBW_GBS, judge_bus
from sparkpair.checks.nccltests import IB, SOCKET, NcclRun, parse_nccl_run
from sparkpair.probes import host

MARK = "SPARKPAIR-DEEP"            # the probe program's stage lines (sparkpair/data/mpi_probe.py)
SUFFIX = "-doctor"                 # the short-lived containers' name: the engine's plus this
# all_gather_perf of 1 GiB, as a real GB10 pair was measured (tests/fixtures/rdma/all_gather_perf__1:
# both RoCE twins, busbw 19.73/20.80 GB/s at 1 GiB, 21.40 averaged over 1-4 GiB; after re-cabling
# without a reboot the same pair gave 2.82). One GiB keeps a degraded run inside --timeout.
NCCL_ARGS = ("-b", "1G", "-e", "1G", "-f", "2", "-g", "1")
NCCL_DEBUG = ("NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,NET")   # what NCCL chose, in its own words
BANDWIDTH_FLOOR_MBS = 250.0        # about 2 Gb/s: slower is a 1 GbE or Wi-Fi path, not a QSFP twin
LATENCY_CEILING_US = 50_000.0      # 50 ms: a broken or wireless path (a loaded veth pair shows ms)
MPIRUN_WARNING = re.compile(r"^\[[^\]\s]+:\d+\] Warning: ")   # e.g. a -x variable the container does not set
TELLING = re.compile(r"denied|refused|fail|error|unable|timed out|no route|not found|cannot|could not|"
                     r"verification", re.IGNORECASE)


@dataclass(frozen=True)
class DeepRun:
    """What the deep jobs showed: where they ran, each stage rank 0 reported, and what went wrong."""

    where: str = ""                  # how the jobs ran (for the report); empty when they did not
    blocked: str = ""                # why they could not run at all (SKIP rows)
    error: str = ""                  # why they failed to start (FAIL rows), e.g. docker run refused
    exit_code: int | None = None
    timed_out: bool = False
    stages: dict[str, Any] = field(default_factory=dict)
    tail: str = ""                   # the last lines of mpirun's output
    operator_sha256: str | None = None
    nccl: str = ""                   # all_gather_perf output
    nccl_skip: str = ""              # why all_gather_perf did not run
    cleanup: str = ""                # what removing the short-lived containers failed with
    timeout: float = 60.0


def parse_stages(text: str) -> dict[str, Any]:
    """Stage name -> value from the probe's `SPARKPAIR-DEEP <stage> <json>` lines (others ignored)."""
    stages = {}
    for line in text.splitlines():
        mark, _, rest = line.strip().partition(" ")
        stage, _, value = rest.partition(" ")
        if mark == MARK and stage:
            try:
                stages[stage] = boundedjson.loads(value)
            except ValueError:
                continue
    return stages


def telling(text: str, lines: int = 3) -> str:
    """The telling lines of mpirun's output (errors first, else the last lines), for a FAIL's detail."""
    kept = [" ".join(line.split()) for line in text.splitlines()
            if line.strip() and not line.startswith(MARK) and line.strip("- ")]
    errors = [line for line in kept if TELLING.search(line)]
    return " | ".join(errors[:lines] or kept[-lines:])[:400]


def _why(run: DeepRun) -> str:
    if run.timed_out:
        return f"timed out after {run.timeout:g} s" + (f" ({run.tail})" if run.tail else "")
    return f"mpirun exited {run.exit_code}" + (f": {run.tail}" if run.tail else "")


def _not_run(check: str, run: DeepRun, whole: str) -> Finding | None:
    """The row of a deep check whose job did not run (blocked: SKIP; failed to start: FAIL for deep.mpi)."""
    if run.blocked:
        return skip(check, whole, run.blocked)
    if run.error:
        return fail(check, whole, run.error) if check == "deep.mpi" else skip(check, whole, "needs deep.mpi")
    if check != "deep.mpi" and "hosts" not in run.stages:
        return skip(check, whole, "needs deep.mpi")
    return None


def hostnames(facts: Facts) -> dict[str, str]:
    """Node name -> the hostname its rank should report (the identity probe's, else the node name)."""
    names = {}
    for name, node_facts in facts.nodes.items():
        identity = node_facts.value(host.IDENTITY)
        names[name] = name if identity is None else identity.hostname
    return names


def check_mpi(facts: Facts, run: DeepRun) -> list[Finding]:
    """Proves mpirun starts a rank on each node inside the engine container (launch's hostfile, env, agent)."""
    findings = [fail("deep.cleanup", facts.whole, f"short-lived containers not fully removed: {run.cleanup}",
                     f"docker rm -f {facts.inventory.container.name}{SUFFIX} (on the node named)")] \
        if run.cleanup else []
    if (row := _not_run("deep.mpi", run, facts.whole)) is not None:
        return [row, *findings]
    hosts = run.stages.get("hosts")
    if hosts is None:
        return [fail("deep.mpi", facts.whole, f"no rank answered: {_why(run)}"), *findings]
    answered = [rank["host"] for rank in sorted(hosts, key=lambda r: r["rank"])]
    missing = [name for name, host in hostnames(facts).items() if host not in answered]
    if missing:
        return [fail("deep.mpi", facts.whole, f"only {', '.join(answered)} answered; no rank on {', '.join(missing)}"),
                *findings]
    ranks = ", ".join(f"rank {i} {host}" for i, host in enumerate(answered))
    return [ok("deep.mpi", facts.whole, f"{ranks} answered ({run.where})"), *findings]


def check_allreduce(facts: Facts, run: DeepRun) -> list[Finding]:
    """Proves a scalar and a 4 MiB vector allreduce between the ranks give the exact sum."""
    if (row := _not_run("deep.allreduce", run, facts.whole)) is not None:
        return [row]
    result = run.stages.get("allreduce")
    if result is None:
        return [fail("deep.allreduce", facts.whole, f"the allreduce did not finish: {_why(run)}")]
    mib = result["ints"] * 4 / 2 ** 20
    if result["sum"] == result["expected"] and result["wrong"] == 0:
        return [ok("deep.allreduce", facts.whole, f"sum {result['sum']} as expected; {mib:g} MiB vector exact")]
    return [fail("deep.allreduce", facts.whole, f"sum {result['sum']}, expected {result['expected']}; "
                                           f"{result['wrong']} of {result['ints']} vector entries wrong")]


def check_token(facts: Facts, run: DeepRun) -> list[Finding]:
    """Proves every rank reads the same HF token through HF_TOKEN_PATH, the one this machine has (by sha256)."""
    two = len(facts.inventory.nodes) == 2
    ranks_word = "both ranks" if two else f"all {len(facts.inventory.nodes)} ranks"
    if (row := _not_run("deep.token", run, facts.whole)) is not None:
        return [row]
    ranks = run.stages.get("token") or []
    unset = [r["host"] for r in ranks if not r.get("env")]
    if unset:
        return [fail("deep.token", facts.whole, f"HF_TOKEN_PATH is not set in the rank on {', '.join(unset)} "
                                           "(mpirun did not forward it)")]
    digests = {r["host"]: r.get("sha256") for r in ranks}
    holders = [host for host, digest in digests.items() if digest]
    if not holders:
        return [skip("deep.token", facts.whole, "no HF token on this machine or on the nodes") if run.operator_sha256
                is None else warn("deep.token", facts.whole, "no token file on the nodes yet; sparkpair launch copies "
                                  f"this machine's token to {'both' if two else 'every node'}", "sparkpair launch")]
    if len(holders) < len(digests):
        lacking = ", ".join(h for h in digests if h not in holders)
        return [fail("deep.token", facts.whole, f"the rank on {lacking} has no token ({ranks[0].get('path')}); "
                                           f"{', '.join(holders)} has one")]
    if len(set(digests.values())) > 1:
        return [fail("deep.token", facts.whole, "the ranks read different tokens (sha256 differs between the nodes)")]
    if run.operator_sha256 not in (None, *digests.values()):
        return [warn("deep.token", facts.whole, f"{ranks_word} read the same token, but not this machine's "
                                           "(sparkpair launch replaces it)", "sparkpair launch")]
    source = "this machine's" if run.operator_sha256 else "no token on this machine to compare"
    return [ok("deep.token", facts.whole, f"{ranks_word} read the same token from HF_TOKEN_PATH (sha256 equal; "
                                     f"{source}; never shown)")]


def check_bandwidth(facts: Facts, run: DeepRun) -> list[Finding]:
    """Proves the figures between the ranks: MPI's point-to-point bandwidth and latency (a 1 GbE or Wi-Fi path
    warns), and NCCL's all_gather bus bandwidth against what the cabling should give, naming the likely cause of a
    shortfall from the facts doctor has (`checks.bandwidth`; when all_gather_perf ran over RoCE)."""
    if (row := _not_run("deep.bandwidth", run, facts.whole)) is not None:
        return [row]
    status, parts, fix = Status.OK, [], ""
    result = run.stages.get("bandwidth")
    if result is None:
        status, parts = Status.WARN, [f"the bandwidth test did not finish: {_why(run)}"]
    else:
        mbs, us = result["bandwidth_mbs"], result["latency_us"]
        parts.append(f"{mbs:.0f} MB/s ({result['message_bytes'] >> 20} MiB messages), {us:.1f} µs one-way "
                     f"(8-byte ping-pong), rank 0 -> rank 1 over {', '.join(facts.inventory.head.links)}")
        if mbs < BANDWIDTH_FLOOR_MBS or us > LATENCY_CEILING_US:
            status, parts[0] = Status.WARN, parts[0] + ": a 1 GbE or Wi-Fi path, not a QSFP twin"
    bus = judge_bus(facts, parse_nccl_run(run.nccl), hostnames(facts)) if run.nccl and not run.nccl_skip else None
    if bus is not None:
        parts.append(bus.detail)
        fix = bus.fix
        status = max(status, bus.status, key=[Status.OK, Status.WARN, Status.FAIL].index)
    verdict = {Status.OK: ok, Status.WARN: warn, Status.FAIL: fail}[status]
    return [verdict("deep.bandwidth", facts.whole, "; ".join(parts), *([fix] if fix and status is not Status.OK
                                                                        else []))]


def check_nccl(facts: Facts, run: DeepRun) -> list[Finding]:
    """Proves NCCL moves all_gather traffic over RoCE on both twins of every node, judged from NCCL's own INFO lines
    (the bus bandwidth is deep.bandwidth's)."""
    if (row := _not_run("deep.nccl", run, facts.whole)) is not None:
        return [row]
    if run.nccl_skip:
        return [skip("deep.nccl", facts.whole, run.nccl_skip)]
    expected = {name: fabric.hcas for name, fabric in roce.pair_fabric(facts).items() if fabric}
    return [judge_nccl(parse_nccl_run(run.nccl), expected, hostnames(facts), run.nccl, facts.whole)]


def judge_nccl(parsed: NcclRun, expected: dict[str, tuple[str, ...]], hostnames: dict[str, str],
               text: str = "", whole: str = "pair") -> Finding:
    """The verdict on one all_gather_perf run: the transport NCCL chose on each node (IB/RoCE or Socket) and the
    RDMA devices it used (both twins or one); the figure is shown, and judged by deep.bandwidth.

    expected: node -> the RDMA devices of its twins (NCCL_IB_HCA); hostnames: node -> its hostname."""
    node_of = {hostname: name for name, hostname in hostnames.items()}
    hosts = {node_of.get(host, host) or "a rank": net for host, net in parsed.hosts.items()}
    if parsed.bus_bandwidth is None:
        warnings = [w for net in parsed.hosts.values() for w in net.warnings]
        cause = f" (NCCL WARN: {warnings[0]})" if warnings else ""
        own = "\n".join(line for line in text.splitlines() if not MPIRUN_WARNING.match(line))
        return fail("deep.nccl", whole, f"all_gather_perf gave no bus bandwidth{cause}: {telling(own)}",
                    _gid_fix() if any("ibv_modify_qp" in w for w in warnings) else "")
    figure = (f"all_gather_perf {' '.join(NCCL_ARGS[:4])}: avg bus bandwidth {parsed.bus_bandwidth:g} GB/s "
              f"(a healthy GB10 pair: about {HEALTHY_BUSBW_GBS:g})")
    used = "; ".join(f"{name} {net.transport or 'unknown'}"
                     f"{' ' + '+'.join(net.ib_devices or net.socket_interfaces) if net.transport else ''}"
                     for name, net in sorted(hosts.items())) or "NCCL's INFO lines missing: transport not shown"
    sockets = sorted(name for name, net in hosts.items() if net.transport == SOCKET)
    if sockets:
        return fail("deep.nccl", whole, f"NCCL fell back to TCP sockets on {', '.join(sockets)} "
                                         f"(Using network Socket), not RoCE: {used}; {figure}",
                    _socket_fix(list(hosts.values())))
    short = {name: net.ib_devices for name, net in hosts.items()
             if net.transport == IB and name in expected and len(net.ib_devices) < len(expected[name])}
    if short:
        shown = "; ".join(f"{name} used {'+'.join(devices) or 'none'} of {'+'.join(expected[name])}"
                          for name, devices in sorted(short.items()))
        return fail("deep.nccl", whole, f"NCCL runs on one twin only ({shown}): about half the bandwidth; "
                                         f"{figure}",
                    "the other twin's RoCE port is down, has no RoCE v2 GID for its address, or NCCL_IB_HCA lists "
                    "one device: sparkpair doctor --only links (links.carrier, links.rdma, links.roce on both twins)")
    return ok("deep.nccl", whole, f"{used}; {figure} (deep.bandwidth judges it)")


def _socket_fix(nets: list[Any]) -> str:
    if any(net.ib_disabled for net in nets):
        return "NCCL_IB_DISABLE is set in the ranks' environment: remove it from container.env in the inventory"
    hca = next((net.ib_hca for net in nets if net.ib_hca), "")
    if any(net.ib_not_found for net in nets):
        return ("NCCL found no usable RDMA device in the container (NET/IB : No device found): the RDMA driver is "
                "not loaded, /dev/infiniband is not passed to the container (sparkpair passes it when the node has "
                f"it), or NCCL_IB_HCA{f' ({hca})' if hca else ''} names none of the node's devices: "
                "sparkpair doctor --only links.rdma,links.roce; ibv_devinfo inside the engine container")
    return "sparkpair doctor --only links.rdma,links.roce; then run the test by hand with NCCL_DEBUG=INFO"


def _gid_fix() -> str:
    return ("a RoCE GID the peer cannot reach: sparkpair doctor --only links.roce (the IPv4 RoCE v2 GID of each "
            "node; sparkpair sets NCCL_IB_GID_INDEX per node)")


DEEP_CHECKS = (("deep.mpi", check_mpi), ("deep.allreduce", check_allreduce), ("deep.token", check_token),
               ("deep.bandwidth", check_bandwidth), ("deep.nccl", check_nccl))


def deep_checks(run: DeepRun) -> list[tuple[str, CheckFunction]]:
    """The deep checks bound to one run, in report order, for run_checks."""
    return [(check_id, functools.partial(function, run=run)) for check_id, function in DEEP_CHECKS]
