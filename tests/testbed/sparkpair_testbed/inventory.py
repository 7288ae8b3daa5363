"""The inventory file sparkpair reads to drive the simulated pair (written by `up`), or the larger
shape `up --nodes N --topology T` made (shape.py): then a `topology:` line and every node's links."""
from __future__ import annotations

from .layout import (
    CLUSTER_MTU,
    CONTAINER_SSHD_PORT,
    HUB_URL,
    IMAGE_TAG,
    INVENTORY,
    KNOWN_HOSTS,
    NODES,
    OPERATOR_KEY,
    SERVING_PORT,
    USER,
    VLLM_IMAGE_TAG,
)
from .shape import load
from .triton_image import TRITON_IMAGE_TAG


def render() -> str:
    """The inventory as YAML text (plain scalars only, so no YAML library is needed)."""
    shape = load()
    lines = [
        "# Simulated DGX Spark pair (scripts/testbed up); see docs/testbed.md.",
        "cluster:",
        f"  name: sim-{shape.label}",
        f"  user: {USER}",
        f"  ssh_key: {OPERATOR_KEY}",
        f"  known_hosts: {KNOWN_HOSTS}",
        f"  mtu: {CLUSTER_MTU}",
    ]
    if shape.topology != "pair":
        lines[0] = f"# Simulated DGX Spark {shape.label} (scripts/testbed up --nodes {shape.count} --topology " \
                   f"{shape.topology}); see docs/testbed.md."
        lines.append(f"topology: {shape.topology}")
    lines.append("nodes:")
    for node in NODES:
        lines += [f"  - name: {node.name}", f"    host: {node.mgmt_ip}", "    port: 22", "    links:"]
        lines += [f"      {twin}: {address}" for twin, address in node.links.items()]
    lines += [
        "container:",
        f"  image: {IMAGE_TAG}",
        "  mpi_transport: exec",
        f"  sshd_port: {CONTAINER_SSHD_PORT}",
        "  hf_cache: ~/.cache/huggingface",
        "  env:",
        f"    HF_ENDPOINT: {HUB_URL}",  # the stand-in hub (hub.py); never a public hub
        "vllm:",
        f"  image: {VLLM_IMAGE_TAG}",  # built by `scripts/testbed vllm` (the real vLLM's CPU build)
        "triton:",
        f"  image: {TRITON_IMAGE_TAG}",  # built by `scripts/testbed triton` (the real Triton, the stand-in backend)
        "server:",
        f"  port: {SERVING_PORT}",
        # Why the pair departs from NVIDIA's playbooks (doctor's playbook.* rows show these as INFO).
        "playbook_reasons:",
        "  image: the simulated pair's stand-in engine image, built by scripts/testbed (docs/testbed.md)",
        "  addressing.addresses: every address of the simulated pair is in 198.18.0.0/15 (docs/testbed.md)",
    ]
    # No models: section, so no model size is overridden: the profiles' real sizes stand, and the nodes
    # show a GB10's memory and a Spark's disk (gb10.py), so memory and disk are judged as on real Sparks.
    return "\n".join(lines) + "\n"


def write() -> None:
    """Write the inventory file."""
    INVENTORY.parent.mkdir(parents=True, exist_ok=True)
    INVENTORY.write_text(render())
