"""TensorRT-LLM across the pair, as NVIDIA's two-Spark recipe runs it: one `mpirun` in the head container
starts `trtllm-llmapi-launch trtllm-serve` on every rank node; the engine's settings go in the
`--extra_llm_api_options` YAML, checked against NVIDIA's schema (`render.engine_config`).

The recipe itself (container spec, env, hostfile, command lines) is data in `render.recipe`; this
module is what the engine-independent code asks of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkpair.errors import RenderError
from sparkpair.linepattern import followed_by
from sparkpair.render import RenderedFile, node_config_files, recipe, trtllm_files
from sparkpair.render.recipe import Start
from sparkpair.runtimes import FailureLine, Metrics, ServingApi, StageSpec, Watch
from sparkpair.runtimes.openai import OPENAI

if TYPE_CHECKING:
    from sparkpair.inventory import Inventory, Node
    from sparkpair.inventory.profiles import Profile

SERVE_LOG = f"{recipe.LOG_DIR}/serve.log"


@dataclass(frozen=True, kw_only=True)
class NoOptions:
    """TensorRT-LLM takes no options under engines.trtllm: its MPI transport is `container.mpi_transport`."""


class TensorRtLlm:
    """The TensorRT-LLM runtime (see the module docstring)."""

    name = "trtllm"
    title = "TensorRT-LLM"
    # A rank runs TensorRT-LLM (trtllm-serve, trtllm-llmapi-launch, a tensorrt_llm module, mpi4py's worker
    # server), not the shells and MPI daemons around it.
    process_pattern = r"trtllm-serve|trtllm-llmapi-launch|tensorrt_llm|mpi4py"
    metrics = Metrics("/prometheus/metrics", "trtllm_request_success_total",
                      "trtllm_spec_decode_num_draft_tokens_total", "trtllm_spec_decode_num_accepted_tokens_total",
                      needs="enable_iter_perf_stats: true in the profile's engine_config (formerly llm_api)",
                      iterations="/metrics")
    api: ServingApi = OPENAI
    watch: Watch = Watch(every_s=10.0, exit_every_s=5.0, first_s=5.0)
    options_record: type[Any] = NoOptions
    render_dir: str = ""   # the first runtime's files sit beside the netplan files, as they always did
    playbook: str | None = "trtllm"
    playbook_fixes: Mapping[str, str] = {"flags.tp_size": "set {profile}.tp_size: {value}",
                      "config.speculative_config.max_draft_len": "set {profile}.max_draft_len: {value}",
                      "config.speculative_config.decoding_type": "set {profile}.decoding_type: {value}"}
    cause_fixes: Mapping[str, str] = {
        "config.invalid": "the key under models.PROFILE.engine_config (formerly llm_api), by hand in "
                          "extra-llm-api-config.yml or the trtllm-serve option; sparkpair inventory check validates "
                          "it against TensorRT-LLM's schema",
        "memory.oom": "lower kv_cache_config.free_gpu_memory_fraction under models.PROFILE.engine_config",
        "memory.kvcache": "raise kv_cache_config.free_gpu_memory_fraction under models.PROFILE.engine_config",
    }
    failure_lines: tuple[FailureLine, ...] = ()   # its lines are engine.signatures' own
    fabric_proof: bool = True
    secret_options: Mapping[str, str] = {}  # trtllm-serve takes no secret option (the HF token travels as a file)
    # limit_s: executor as long as warm-up: TensorRT-LLM allocates a first KV cache (the executor stage's line)
    # before it autotunes and captures CUDA graphs, so a real log shows the executor stage through them. The
    # weights are loaded when it prints `Model init total -- 49.14s`; without NCCL_DEBUG nothing is printed
    # while NCCL sets up its communicators, which comes next.
    stages: tuple[StageSpec, ...] = (
        StageSpec("launcher", "the launcher started the ranks: trtllm-llmapi-launch banner, engine version",
                  (r"^\s*mpi_rank:\s*\d+", r"^\s*tllm_mpi_size:\s*\d+", r"\brun mgmn (?:leader|worker) node\b",
                   r"^Rank\d+ run .* in background", r"TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR",
                   r"\[TensorRT-LLM\] TensorRT[- ]LLM version"), "rank start-up", 300.0),
        StageSpec("mpi", "the MPI world is up: an MPI session holds every rank",
                  (r"Refreshed the MPI local session", r"\bMPI size:\s*\d+", r"\bMpi(?:Pool|Comm)?Session\b",
                   r"\bstart MpiSession with \d+ workers", r"RemoteMpiCommSession", r"Initializing for: lib='OMPI'"),
                  "MPI session", 300.0, alone=False),
        StageSpec("model", "loading the model weights",
                  (followed_by(r"\bLoading\b", r"\b(?:weights?|checkpoints?|safetensors|shards?|model)\b"),
                   r"\bFetching \d+ files\b", followed_by(r"\bPre-?fetching\b", r"\bcheckpoint"), r"\bload_weights\b",
                   r"\bmodel_loader\b"), "model load", 600.0, finished=r"\bModel init total -- [\d.]+\s*s\b"),
        StageSpec("nccl", "NCCL is setting up the communicators between the ranks",
                  (followed_by(r"\bNCCL INFO\b", r"\b(?:Init (?:START|COMPLETE)|Bootstrap|comm 0x|Using network|NET/)"),
                   r"\bNCCL version \d", r"\bncclCommInitRank\b"), "NCCL init", 90.0, alone=False),
        StageSpec("warmup", "autotuning and warm-up: kernels, CUDA graphs",
                  (r"\bautotun", r"\bwarm-?up\b", r"\bCUDA graphs?\b", r"\bcuda_graph", r"\[stage=compile\b"),
                  "autotune/warm-up", 1800.0),
        StageSpec("executor", "the executor is ready: KV cache allocated, workers answered",
                  (r"get signal from executor worker", r"\bMax KV cache blocks\b",
                   followed_by(r"\bAllocated ", r"\bKV cache\b"), r"global_steady_clock_offset"),
                  "executor start", 1800.0),
        StageSpec("serving", "uvicorn is serving HTTP", (r"\bUvicorn running on\b", r"\bApplication startup complete\b"),
                  "server start", 300.0),
    )

    def image(self, inventory: Inventory) -> str:
        return inventory.engine(self.name).image or inventory.container.image

    def container_name(self, inventory: Inventory) -> str:
        return inventory.engine(self.name).name or inventory.container.name

    def container_env(self, inventory: Inventory, node: Node, fabric: recipe.NodeFabric | None) -> dict[str, str]:
        return recipe.container_env(inventory, fabric)

    def container_spec(self, inventory: Inventory, node: Node, home: str, *, gpus: bool, infiniband: bool,
                       fabric: recipe.NodeFabric | None) -> recipe.ContainerSpec:
        return recipe.container_spec(inventory, node, home, gpus=gpus, infiniband=infiniband, fabric=fabric)

    def config_files(self, inventory: Inventory, profile: Profile, node: Node,
                     fabric: recipe.NodeFabric | None) -> list[RenderedFile]:
        return node_config_files(inventory, profile, fabric)

    def rendered(self, inventory: Inventory, profile: Profile) -> list[RenderedFile]:
        return trtllm_files(inventory, profile)

    def starts(self, inventory: Inventory, profile: Profile, nodes: list[str]) -> list[Start]:
        return [Start(nodes[0], recipe.mpirun_argv(inventory, profile), serves=True)]

    def problems(self, inventory: Inventory, profile: Profile) -> list[str]:
        from sparkpair.inventory.profiles import capture_problems
        from sparkpair.render import llm_api_config

        if capture_problems(profile.capture_hidden_states):
            return capture_problems(profile.capture_hidden_states)
        try:
            llm_api_config(inventory, profile)
        except RenderError as error:
            return [str(error).removeprefix(f"profile {profile.name}: ")]
        return []

    def engine_settings(self, profile: Profile) -> dict[str, Any]:
        return recipe.llm_api_options(profile)

    def draft_len(self, profile: Profile) -> int | None:
        """max_draft_len of the YAML's speculative_config."""
        speculative = recipe.llm_api_options(profile).get("speculative_config")
        return int(speculative["max_draft_len"]) if isinstance(speculative, dict) else None

    def metrics_port(self, inventory: Inventory) -> int:
        return inventory.server.port

    def other_ports(self, inventory: Inventory) -> dict[int, str]:
        return {}

    def rank_log_paths(self, rank: int | None) -> list[str]:
        """mpirun --output-filename's files of rank, on its own node; the serve log for a one-node start."""
        return [SERVE_LOG] if rank is None else [f"{recipe.LOG_DIR}/ranks/1/rank.{rank}/stdout",
                                                 f"{recipe.LOG_DIR}/ranks/1/rank.{rank}/stderr"]

    def launcher_log(self, ranks: int) -> str | None:
        return SERVE_LOG if ranks > 1 else None  # mpirun's own output, every rank's lines, on the head

    def image_needs(self, inventory: Inventory) -> tuple[str, ...]:
        return ()

    def image_needs_fix(self, inventory: Inventory, missing: list[str]) -> tuple[str, str]:
        return self.name, f"the engine image for {self.name} ({inventory.setting(self.name, 'image')} in the inventory)"

    def cluster_script(self, inventory: Inventory) -> str | None:
        return None

    def stop_script(self) -> str:
        return "pkill -TERM -x mpirun || pkill -TERM -f '[t]rtllm-serve'; true"

    def kill_script(self) -> str:
        return "pkill -KILL -f '[t]rtllm-|[m]pirun|[o]rted'; true"


RUNTIME = TensorRtLlm()
