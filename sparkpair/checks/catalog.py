"""Every doctor check, in report order, and which of them a launch cannot start without."""

from __future__ import annotations

from sparkpair.checks import CheckFunction, engine, known, links, node, playbook, roce, selected, training

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
    ("known", known.check_known),
    ("clock", node.check_clock),
    ("draft", training.check_training_image),
]

# Judged from the inventory and the profile alone, after CHECKS, and never launch-critical: where the pair
# departs from NVIDIA's playbooks (INFO with the recorded reason, WARN without one).
DRIFT_CHECKS: list[tuple[str, CheckFunction]] = [("playbook", playbook.check_playbook)]

# A FAIL in any of these stops `sparkpair launch` before it touches a node. Left out: findings
# launch itself resolves (missing or unsynced models, a stale container of its own).
LAUNCH_CRITICAL = ("reach", "platform.gpu", "links.present", "links.carrier", "links.address", "links.mtu",
                   "links.mtu-match", "links.crossed", "links.roce", "path", "trust", "docker.daemon", "docker.group",
                   "docker.image", "docker.image-match", "docker.image-mode", "ports", "models.writable", "models.disk", "memory",
                   "known")


def is_launch_critical(check: str) -> bool:
    return selected(check, set(LAUNCH_CRITICAL))
