"""Classify why a launch failed from the ranks' last log lines: known signatures to cause and fix.

Pure: text in, causes out. The signatures come from NVIDIA's troubleshooting tables, TensorRT-LLM,
OpenMPI and NCCL messages (docs/runbooks.md#launch-failure lists them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    """A recognised failure: a short name, what it means here, and the fix."""

    name: str
    explanation: str
    fix: str


@dataclass(frozen=True)
class Signature:
    name: str
    pattern: re.Pattern[str]
    explanation: str
    fix: str


def _sig(name: str, pattern: str, explanation: str, fix: str) -> Signature:
    return Signature(name, re.compile(pattern, re.IGNORECASE | re.MULTILINE), explanation, fix)


SIGNATURES = [
    _sig("unknown-yaml-key", r"Extra inputs are not permitted|type=extra_forbidden",
         "TensorRT-LLM refused a key in extra-llm-api-config.yml{detail}",
         "remove or fix the key in the profile's llm_api (models: in the inventory); sparkpair render shows it"),
    _sig("model-missing", r"couldn't find them in the cached files|does not exist on this node",
         "a rank could not find the model or draft on its node{detail}",
         "sparkpair launch again (it copies the models to both nodes); check sparkpair doctor --only models"),
    _sig("port-in-use", r"Address already in use|Errno 98",
         "the serving port was taken{detail}", "sparkpair doctor --only ports names the holder; stop it or change server.port"),
    _sig("world-size", r"MPI world size is \d+, but",
         "mpirun started a different number of ranks than tp_size{detail}",
         "check the hostfile and OMPI_MCA_rmaps_ppr_n_pernode=1 (sparkpair render shows both)"),
    _sig("publickey", r"Permission denied \(publickey",
         "one node could not SSH to the other for mpirun{detail}", "sparkpair setup-network (exchanges node keys)"),
    _sig("host-key", r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED",
         "a node does not know, or no longer trusts, the other's host key{detail}", "sparkpair setup-network"),
    _sig("peer-unreachable", r"ORTE was unable to reliably start one or more daemons|"
                             r"ssh: connect to host \S+ port \d+: (Connection refused|No route to host|Connection timed out)",
         "mpirun could not start its daemon on the other node{detail}",
         "sparkpair doctor --only path,trust,ports (sshd transport: is the worker's container sshd up?)"),
    _sig("peer-container", r"No such container|is not running",
         "the engine container on the other node is gone{detail}", "sparkpair stop; sparkpair launch"),
    _sig("wrong-interface", r"Socket operation on non-socket|Unable to find address for|"
                            r"no socket interface found|Bootstrap : no socket interface",
         "NCCL or Gloo bound the wrong network interface{detail}",
         "NCCL_SOCKET_IFNAME / UCX_NET_DEVICES must name the Up twins (ibdev2netdev); sparkpair setup-network"),
    _sig("out-of-memory", r"CUDA out of memory|out of memory|NV_ERR_NO_MEMORY|OutOfMemoryError",
         "a rank ran out of unified memory{detail}",
         "sudo sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches' on both nodes; lower free_gpu_memory_fraction"),
    _sig("nccl", r"NCCL error|unhandled system error|ibv_modify_qp|NCCL WARN",
         "NCCL failed between the ranks{detail}",
         "sparkpair doctor --deep (fabric test in the engine container); check links.rdma and path.mtu"),
    _sig("ptxas", r"ptxas fatal", "Triton could not compile kernels{detail}",
         "TRITON_PTXAS_PATH must reach every rank (sparkpair forwards it with -x)"),
]


def _detail(text: str, signature: Signature) -> str:
    """Where the evidence points: the YAML key path, or the rank and host."""
    if signature.name == "unknown-yaml-key":
        key = re.search(r"^\s*([A-Za-z_][\w.]*)\s*\n\s*Extra inputs are not permitted", text, re.MULTILINE)
        return f": {key.group(1)}" if key else ""
    rank = re.search(r"rank (\d+) on (\S+?)[:)\s]", text)
    return f" (rank {rank.group(1)} on {rank.group(2)})" if rank else ""


def classify(text: str) -> list[Cause]:
    """Every known cause whose signature appears in text, most specific first."""
    causes = []
    for signature in SIGNATURES:
        if signature.pattern.search(text):
            causes.append(Cause(signature.name, signature.explanation.format(detail=_detail(text, signature)),
                                signature.fix))
    return causes
