"""NVIDIA's two-Spark TensorRT-LLM recipe as data: container spec, env, hostfile, command lines.

Pure functions of the inventory and a profile; render writes them as files, launch runs them.
Where sparkpair departs from the playbook it says why (docs/profiles.md lists every change).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from sparkpair import paths
from sparkpair.inventory import Inventory, Node
from sparkpair.inventory.profiles import Profile
from sparkpair.inventory.topology import same_half, same_port

# Where things live inside the engine container (all mounted from the node; sparkpair.paths).
CONFIG_DIR = paths.CONTAINER_CONFIG
SECRETS_DIR = paths.CONTAINER_SECRETS
SSH_DIR = paths.CONTAINER_SSH
HF_HOME = paths.CONTAINER_HF_HOME
LOG_DIR = paths.CONTAINER_LOGS
HOSTFILE = f"{CONFIG_DIR}/openmpi-hostfile"
LLM_API_CONFIG = f"{CONFIG_DIR}/extra-llm-api-config.yml"
RSH_AGENT = f"{CONFIG_DIR}/mpi-rsh-agent"
ENTRYPOINT = f"{CONFIG_DIR}/entrypoint.sh"
HF_TOKEN_FILE = f"{SECRETS_DIR}/hf_token"
HOST_KEY = paths.CONTAINER_HOST_KEY
# On the node, relative to the user's home.
NODE_STATE_DIR = paths.STATE_DIR.removeprefix("~/")
NODE_CONFIG_DIR = paths.CONFIG_DIR.removeprefix("~/")
NODE_SECRETS_DIR = paths.SECRETS_DIR.removeprefix("~/")
MODEL_LINKS = paths.MODEL_LINKS
HIDDEN_STATES_DIR = f"{HF_HOME}/{paths.HIDDEN_STATES}"   # where an engine writes train-draft's hidden states
ENGINE_CACHE = paths.CONTAINER_ENGINE_CACHE
ENGINE_CACHE_VOLUME = paths.ENGINE_CACHE_VOLUME

# The models and the compile caches, the same in every runtime's container: the HF cache offline, the token read
# from its 0600 file; Inductor's generated kernels (on a CPU vLLM compiles its sampler's C++ at the first request:
# 20-30 s of each start here) and the Triton compiler's GPU kernels on the node's engine-cache volume, so a
# second start loads what the first compiled.
SERVING_ENV = {
    "HF_HOME": HF_HOME,
    "HF_TOKEN_PATH": HF_TOKEN_FILE,
    "HF_HUB_OFFLINE": "1",
    "TORCHINDUCTOR_CACHE_DIR": f"{ENGINE_CACHE}/inductor",
    "TRITON_CACHE_DIR": f"{ENGINE_CACHE}/triton",
}
# vLLM's cache root on the same volume (the vLLM and Triton runtimes): the model-class inspections its API server
# otherwise redoes in a subprocess at every start (about 10 s each for the target and the draft here) and
# torch.compile's artifacts.
VLLM_CACHE_ENV = {"VLLM_CACHE_ROOT": f"{ENGINE_CACHE}/vllm"}


@dataclass(frozen=True)
class NodeFabric:
    """What one node's ranks need to run NCCL over RoCE, asked of that node (checks.roce.node_fabric):
    the RDMA devices of its twins, and the GID index of their IPv4 RoCE v2 entry when all twins share one."""

    hcas: tuple[str, ...]
    gid_index: int | None = None

    def env(self) -> dict[str, str]:
        """NCCL_IB_HCA and, when known, NCCL_IB_GID_INDEX."""
        env = {"NCCL_IB_HCA": ",".join(self.hcas)} if self.hcas else {}
        return env | ({"NCCL_IB_GID_INDEX": str(self.gid_index)} if self.gid_index is not None else {})


def repo_dirname(repo: str) -> str:
    """The HF hub cache directory of a repo id: models--org--name."""
    return "models--" + repo.replace("/", "--")


def model_link(repo: str) -> str:
    """A stable in-container path to the repo's snapshot (launch points it at the verified revision)."""
    return f"{HF_HOME}/{MODEL_LINKS}/{repo.replace('/', '--')}"


