"""Every doctor check, in report order, and which of them a launch cannot start without."""

from __future__ import annotations

from sparkpair.checks import CheckFunction, engine, links, node, playbook, roce, selected

CHECKS: list[tuple[str, CheckFunction]] = [
    ("inventory", node.check_inventory),
    ("reach", node.check_reach),
    ("platform", node.check_platform),
    ("links", links.check_links),
    ("links", links.check_pair_links),
    ("links", roce.check_roce),
    ("path", links.check_path),
    ("trust", links.check_trust),
    ("docker", engine.check_docker),
    ("docker.container", engine.check_container),
    ("ports", engine.check_ports),
    ("models", engine.check_models),
    ("memory", node.check_memory),
    ("clock", node.check_clock),
]

# Judged from the inventory and the profile alone, after CHECKS, and never launch-critical: where the pair
# departs from NVIDIA's playbooks (INFO with the recorded reason, WARN without one).
DRIFT_CHECKS: list[tuple[str, CheckFunction]] = [("playbook", playbook.check_playbook)]

# A FAIL in any of these stops `sparkpair launch` before it touches a node. Left out: findings
# launch itself resolves (missing or unsynced models, a stale container of its own).
LAUNCH_CRITICAL = ("reach", "platform.gpu", "links.present", "links.carrier", "links.address", "links.mtu",
                   "links.mtu-match", "links.crossed", "links.roce", "path", "trust", "docker.daemon", "docker.group",
                   "docker.image", "docker.image-match", "docker.image-mode", "ports", "models.writable", "models.disk", "memory")


def is_launch_critical(check: str) -> bool:
    return selected(check, set(LAUNCH_CRITICAL))


# Every check id doctor can report (--deep's too), for `--only`: tests/unit/test_runbook_coverage.py fails while
# this and the ids the checks emit differ.
CHECK_IDS: tuple[str, ...] = (
    "inventory.valid", "inventory.port-names", "inventory.twin-subnets", "reach.ssh", "reach.sudo", "reach.same-user",
    "platform.dgx-os",
    "platform.gpu", "platform.driver-match", "links.present", "links.carrier", "links.speed", "links.address",
    "links.mtu", "links.persistent", "links.rdma", "links.roce", "links.mtu-match", "links.crossed", "path.ping",
    "path.mtu", "trust.ssh", "docker.group", "docker.daemon", "docker.nvidia-runtime", "docker.image",
    "docker.image-match", "docker.image-mode", "docker.container", "ports.serving", "ports.sshd", "models.present",
    "models.match", "models.hub", "models.writable", "models.disk", "models.draft-record", "models.token",
    "memory.available", "clock.skew", "playbook.image", "playbook.env", "playbook.flags", "playbook.model",
    "playbook.addressing", "deep.mpi", "deep.allreduce", "deep.token", "deep.bandwidth", "deep.nccl", "deep.cleanup",
)
GROUPS: tuple[str, ...] = tuple(dict.fromkeys(check.split(".")[0] for check in CHECK_IDS))


def unknown_selection(only: set[str]) -> list[str]:
    """One line per --only entry that is neither a check id nor a group, with the closest known names."""
    import difflib

    known = [*GROUPS, *CHECK_IDS]
    lines = []
    for entry in sorted(only):
        if entry in known:
            continue
        close = difflib.get_close_matches(entry, known, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        lines.append(f"--only: no check or group {entry!r}; {hint}groups: {', '.join(GROUPS)} (or a check id, "
                     "docs/runbooks.md)")
    return lines
