"""The inventory file sparkpair reads to drive the simulated pair (written by `up`)."""
from __future__ import annotations

from layout import (CLUSTER_MTU, CONTAINER_SSHD_PORT, IMAGE_TAG, INVENTORY, KNOWN_HOSTS, NODES,
                    OPERATOR_KEY, SERVING_PORT, USER)


def render() -> str:
    """The inventory as YAML text (plain scalars only, so no YAML library is needed)."""
    lines = [
        "# Simulated DGX Spark pair (scripts/testbed up); see docs/testbed.md.",
        "cluster:",
        "  name: sim-pair",
        f"  user: {USER}",
        f"  ssh_key: {OPERATOR_KEY}",
        f"  known_hosts: {KNOWN_HOSTS}",
        f"  mtu: {CLUSTER_MTU}",
        "nodes:",
    ]
    for node in NODES:
        lines += [f"  - name: {node.name}", f"    host: {node.mgmt_ip}", "    port: 22", "    links:"]
        lines += [f"      {twin}: {address}" for twin, address in node.links.items()]
    lines += [
        "container:",
        f"  image: {IMAGE_TAG}",
        "  name: trtllm-multinode",
        "  mpi_transport: exec",
        f"  sshd_port: {CONTAINER_SSHD_PORT}",
        "  hf_cache: ~/.cache/huggingface",
        "server:",
        f"  port: {SERVING_PORT}",
        "models:",
        "  # The stand-in engine's synthetic models are a few MB, not 130 GB: say so, so that doctor's",
        "  # memory and disk checks measure this pair truthfully before anything is downloaded.",
    ]
    for profile in ("qwen3-235b", "gpt-oss-120b", "llama-3.3-70b"):
        lines.append(f"  {profile}: {{target_gib: 0.01, draft_gib: 0.01, headroom_gib: 2.0}}")
    return "\n".join(lines) + "\n"


def write() -> None:
    """Write the inventory file."""
    INVENTORY.parent.mkdir(parents=True, exist_ok=True)
    INVENTORY.write_text(render())