def merged_halves(node: Node) -> dict[str, str]:
    """NCCL_IB_MERGE_NICS=1 where the node's QSFP interfaces are the two PCIe x4 halves of one cabled port: NCCL
    drives both as one NIC (98 -> 161 Gb/s busbw with both halves merged, against one: tonyd2wild/
    DeepSeek-v4-Flash-Vision-Exp-DSpark-1M-NVFP4-KV-2x-DGX-Spark#35, 2026-08-20; NVIDIA Sync writes the same, with
    both halves in NCCL_IB_HCA and MTU 9000: eugr/spark-vllm-docker#389). NCCL's own default since 2.21, pinned
    against an image or /etc/nccl.conf that turns it off. Nothing where the interfaces are two ports (a ring's
    neighbours: two peers are never one NIC)."""
    twins = list(node.links)
    return {"NCCL_IB_MERGE_NICS": "1"} if len(twins) == 2 and same_port(*twins) and twins[0] != twins[1] else {}


def container_env(inventory: Inventory, fabric: NodeFabric | None = None) -> dict[str, str]:
    """Environment of one node's engine container: the recipe's variables, built from the inventory, with
    that node's NCCL_IB_HCA and NCCL_IB_GID_INDEX when its fabric was asked of it (launch, doctor --deep);
    the inventory's container.env last."""
    twins = ",".join(inventory.head.links)
    env = {
        "UCX_NET_DEVICES": twins,
        "NCCL_SOCKET_IFNAME": twins,
        **(fabric.env() if fabric else {}),
        **merged_halves(inventory.head),
        "OMPI_MCA_btl_tcp_if_include": mpi_tcp_interfaces(inventory),
        "OMPI_MCA_oob_tcp_if_include": twins,
        "OMPI_MCA_orte_default_hostfile": HOSTFILE,
        "OMPI_MCA_rmaps_ppr_n_pernode": "1",
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "CPATH": "/usr/local/cuda/include",
        "TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas",
        **SERVING_ENV,
    }
    env.update(inventory.container.env)
    return env


def mpi_tcp_interfaces(inventory: Inventory) -> str:
    """OpenMPI's TCP transport's interfaces (btl_tcp_if_include): every QSFP twin the inventory names; on a ring
    one twin of each port, those of the first twin's half. Given all four twins on the simulated ring, a 4 MiB
    mpi4py allreduce across the three ranks stalled in 5 runs of 14, every connection established and idle
    (OpenMPI 4.1 pairs each local interface with every address of a peer, routed ones included); with one
    twin per port it finished in every run (docs/cluster.md)."""
    names = list(inventory.head.links)
    if inventory.topology != "ring":
        return ",".join(names)
    return ",".join(name for name in names if same_half(name, names[0]))


# Variables every rank must see; OpenMPI forwards only what -x names (ssh sessions into a
# container do not inherit `docker run -e`). NVIDIA's recipe passes CPATH, TRITON_PTXAS_PATH and
# HF_TOKEN; sparkpair passes HF_TOKEN_PATH instead so the token never appears in argv. NCCL_IB_HCA
# and NCCL_IB_GID_INDEX are per node: -x would give every rank the head's values, so each rank
# reads its own container's (docker exec keeps them; the sshd entrypoint hands them to sessions).
FORWARDED_ENV = ("CPATH", "TRITON_PTXAS_PATH", *SERVING_ENV, "NCCL_SOCKET_IFNAME", "UCX_NET_DEVICES")
PER_NODE_ENV = ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX")


def ports_toward_head(inventory: Inventory, node: Node) -> tuple[str, str]:
    """(the head's port, node's port) of the first link between the head and node: the cable or subnet each
    worker shares with the head (in a ring a worker's first link may be the cable to the other worker). For
    the head itself, for a node with no link to it and for both nodes of a pair (as always), each side's first
    port."""
    head = inventory.head
    for link in inventory.links() if len(inventory.nodes) > 2 else ():
        if (link.node_a, link.node_b) == (head.name, node.name):
            return link.port_a, link.port_b
    return next(iter(head.links)), next(iter(node.links))


def hostfile_lines(inventory: Inventory) -> list[str]:
    """OpenMPI hostfile, head first, one slot each: the address of each node's first link (a pair: as always);
    with more nodes each worker's address on its first link with the head, one mpirun on the head reaches."""
    if len(inventory.nodes) == 2:
        return [f"{next(iter(node.links.values())).ip} slots=1" for node in inventory.nodes]
    head = inventory.head
    lines = [f"{next(iter(head.links.values())).ip} slots=1"]
    for worker in inventory.workers:
        lines.append(f"{worker.links[ports_toward_head(inventory, worker)[1]].ip} slots=1")
    return lines


