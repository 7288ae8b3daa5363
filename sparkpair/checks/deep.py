"""doctor --deep, the checks: what the MPI jobs across both nodes showed, judged.

The jobs themselves (where they run and how) are in `mpijobs`; they come back as a `DeepRun`,
and these checks are pure functions of it and the facts, like every other doctor check.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from sparkpair.checks import CheckFunction, Facts, Finding, fail, ok, skip, warn
from sparkpair.probes import ProbeFailure

MARK = "SPARKPAIR-DEEP"            # the probe program's stage lines (sparkpair/data/mpi_probe.py)
SUFFIX = "-doctor"                 # the short-lived containers' name: the engine's plus this
NCCL_FLOOR_GBS = 21.875            # NVIDIA's cluster script warns below this all_gather bus bandwidth
NCCL_ARGS = ("-b", "1G", "-e", "1G", "-f", "2")   # 1 GiB compares with the floor without 16 GiB of memory
BANDWIDTH_FLOOR_MBS = 250.0        # about 2 Gb/s: slower is a 1 GbE or Wi-Fi path, not a QSFP twin
LATENCY_CEILING_US = 50_000.0      # 50 ms: a broken or wireless path (a loaded veth pair shows ms)
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
                stages[stage] = json.loads(value)
            except ValueError:
                continue
    return stages


def parse_bus_bandwidth(text: str) -> float | None:
    """nccl-tests' summary line `# Avg bus bandwidth    : 23.4567` in GB/s; None when absent."""
    match = re.search(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.]+)", text, re.MULTILINE)
    return float(match.group(1)) if match else None


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


def _not_run(check: str, run: DeepRun) -> Finding | None:
    """The row of a deep check whose job did not run (blocked: SKIP; failed to start: FAIL for deep.mpi)."""
    if run.blocked:
        return skip(check, "pair", run.blocked)
    if run.error:
        return fail(check, "pair", run.error) if check == "deep.mpi" else skip(check, "pair", "needs deep.mpi")
    if check != "deep.mpi" and "hosts" not in run.stages:
        return skip(check, "pair", "needs deep.mpi")
    return None


def _hostnames(facts: Facts) -> dict[str, str]:
    """Node name -> the hostname its rank should report (the identity probe's, else the node name)."""
    names = {}
    for name, node in facts.nodes.items():
        identity = node.get("identity")
        names[name] = name if identity is None or isinstance(identity, ProbeFailure) else identity.hostname
    return names


def check_mpi(facts: Facts, run: DeepRun) -> list[Finding]:
    """Proves mpirun starts a rank on each node inside the engine container (launch's hostfile, env, agent)."""
    findings = [fail("deep.cleanup", "pair", f"short-lived containers not fully removed: {run.cleanup}",
                     f"docker rm -f {facts.inventory.container.name}{SUFFIX} (on the node named)")] \
        if run.cleanup else []
    if (row := _not_run("deep.mpi", run)) is not None:
        return [row, *findings]
    hosts = run.stages.get("hosts")
    if hosts is None:
        return [fail("deep.mpi", "pair", f"no rank answered: {_why(run)}"), *findings]
    answered = [rank["host"] for rank in sorted(hosts, key=lambda r: r["rank"])]
    missing = [name for name, host in _hostnames(facts).items() if host not in answered]
    if missing:
        return [fail("deep.mpi", "pair", f"only {', '.join(answered)} answered; no rank on {', '.join(missing)}"),
                *findings]
    ranks = ", ".join(f"rank {i} {host}" for i, host in enumerate(answered))
    return [ok("deep.mpi", "pair", f"{ranks} answered ({run.where})"), *findings]


def check_allreduce(facts: Facts, run: DeepRun) -> list[Finding]:
    """Proves a scalar and a 4 MiB vector allreduce between the ranks give the exact sum."""
    if (row := _not_run("deep.allreduce", run)) is not None:
        return [row]
    result = run.stages.get("allreduce")
    if result is None:
        return [fail("deep.allreduce", "pair", f"the allreduce did not finish: {_why(run)}")]
    mib = result["ints"] * 4 / 2 ** 20
    if result["sum"] == result["expected"] and result["wrong"] == 0:
        return [ok("deep.allreduce", "pair", f"sum {result['sum']} as expected; {mib:g} MiB vector exact")]
    return [fail("deep.allreduce", "pair", f"sum {result['sum']}, expected {result['expected']}; "
                                           f"{result['wrong']} of {result['ints']} vector entries wrong")]


