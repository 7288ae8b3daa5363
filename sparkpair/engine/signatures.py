"""What each launch failure cause is, its fix, and the lines the tools print for it.

Data, and `every_signature`, which merges the runtimes' own lines in. A cause is an id with a one-line summary and a
fix in no engine's words (the runtime adds the engine's own setting to change: `Runtime.cause_fixes`); a signature
is a regular expression for one line that NCCL, Gloo, UCX, Open MPI (ORTE/PRRTE), CUDA, NVML, huggingface_hub,
uvicorn, docker/runc, TensorRT-LLM, PyTorch, Ray or Triton Inference Server print for that cause, in any program's
log, or that one engine alone prints (its runtime's `failure_lines`: SGLang's are in `runtimes/sglang.py`), with a
weight:

- DECISIVE: the line names the cause (e.g. "Host key verification failed");
- STRONG: the line usually means the cause (e.g. "NCCL error: unhandled system error");
- HINT: a warning that explains a failed start but is harmless in a start that reached serving
  (e.g. UCX's "network device ... is not available").

Signatures are tried in order and the first that matches a line claims it, so specific lines come
before generic ones (an `ibv_modify_qp ... Network is unreachable` line is RoCE, not routing).
`explains` lists other causes a consequence line also supports ("ORTE was unable to reliably start
one or more daemons" follows SSH, a missing orted or an unreachable peer). Each cause id has a
section in docs/runbooks.md. Benign noise of healthy starts (pynvml deprecation, the UCX version
warning, a lone NV_ERR_NO_MEMORY, CPU affinity warnings) matches nothing here on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from sparkpair import registry
from sparkpair.linepattern import LinePattern, followed_by
from sparkpair.runtimes import every_runtime

DECISIVE, STRONG, HINT = 3, 2, 1


@dataclass(frozen=True)
class Cause:
    """A known reason a start fails: its id, what it means, and what to do."""

    id: str
    summary: str
    fix: str


@dataclass(frozen=True)
class Signature:
    """One kind of line that shows a cause; `subject` (a named group) is what the line names."""

    cause: str
    pattern: LinePattern
    weight: int
    explains: tuple[str, ...] = ()
    lines_before: int = 0  # lines above the match that belong to the evidence (a pydantic error's field)


# In order of cause and effect: a cause earlier here makes the later ones happen, so among equally
# strong findings the earlier one is reported first.
CAUSES: tuple[Cause, ...] = (
    Cause("memory.guard", "the memory guard stopped the engine's container: the node's unified memory fell under "
          "its floor (or its memory pressure reached the limit) before the Spark could hang",
          "free the node's memory (docker ps; ps aux --sort=-rss | head), or lower the engine's own share "
          "(gpu_memory_utilization, free_gpu_memory_fraction, max_model_len), then sparkpair launch; "
          "memory_guard.floor_gib sets the floor"),
    Cause("memory.overshoot", "launch stopped the load: what the ranks still had to load would have taken "
          "MemAvailable under the memory guard's floor",
          "free memory on that node or serve a smaller profile (sparkpair doctor --only memory), then sparkpair "
          "launch; memory_guard.floor_gib sets the floor"),
    Cause("image.platform", "the image is built for another CPU architecture (a DGX Spark is arm64)",
          "use an arm64 or multi-arch image (docker image inspect --format '{{.Architecture}}' IMAGE "
          "must say arm64); NVIDIA's nvcr.io/nvidia/tensorrt-llm/release images are multi-arch"),
    Cause("gpu.runtime", "the container has no working GPU runtime (no NVIDIA runtime in Docker, NVML "
          "cannot initialise, or the driver libraries are missing)",
          "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker; a container "
          "that lost NVML after a systemd daemon-reload must be recreated (sparkpair stop; sparkpair launch); "
          "sparkpair doctor --only docker.nvidia-runtime,platform.gpu"),
    Cause("driver.version", "the host's NVIDIA driver is too old for the CUDA inside the container",
          "update the node (sudo apt update && sudo apt full-upgrade, reboot) or use an image built for the "
          "CUDA version nvidia-smi reports; sparkpair doctor --only platform"),
    Cause("mpi.remote-env", "Open MPI's remote daemon or launcher is missing on a node or in the image "
          "(orted/prted not on the PATH of a non-interactive login, no ssh client)",
          "run the same engine image on both nodes (sparkpair doctor --only docker); by hand: install Open MPI "
          "at the same prefix on every node or pass --prefix, and install openssh-client in the image"),
    Cause("mpi.ssh", "mpirun could not start the remote side over SSH (key refused, host key unknown or "
          "changed, connection refused)",
          "sparkpair setup-network (node keys and verified host keys), then sparkpair doctor --only trust; with "
          "the sshd transport also sparkpair doctor --only ports.sshd"),
    Cause("mpi.slots", "mpirun has fewer slots than the ranks asked for, or started a different number of "
          "ranks than the engine needs",
          "one rank per Spark: a hostfile line 'ADDRESS slots=1' for each node and -np 2 (sparkpair render "
          "shows both); by hand add slots=N, -H host:N or --oversubscribe"),
    Cause("engine.launcher", "trtllm-serve ran on several nodes without trtllm-llmapi-launch, so each rank "
          "saw only its own node's GPU",
          "start it as mpirun ... trtllm-llmapi-launch trtllm-serve ... (sparkpair launch does; sparkpair "
          "render shows the line)"),
    Cause("fabric.interface", "NCCL, Gloo, UCX or Open MPI was told to use a network interface that is "
          "missing, wrong, loopback or without an address on that node",
          "name the Up QSFP twins (ibdev2netdev) in NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, UCX_NET_DEVICES "
          "and OMPI_MCA_btl_tcp_if_include on both nodes; sparkpair doctor --only links, then sparkpair "
          "setup-network"),
    Cause("fabric.address", "a rank advertised an address its peers cannot use for the fabric (an IPv6, LAN or "
          "Wi-Fi address instead of its QSFP twin's IPv4 address), so the ranks connect and then wait on each other",
          "pin every address the engine advertises to the node's QSFP twin: NCCL_SOCKET_IFNAME and "
          "GLOO_SOCKET_IFNAME to the twin, the engine's host address (VLLM_HOST_IP, SGLANG_HOST_IP, "
          "--dist-init-addr, MASTER_ADDR) to the twin's IPv4 address (sparkpair launch sets them); sparkpair "
          "doctor --only links"),
    Cause("fabric.roce", "RoCE between the nodes failed (wrong or mismatched GID index, link-local GID, an "
          "unusable HCA, completion errors)",
          "ibdev2netdev and show_gids on both nodes: NCCL_IB_HCA must list the Up twins' RoCE devices and "
          "NCCL_IB_GID_INDEX the RoCE v2 IPv4 GID of each node (it can differ per node); sparkpair doctor "
          "--deep --only links,deep"),
    Cause("fabric.unreachable", "the peer's fabric address cannot be reached (no route, network unreachable, "
          "connection refused at bootstrap)",
          "sparkpair doctor --only links,path (addresses on the twins, pings both ways), then sparkpair "
          "setup-network"),
    Cause("config.invalid", "the engine rejected its configuration (an unknown key or a bad value)",
          "fix the setting the engine names in the profile (models.PROFILE in the inventory)"),
    Cause("disk.full", "no space left on the disk that holds the model cache",
          "free space, or point container.hf_cache at a larger volume on every node; sparkpair doctor "
          "--only models.disk"),
    Cause("model.access", "the model could not be reached: gated or unauthorised, not found, or missing from "
          "the cache while offline",
          "export HF_TOKEN of an account granted access on the model's page and check the repo id; sparkpair "
          "launch puts the models on both nodes (sparkpair doctor --only models)"),
    Cause("port.busy", "a port the engine binds is already taken (the serving port, the container's sshd "
          "port or a rendezvous port)",
          "sparkpair doctor --only ports names the holder; sparkpair stop if an old engine holds it, "
          "otherwise stop the holder or change server.port"),
    Cause("memory.oom", "a rank ran out of memory (CUDA out of memory, killed by signal 9 or by a memory "
          "monitor)",
          "sudo sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches' on both nodes; sparkpair doctor --only memory; "
          "if it recurs, leave the engine more memory"),
    Cause("engine.ray", "the engine was asked to run on Ray and cannot: the image has no Ray (NVIDIA's vLLM "
          "image ships without it) or the platform refuses Ray",
          "run the engine without Ray, or in an image with ray[default] installed, as NVIDIA's playbook does "
          "(docs/runbooks.md#engine-ray)"),
    Cause("ray.placement", "Ray cannot place the engine's workers: a node's GPU is not visible to Ray, or the "
          "cluster lacks a node (the placement group asks for more GPUs than the Ray cluster has)",
          "ray status on the head must list every node with GPU 1.0: start Ray on every node in the engine "
          "container (docker run --gpus all) with --node-ip-address and the engine's host address set to that node's "
          "QSFP twin address; or run the engine without Ray"),
    Cause("memory.kvcache", "the KV cache does not fit: the longest sequence the engine must hold needs more "
          "KV cache memory than is left after the weights",
          "give the KV cache more of the memory, or the longest sequence fewer tokens"),
    Cause("memory.held", "the ranks see unequal free GPU memory: another process or a crashed engine container "
          "holds memory on a node (SGLang refuses to start)",
          "sparkpair stop; docker ps -a on each node for a leftover engine container (docker rm -f it); "
          "sparkpair doctor --only memory (drop the page cache where it says so), then launch again"),
    Cause("memory.shm", "the container's /dev/shm is too small for the engine's shared memory",
          "run the engine container with --shm-size 10.24g or --ipc host (sparkpair does); sparkpair "
          "stop, then sparkpair launch"),
    Cause("engine.died", "the engine's core process died while the server kept answering",
          "sparkpair logs (the line above the EngineDeadError names why), then sparkpair stop and sparkpair "
          "launch; a request parameter the engine cannot serve (top_k with a speculative draft on some "
          "builds) is the engine's bug: report it with sparkpair bundle"),
    Cause("triton.backend", "Triton found no backend library for the backend the model's config.pbtxt names (the "
          "image has no vllm backend in /opt/tritonserver/backends)",
          "use NVIDIA's Triton image with the vLLM backend (nvcr.io/nvidia/tritonserver:<yy.mm>-vllm-python-py3, "
          "engines.triton.image); sparkpair doctor --only docker.image-mode asks the image"),
    Cause("triton.no-model", "Triton has no model of that name to load or serve (--load-model names a model the "
          "repository lacks, --load-model without explicit model control, or no model loaded)",
          "sparkpair render --runtime triton shows the model repository sparkpair writes; sparkpair stop, then "
          "sparkpair launch (which writes it on the head and loads its model explicitly)"),
    Cause("triton.stub", "the Python backend's stub process, where the vLLM backend and its engine run, died or "
          "stopped answering",
          "read the stub's traceback in sparkpair logs (the lines before); a stub killed by memory is memory.oom; "
          "Triton 2.51's stub needs numpy below 2 to read text tensors; then sparkpair stop and sparkpair launch"),
    Cause("triton.model-load", "Triton could not load the model: the vLLM backend's initialize raised (the reason "
          "follows `failed to load 'M' version 1:`)",
          "read the reason in sparkpair logs; a model.json key vLLM does not know is config.invalid (sparkpair "
          "inventory check validates serve_args against vLLM's engine arguments)"),
    Cause("rendezvous.timeout", "the ranks never all joined: a store or a collective timed out waiting for "
          "a peer",
          "read the other node's rank log for its own error first (sparkpair logs); then sparkpair doctor "
          "--only links,path and sparkpair doctor --deep"),
    Cause("peer.lost", "a peer rank dropped its TCP connection during the start (it died or aborted first; "
          "NCCL's socket 'Software caused connection abort', 'Connection closed by remote peer')",
          "read the other node's rank log for its own error first (sparkpair logs; sparkpair diagnose on both "
          "nodes' logs together names it); then sparkpair doctor --only links,path"),
    Cause("unknown.fatal", "the engine crashed on an error no known cause matches (a traceback's last line, a failed "
          "initialisation, a fatal signal, FATAL or a rank's non-zero exit)",
          "the engine prints the root cause just above these lines: read them on every node (sparkpair logs "
          "--tail 400), then report it with sparkpair bundle (docs/runbooks.md#unknown-fatal)"),
    Cause("startup.stalled", "the start made no progress for longer than its stage may take, by the log's own clock",
          "sparkpair logs on both nodes; a stall before NCCL points at MPI or the fabric (sparkpair doctor "
          "--deep), one while loading at disk or memory (sparkpair doctor --only models,memory); a first "
          "download can need a longer --timeout"),
)
CAUSE_IDS: tuple[str, ...] = tuple(cause.id for cause in CAUSES)
STALLED = "startup.stalled"
FATAL = "unknown.fatal"
PEER_LOST = "peer.lost"
KNOWN: tuple[str, ...] = tuple(cause for cause in CAUSE_IDS if cause not in (FATAL, STALLED))


def _sig(cause: str, pattern: str, weight: int = DECISIVE, explains: tuple[str, ...] = (),
         lines_before: int = 0) -> Signature:
    return Signature(cause, LinePattern.compile(pattern), weight, explains, lines_before)


ORTE_START = ("mpi.ssh", "mpi.remote-env", "fabric.unreachable", "fabric.interface", FATAL)
AFTER_PEER = tuple(cause for cause in KNOWN if cause != PEER_LOST)
SOCKET_ERROR = ("fabric.interface", "fabric.address", "fabric.unreachable", PEER_LOST, "rendezvous.timeout")
IPV4_LOOPBACK = r"127\.\d{1,3}\.\d{1,3}\.\d{1,3}"
HOST = r"(?P<subject>\S+?)"

_BEFORE_ENGINES: tuple[Signature, ...] = (
    # sparkpair's own memory guard and launch watch, in their own words (engine.memguard).
    _sig("memory.guard", rf"stopped by the memory guard on {HOST}:"),
    _sig("memory.overshoot", rf"the load will overshoot the memory floor on {HOST}:"),
    # A peer at a loopback address: a library fell back to lo (first: these lines carry socket errno text).
    _sig("fabric.interface", rf"\bConnect to {IPV4_LOOPBACK}<\d+> failed\b"),
    _sig("fabric.interface", rf"\bremote=\[{IPV4_LOOPBACK}\]"),
    # A peer that went away: NCCL's socket errors when the other rank died or aborted first (not RoCE).
    _sig(PEER_LOST, r"\bSoftware caused connection abort\b", STRONG, explains=AFTER_PEER),
    _sig(PEER_LOST, r"\bConnection closed by remote peer\b", STRONG, explains=AFTER_PEER),
    # RoCE next: its lines also carry generic errno text ("Network is unreachable", "No such device").
    _sig("fabric.roce", r"\bCall to ibv_\w+ failed\b|\bibv_modify_qp failed\b"),
    _sig("fabric.roce", r"NET/IB\s*:\s*Got completion (?:from peer \S+ )?with (?:error|status=)"),
    _sig("fabric.roce", r"\bgot completion with error\b|IBV_WC_RETRY_EXC_ERR|transport retry counter exceeded"),
    _sig("fabric.roce", r"\bunhandled system error\b", STRONG, explains=SOCKET_ERROR),  # any socket error too
    _sig("fabric.roce", r"NET/IB\s*:\s*(?:No device found|Unable to open device)", HINT),
    # The remote side of mpirun.
    _sig("mpi.remote-env", r"\b(?:orted|prted)\s*:\s*(?:command )?not found\b|"
                           r"\b(?:orted|prted)\s*:\s*No such file or directory"),
    _sig("mpi.remote-env", r"\b(?:orted|prted): error while loading shared libraries|"
                           r"\b(?:orted|prted): Error: unknown option"),
    _sig("mpi.remote-env", r'MCA parameter "plm_rsh_agent" was set to a path'),
    _sig("mpi.remote-env", r"\bssh\s*:\s*(?:command )?not found\b"),
    _sig("mpi.remote-env", r"Unable to start a daemon on the local node", STRONG),
    _sig("fabric.unreachable", rf"ssh: connect to host {HOST} port \d+: "
                               r"(?:No route to host|Connection timed out|Network is unreachable)"),
    _sig("mpi.ssh", r"Permission denied \((?:publickey|password|keyboard-interactive|hostbased)"),
    _sig("mpi.ssh", r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED"),
    _sig("mpi.ssh", rf"ssh: connect to host {HOST} port \d+: Connection refused"),
    _sig("mpi.ssh", followed_by(r"(?:ssh_exchange|kex_exchange)_identification: ", r"closed|reset")),
    _sig("mpi.ssh", rf"ssh: Could not resolve hostname {HOST}:"),
    _sig("mpi.ssh", r"(?:ORTE|PRTE) was unable to (?:reliably )?start one or more daemons", HINT,
         explains=ORTE_START),
    _sig("mpi.slots", r"not enough slots available in the system|\bnot enough slots\b"),
    _sig("mpi.slots", r"\bMPI world size is \d+, but\b", STRONG),
    # The container and its GPU.
    _sig("image.platform", r"exec format error"),
    _sig("image.platform", r"no matching manifest for linux/arm64"),
    _sig("image.platform", r"platform \((?P<subject>linux/[\w/]+)\) does not match the (?:expected|detected host) "
                           r"platform", HINT),
    _sig("driver.version", r"requirement error: unsatisfied condition: cuda\s*>="),
    _sig("driver.version", r"CUDA driver version is insufficient for CUDA runtime version|cudaErrorInsufficientDriver"),
    _sig("driver.version", r"The NVIDIA driver on your system is too old"),
    _sig("driver.version", r"forward compatibility was attempted on non supported HW"),
    _sig("driver.version", r"unsupported display driver / cuda driver combination", STRONG),
    _sig("gpu.runtime", r'could not select device driver "[^"]*" with capabilities'),
    _sig("gpu.runtime", r"unknown or invalid runtime name: nvidia|Unknown runtime specified nvidia"),
    _sig("gpu.runtime", r"Failed to initialize NVML"),
    _sig("gpu.runtime", r"nvidia-container-cli: (?:initialization|mount) error"),
    _sig("gpu.runtime", r"libnvidia-ml\.so(?:\.1)?: cannot open shared object file"),
    _sig("gpu.runtime", r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", STRONG),
    _sig("gpu.runtime", r"Found no NVIDIA driver on your system|no CUDA-capable device is detected", STRONG),
    # The engine and its launcher.
    _sig("engine.launcher", r"Only \d+ GPUs? (?:is|are) available, but \d+ (?:is|are) required"),
    _sig("engine.launcher", r"Number of GPUs per node \d+ must be at least as large as TP"),
    # Which interface the fabric libraries use.
    _sig("fabric.interface", rf"Unable to find address for:? {HOST}\s*$"),
    _sig("fabric.interface", r"\bifa != nullptr\b"),
    _sig("fabric.interface", r"\bno (?:usable |listening |socket |NCCL_SOCKET_IFNAME )*interfaces? found\b"),
    _sig("fabric.interface", r"Socket operation on non-socket"),
    _sig("fabric.interface", r"is neither AF_INET\(2\) nor AF_INET6\(10\)"),
    _sig("fabric.interface", r"None of the TCP networks specified to be included for out-of-band"),
    _sig("fabric.interface", r"An invalid value was given for (?:btl|oob)_tcp_if_(?:in|ex)clude", STRONG),
    _sig("fabric.interface", rf"network device '{HOST}' is not available", HINT),
    _sig("fabric.interface", r"NCCL INFO (?:Bootstrap|NET/Socket)\s*: Using (?:\[\d+\])?lo:", HINT),
    _sig("fabric.interface", r"Using the loopback address as fallback", HINT),
    _sig("fabric.address", r"NCCL INFO (?:Bootstrap|NET/Socket)\s*: Using (?:\[\d+\])?[\w.-]+:[0-9a-f]{0,4}:"
                           r"[0-9a-f:]{2,40}(?:%[\w.-]+)?<\d+>", HINT),  # an IPv6 address: not the QSFP twin's
    # Reaching the peer.
    _sig("fabric.unreachable", r"No route to host|Network is unreachable"),
    _sig("fabric.unreachable", r"ORTE does not know how to route a message|No OOB path to target", STRONG),
    _sig("fabric.unreachable", r"unable to complete a TCP connection\s+to another process", STRONG),
    _sig("fabric.unreachable", r"(?:ORTE|PRTE) has lost communication with a remote daemon", STRONG),
    _sig("fabric.unreachable", r"An? (?:ORTE|PRRTE|PRTE) daemon has unexpectedly failed after launch", STRONG),
    _sig("fabric.unreachable", r"Call to connect returned Connection refused", HINT),
    _sig("fabric.unreachable", rf"failed to connect to any network address of \({HOST}, \d+\)"),
    _sig("fabric.unreachable", rf"TCP client failed to connect/validate to host {HOST}:\d+ - retrying", STRONG),
    _sig("fabric.unreachable", r"\bGloo connectFullMesh failed\b", STRONG,
         explains=("fabric.interface", "fabric.address")),
    # Rendezvous of the ranks.
    _sig("rendezvous.timeout", r"Timed out after \d+ seconds waiting for (?:clients|workers)", STRONG),
    _sig("rendezvous.timeout", r"client socket has timed out after \d+m?s while trying to connect", STRONG),
    _sig("rendezvous.timeout", r"Watchdog caught collective operation timeout", STRONG),
    _sig("rendezvous.timeout", r"DistStoreError: Socket Timeout|\bwait timeout after \d+ms, keys:", STRONG),
    # The engine's own settings and processes (vLLM).
    _sig("engine.ray", r"Failed to import Ray\b"),
    _sig("engine.ray", r"current platform (?P<subject>\w+) does not support ray"),
    _sig("ray.placement", r"No available node types can fulfill resource request"),
    _sig("ray.placement", r"Cannot provide a placement group"),
    _sig("ray.placement", r"required GPUs exceeds the total number of available GPUs in the placement group"),
    _sig("ray.placement", r"Waiting for creating a placement group of specs for \d+ seconds", STRONG),
    _sig("memory.kvcache", r"KV cache is needed, which is larger than the available KV cache memory"),
    _sig("memory.kvcache", r"No available memory for the cache blocks"),
    _sig("memory.kvcache", r"is larger than the maximum number of tokens that can be stored in KV cache"),
    _sig("memory.shm", r"Insufficient space in /dev/shm\b"),
    _sig("engine.died", r"\bEngineDeadError\b|EngineCore encountered an issue", STRONG),
)
# Each runtime's own lines (`Runtime.failure_lines`) are tried here, between the lines above and below
# (`every_signature`): after the shared tools' and before the generic lines that could claim an engine's own.
_AFTER_ENGINES: tuple[Signature, ...] = (
    _sig("model.access", rf"Invalid repository ID or local directory specified: '{HOST}'"),
    # Triton Inference Server's own lines (the reason inside a load failure is claimed first where it is known).
    _sig("triton.backend", r"unable to find backend library for backend '(?P<subject>[^']+)'"),
    _sig("triton.backend", r"unable to find '(?P<subject>libtriton_\w+\.so)' for model"),
    _sig("triton.no-model", r"failed to poll model '(?P<subject>[^']+)': model not found in any model repository"),
    _sig("triton.no-model", r"Use of '--load-model' requires setting '--model-control-mode=explicit'"),
    _sig("triton.no-model", r"Request for unknown model: '(?P<subject>[^']+)' is not found", STRONG),
    _sig("triton.stub", r"Stub process '(?P<subject>[^']+)' is not healthy|Stub process is not healthy"),
    _sig("triton.stub", r"Stub process is unhealthy and it will be restarted"),
    # Configuration, model, disk, port.
    _sig("config.invalid", r"(?<!\d)\d+ validation errors? for \w*(?:Args|Config)\b", STRONG),
    _sig("config.invalid", r"(?:Args|Config)\.__init__\(\) got an unexpected keyword argument "
                           r"'(?P<subject>[^']+)'"),
    _sig("config.invalid", r"Extra inputs are not permitted", HINT, lines_before=1),
    _sig("config.invalid", r"^Error: (?:No such option|Invalid value for)\b"),
    _sig("config.invalid", r"\byaml\.(?:scanner|parser)\.\w*Error\b", STRONG),
    _sig("disk.full", r"No space left on device|Disk quota exceeded"),
    _sig("disk.full", r"Not enough free disk space to download the file", HINT),
    _sig("model.access", r"\bGatedRepoError\b|Cannot access gated repo|Access to model \S+ is restricted"),
    _sig("model.access", r"\bRepositoryNotFoundError\b|Repository Not Found for url"),
    _sig("model.access", r"\bLocalEntryNotFoundError\b|outgoing traffic has been disabled"),
    _sig("model.access", r"couldn't find them in the cached files|We couldn't connect to 'https://huggingface\.co'"),
    _sig("model.access", r"is not a local folder and is not a valid model identifier"),
    _sig("model.access", r"401 Client Error|Unauthorized for url: https://huggingface\.co|Invalid user token", STRONG),
    _sig("model.access", r"does not appear to have a file named", STRONG),
    _sig("port.busy", r"address already in use"),
    # Memory, last: its generic words come last.
    _sig("memory.oom", r"CUDA out of memory|CUDA error: out of memory|cudaErrorMemoryAllocation"),
    _sig("memory.oom", r"\bOutOfMemoryError\b|Out of memory: Kill(?:ed)? process"),
    _sig("memory.oom", r"\b(?:exited|killed|terminated) on signal 9\b|\bsignal 9 \(Killed\)"),
    _sig("memory.oom", r"\bstd::bad_alloc\b|\bMemoryError\b", STRONG),
    _sig("memory.oom", r"^\s*Killed\s*$|exit(?:ed)? (?:code|status):? ?137\b", HINT),
    # Triton's load failure, last: the reason it carries (a bad engine argument, memory) claims the line first.
    _sig("triton.model-load", r"failed to load '(?P<subject>[^']+)'(?: version \d+:|\W*$)", STRONG),
    _sig("triton.model-load", r"load failed for model '(?P<subject>[^']+)'|failed to load all models", STRONG),
    # The engine's own word that it waits on a hung peer (vLLM; informational once serving).
    _sig(STALLED, r"No available shared memory broadcast block found in \d+ seconds?", HINT),
    # A crash no signature above names: evidence of a cause found, else unknown.fatal.
    _sig(FATAL, r"\binitiali[sz]ation failed\b|\bMPI_ABORT was invoked\b", STRONG, explains=KNOWN),
    _sig(FATAL, r"\bSegmentation fault\b|\bSIGSEGV\b|\bcore dumped\b|\bSIGABRT\b", STRONG, explains=KNOWN),
    _sig(FATAL, r"(?:^|[\s\[(])FATAL(?:[\s\]):]|$)", STRONG, explains=KNOWN),
    _sig(FATAL, r"\bexited on signal \d+|\bnon-zero (?:exit|status)\b|\bChildFailedError\b|"
                r"\bFailed core proc\(s\): \{'", STRONG, explains=KNOWN),
    _sig(FATAL, r"\bexit ?code {0,4}[:=]? {0,2}-?[1-9]", STRONG, explains=KNOWN),
)
SIGNATURES: tuple[Signature, ...] = _BEFORE_ENGINES + _AFTER_ENGINES   # the shared lines, in order
WEIGHTS = {"decisive": DECISIVE, "strong": STRONG, "hint": HINT}


def every_signature() -> tuple[Signature, ...]:
    """The shared lines with every registered runtime's own (`Runtime.failure_lines`) between them, in the order
    they are tried (ValueError for a runtime line naming no cause of CAUSES: a mistake in its module)."""
    return _merged(registry.RUNTIMES)


@cache
def _merged(runtimes: tuple[registry.Registered, ...]) -> tuple[Signature, ...]:
    own = [(runtime.name, line) for runtime in every_runtime() for line in runtime.failure_lines]
    unknown = [f"{name}: {line.cause}" for name, line in own if line.cause not in CAUSE_IDS]
    if unknown:
        raise ValueError(f"failure lines naming no cause of engine.signatures.CAUSES: {', '.join(unknown)}")
    return _BEFORE_ENGINES + tuple(_sig(line.cause, line.pattern, WEIGHTS[line.weight]) for _, line in own) \
        + _AFTER_ENGINES

# The last line of a Python traceback is found from its first line (`diagnose`): a crash when the start never
# came up, evidence of a cause found, else unknown.fatal.
TRACEBACK = _sig(FATAL, r"\bTraceback \(most recent call last\):", HINT, explains=KNOWN)