def serve_argv(inventory: Inventory, profile: Profile) -> list[str]:
    """trtllm-serve and its flags; everything else goes in the LLM-API YAML."""
    argv = ["trtllm-serve", profile.target]
    flags: dict[str, Any] = {**profile.serve_args, "tp_size": profile.tp_size}
    flags |= {"pp_size": profile.pp_size} if profile.pp_size > 1 else {}
    for name, value in flags.items():
        if value is True:
            argv.append(f"--{name}")
        elif value is not False:
            argv += [f"--{name}", str(value)]
    return argv + ["--extra_llm_api_options", LLM_API_CONFIG,
                   "--port", str(inventory.server.port), "--host", "0.0.0.0"]


def passed_flags(inventory: Inventory, profile: Profile) -> set[str]:
    """The trtllm-serve flags (with leading --) the launch passes."""
    return {arg for arg in serve_argv(inventory, profile) if arg.startswith("--")}


def llm_api_options(profile: Profile) -> dict[str, Any]:
    """The --extra_llm_api_options YAML: the profile's engine_config plus its speculative config."""
    options = dict(profile.engine_config)
    capture = profile.capture_hidden_states
    if capture:  # ModelOpt's compute_hidden_states_trtllm: SaveState, one file per request, every prompt token whole
        options["speculative_config"] = {
            "decoding_type": "SaveState", "output_directory": f"{HIDDEN_STATES_DIR}/{capture['folder']}",
            "write_interval": 1, "file_prefix": "sparkpair",
            "eagle3_layers_to_capture": [*capture["layers"], -1],   # -1: the last layer's post-norm hidden state
        }
        options["enable_chunked_prefill"] = False
        options["kv_cache_config"] = {**options.get("kv_cache_config", {}), "enable_block_reuse": False}
        return options
    if profile.draft:
        options["speculative_config"] = {
            "decoding_type": profile.decoding_type or "Eagle",
            "max_draft_len": profile.max_draft_len or 3,
            "speculative_model_dir": model_link(profile.draft),
        }
    return options


def mpirun_argv(inventory: Inventory, profile: Profile) -> list[str]:
    """The mpirun line run in the head container (one rank per node: tp_size x pp_size of them) or the bare
    serve line (one rank)."""
    serve = serve_argv(inventory, profile)
    if not profile.is_pair:
        return serve
    argv = ["mpirun", "-np", str(len(inventory.nodes)), "--hostfile", HOSTFILE, "--mca", "plm_rsh_agent", RSH_AGENT,
            "--output-filename", f"{LOG_DIR}/ranks"]
    for name in FORWARDED_ENV:
        argv += ["-x", name]
    return argv + ["trtllm-llmapi-launch"] + serve


@dataclass(frozen=True)
class Start:
    """One command the launch starts, detached, in a node's engine container (in list order). `serves`:
    this node's command answers HTTP (the serving node's); the others are workers that never say so."""

    node: str
    argv: list[str]
    serves: bool = False
    log: str = "serve"   # its output goes to LOG_DIR/<log>.log (the serve command's is serve.log)
    until: str = ""      # sh, in the same container: the launch waits until it succeeds before the next start
    until_means: str = ""  # what `until` succeeding shows, in words (the launch says it)
    secret_env: tuple[str, ...] = ()  # variables it reads from their 0600 files in SECRETS_DIR (`secret_exports`)


@dataclass(frozen=True)
class ContainerSpec:
    """What `docker run` gets on one node; compared field by field to decide reuse."""

    image: str
    name: str
    command: list[str]
    env: dict[str, str]
    mounts: dict[str, tuple[str, str]]          # container path -> (host path or volume name, "ro"|"rw")
    gpus: bool
    devices: list[str] = field(default_factory=list)
    ulimits: dict[str, int] = field(default_factory=lambda: {"memlock": -1, "stack": 67108864})
    labels: dict[str, str] = field(default_factory=dict)
    ipc_host: bool = True        # --ipc host (the TensorRT-LLM recipe); else a private IPC namespace
    shm_size: str = ""           # --shm-size (NVIDIA's vLLM playbook: 10.24g)