def check_token(facts: Facts, run: DeepRun) -> list[Finding]:
    """Proves both ranks read the same HF token through HF_TOKEN_PATH, the one this machine has (by sha256)."""
    if (row := _not_run("deep.token", run)) is not None:
        return [row]
    ranks = run.stages.get("token") or []
    unset = [r["host"] for r in ranks if not r.get("env")]
    if unset:
        return [fail("deep.token", "pair", f"HF_TOKEN_PATH is not set in the rank on {', '.join(unset)} "
                                           "(mpirun did not forward it)")]
    digests = {r["host"]: r.get("sha256") for r in ranks}
    holders = [host for host, digest in digests.items() if digest]
    if not holders:
        return [skip("deep.token", "pair", "no HF token on this machine or on the nodes") if run.operator_sha256
                is None else warn("deep.token", "pair", "no token file on the nodes yet; sparkpair launch copies "
                                  "this machine's token to both", "sparkpair launch")]
    if len(holders) < len(digests):
        lacking = ", ".join(h for h in digests if h not in holders)
        return [fail("deep.token", "pair", f"the rank on {lacking} has no token ({ranks[0].get('path')}); "
                                           f"{', '.join(holders)} has one")]
    if len(set(digests.values())) > 1:
        return [fail("deep.token", "pair", "the ranks read different tokens (sha256 differs between the nodes)")]
    if run.operator_sha256 not in (None, *digests.values()):
        return [warn("deep.token", "pair", "both ranks read the same token, but not this machine's "
                                           "(sparkpair launch replaces it)", "sparkpair launch")]
    source = "this machine's" if run.operator_sha256 else "no token on this machine to compare"
    return [ok("deep.token", "pair", f"both ranks read the same token from HF_TOKEN_PATH (sha256 equal; "
                                     f"{source}; never shown)")]


def check_bandwidth(facts: Facts, run: DeepRun) -> list[Finding]:
    """Reports point-to-point bandwidth and latency between the ranks; warns only on 1 GbE-like values."""
    if (row := _not_run("deep.bandwidth", run)) is not None:
        return [row]
    result = run.stages.get("bandwidth")
    if result is None:
        return [warn("deep.bandwidth", "pair", f"the bandwidth test did not finish: {_why(run)}")]
    mbs, us = result["bandwidth_mbs"], result["latency_us"]
    detail = (f"{mbs:.0f} MB/s ({result['message_bytes'] >> 20} MiB messages), {us:.1f} µs one-way "
              f"(8-byte ping-pong), rank 0 -> rank 1 over {', '.join(facts.inventory.head.links)}")
    if mbs < BANDWIDTH_FLOOR_MBS or us > LATENCY_CEILING_US:
        return [warn("deep.bandwidth", "pair", detail + ": a 1 GbE or Wi-Fi path, not a QSFP twin")]
    return [ok("deep.bandwidth", "pair", detail)]


def check_nccl(facts: Facts, run: DeepRun) -> list[Finding]:
    """Proves NCCL all_gather between the ranks reaches NVIDIA's 21.875 GB/s bus-bandwidth floor."""
    if (row := _not_run("deep.nccl", run)) is not None:
        return [row]
    if run.nccl_skip:
        return [skip("deep.nccl", "pair", run.nccl_skip)]
    bandwidth = parse_bus_bandwidth(run.nccl)
    if bandwidth is None:
        return [fail("deep.nccl", "pair", f"all_gather_perf gave no bus bandwidth: {telling(run.nccl)}")]
    detail = f"all_gather_perf {' '.join(NCCL_ARGS)}: avg bus bandwidth {bandwidth:g} GB/s"
    if bandwidth < NCCL_FLOOR_GBS:
        return [warn("deep.nccl", "pair", f"{detail}, under NVIDIA's {NCCL_FLOOR_GBS} GB/s floor")]
    return [ok("deep.nccl", "pair", f"{detail} (floor {NCCL_FLOOR_GBS} GB/s)")]


DEEP_CHECKS = (("deep.mpi", check_mpi), ("deep.allreduce", check_allreduce), ("deep.token", check_token),
               ("deep.bandwidth", check_bandwidth), ("deep.nccl", check_nccl))


def deep_checks(run: DeepRun) -> list[tuple[str, CheckFunction]]:
    """The deep checks bound to one run, in report order, for run_checks."""
    return [(check_id, functools.partial(function, run=run)) for check_id, function in DEEP_CHECKS]