def container_spec(inventory: Inventory, node: Node, home: str, *, gpus: bool,
                   infiniband: bool, fabric: NodeFabric | None = None) -> ContainerSpec:
    """NVIDIA's `docker run` for one node: host network and IPC, memlock -1, 64 MiB stack."""
    container = inventory.container
    mounts = {
        CONFIG_DIR: (f"{home}/{NODE_CONFIG_DIR}", "ro"),
        SECRETS_DIR: (f"{home}/{NODE_SECRETS_DIR}", "ro"),
        SSH_DIR: (f"{home}/.ssh", "ro"),
        HF_HOME: (hf_cache_on_node(inventory, home), "rw"),
        ENGINE_CACHE: (ENGINE_CACHE_VOLUME, "rw"),
    }
    command = ["sleep", "infinity"]
    if container.mpi_transport == "sshd":
        mounts[HOST_KEY] = ("/etc/ssh/ssh_host_ed25519_key", "ro")
        command = ["/bin/sh", ENTRYPOINT]
    return ContainerSpec(
        image=container.image, name=container.name, command=command,
        env=container_env(inventory, fabric), mounts=mounts, gpus=gpus,
        devices=["/dev/infiniband"] if infiniband else [],
        labels={"sparkpair.cluster": inventory.cluster.name, "sparkpair.node": node.name},
    )


def host_directories(spec: ContainerSpec) -> list[str]:
    """The node directories spec mounts (not the host key, a file, nor a named volume, which Docker makes)."""
    return [source for target, (source, _) in spec.mounts.items() if target != HOST_KEY and source.startswith("/")]


def docker_run_argv(spec: ContainerSpec) -> list[str]:
    """The `docker run` command equivalent to spec (for the runbook and for humans)."""
    argv = ["docker", "run", "-d", "--name", spec.name, "--network", "host"]
    argv += ["--ipc", "host"] if spec.ipc_host else []
    argv += ["--shm-size", spec.shm_size] if spec.shm_size else []
    argv += [f"--ulimit={name}={value}" for name, value in spec.ulimits.items()]
    argv += ["--gpus", "all"] if spec.gpus else []
    for device in spec.devices:
        argv += ["--device", f"{device}:{device}"]
    for name, value in spec.labels.items():
        argv += ["--label", f"{name}={value}"]
    argv += ["--env-file", f"{spec.mounts[CONFIG_DIR][0]}/container.env"]
    for target, (source, mode) in spec.mounts.items():
        argv += ["-v", f"{source}:{target}:{mode}"]
    return argv + [spec.image] + spec.command


def shell_line(argv: list[str]) -> str:
    """argv as one shell-safe line."""
    return shlex.join(argv)


def secret_exports(names: tuple[str, ...]) -> str:
    """sh putting each variable of names in the environment from its file in SECRETS_DIR (where launch placed the
    engine's secret, 0600): the value reaches the command that follows, never an argv, `ps` or `docker inspect`."""
    if not all(name.isidentifier() and name.isupper() for name in names):
        raise ValueError(f"not environment variable names: {names}")
    return "".join(f'{name}="$(cat {SECRETS_DIR}/{name})" && export {name} && ' for name in names)


def hf_cache_on_node(inventory: Inventory, home: str) -> str:
    """The node's HF cache as an absolute path, given the user's home."""
    cache = inventory.container.hf_cache.rstrip("/") or "/"
    return home + cache[1:] if cache.startswith("~") else cache


# `hf download` in the engine container, whose own environment keeps the hub off while serving (HF_HUB_OFFLINE=1):
# the hub on for the download, and a writable HOME for hf's own files (it runs as the node user).
DOWNLOAD_ENV = {"HOME": "/tmp", "HF_HUB_OFFLINE": "0"}


def download_argv(repo: str) -> list[str]:
    """Fetch repo into the HF cache (run in the engine container as the node user)."""
    return ["hf", "download", repo]


def snapshot_link(repo: str, revision: str) -> tuple[str, str]:
    """(link path relative to the HF cache, relative target) that model_link resolves through."""
    link = f"{MODEL_LINKS}/{repo.replace('/', '--')}"
    return link, f"../hub/{repo_dirname(repo)}/snapshots/{revision}"


def sync_argv(inventory: Inventory, repo: str, home: str = "~") -> list[str]:
    """Copy a repo's cache from the head to the worker over the first QSFP link (run on the head)."""
    cache = hf_cache_on_node(inventory, home)
    peer = next(iter(inventory.worker.links.values())).ip
    source = f"{cache}/hub/{repo_dirname(repo)}"
    remote = inventory.container.hf_cache.removeprefix("~/") if inventory.container.hf_cache.startswith("~/") \
        else inventory.container.hf_cache
    return ["rsync", "-a", "--partial", "--mkpath", "-e", "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes", source,
            f"{peer}:{remote.rstrip('/')}/hub/"]
