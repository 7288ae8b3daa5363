"""Triton Inference Server with its vLLM backend across the pair: `tritonserver` on the head loads one model
from a model repository sparkpair renders (`config.pbtxt` for the `vllm` backend, `1/model.json` holding vLLM's
engine arguments, the Eagle3 draft in `speculative_config`), with explicit model control; the engine the
backend builds from model.json is rank 0 of vLLM's native multi-node start (`nnodes`, `node_rank`,
`master_addr`, `master_port` are engine arguments), and every other rank node runs `vllm serve --headless`
from the same image with the same arguments as flags, as the vLLM runtime's worker does.

The vLLM backend passes model.json whole to `AsyncEngineArgs(**json)` (triton-inference-server/vllm_backend
`src/model.py`), so every key a profile gives (serve_args, in vLLM's Python names) must be one of vLLM's
engine arguments and, for the workers, a `vllm serve` flag: both are checked against vLLM's own definitions
(`sparkpair/data/vllm_serve.json`: `engine_args` and `serve_options`), refused at render time naming the key.
Readiness and status speak Triton's KServe paths (`TritonApi`); its metrics port carries `nv_inference_*` and
the backend's `vllm:*` counters but no speculative-decoding counter, and vLLM inside the backend logs no
`SpecDecoding metrics:` line (only vLLM's own API server asks for them), so bench reports no acceptance on Triton
and says so; `bench --compare-baseline` measures what the draft buys. Its options (`engines.triton.options`,
`TritonOptions`): the gRPC and metrics ports and torch.distributed's port.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sparkpair.inventory.schema import PORT
from sparkpair.inventory.validation import spec
from sparkpair.jsonfields import Field
from sparkpair.render import RenderedFile, recipe, render_template
from sparkpair.render.recipe import Start
from sparkpair.runtimes import FailureLine, Metrics, Request, ServingApi, StageSpec, Watch, engine_options
from sparkpair.runtimes import vllm as vllm_runtime

if TYPE_CHECKING:
    from sparkpair.inventory import Inventory, Node
    from sparkpair.inventory.profiles import Profile

REPOSITORY = "model_repository"
SERVE_LOG = f"{recipe.LOG_DIR}/serve.log"   # tritonserver's on the head, `vllm serve --headless`'s on the workers
READY_PROMPT = "Reply with one word: ready"
# Engine arguments sparkpair sets from the inventory, the profile's draft and the launch; a profile that sets one
# is refused (it would contradict the pair's addresses, ranks or the draft).
OWN_ARGS = ("model", "tokenizer", "served_model_name", "tensor_parallel_size", "pipeline_parallel_size",
            "distributed_executor_backend", "nnodes", "node_rank", "master_addr", "master_port", "headless",
            "speculative_config", "disable_log_stats")
# The vLLM backend's sample config.pbtxt (vllm_backend samples/model_repository/vllm_model): KIND_MODEL lets
# the engine place its ranks (model.py refuses KIND_GPU above one GPU); REPORT_CUSTOM_METRICS puts vLLM's
# counters on Triton's metrics port (README "Triton Metrics").
CONFIG_PBTXT = """\
# Rendered by sparkpair for {target} (profile {profile}); the engine's arguments are in 1/model.json.
backend: "vllm"
instance_group [
  {{
    count: 1
    kind: KIND_MODEL
  }}
]
parameters: {{
  key: "REPORT_CUSTOM_METRICS"
  value: {{
    string_value: "true"
  }}
}}
"""


@dataclass(frozen=True, kw_only=True)
class TritonOptions:
    """engines.triton.options: Triton's gRPC and metrics ports (its HTTP port is server.port) and the port of
    torch.distributed's rendezvous on the head."""

    grpc_port: int = spec(PORT, 8001)
    metrics_port: int = spec(PORT, 8002)
    master_port: int = spec(PORT, 29501)


def options(inventory: Inventory) -> TritonOptions:
    """The inventory's engines.triton.options (InventoryError naming a bad one)."""
    found: TritonOptions = engine_options(inventory, RUNTIME)
    return found


def model_name(target: str) -> str:
    """The model's name in Triton's repository and paths: the repo id with '/' as '--' (one directory)."""
    return target.replace("/", "--")


class TritonApi:
    """Triton's KServe-style HTTP paths and its generate extension, as the vLLM backend answers them:
    `text_input` and the sampling parameters in, `text_output` out; the streamed form (generate_stream) sends
    server-sent events, each with the text new since the last and, asked for, `num_output_tokens` (new tokens)."""

    base = "/v2"
    health = "/v2/health/ready"
    generation_words = "a generation (/v2/models/M/generate)"
    stream_end: str | None = None
    token_counts = "delta"

    def models(self, model: str) -> str:
        return f"/v2/models/{model_name(model)}/ready"

    def served(self, body: bytes, model: str) -> list[str]:
        """A 200 from the model's ready path: it serves the model."""
        return [model]

    def _generate(self, model: str, prompt: str, max_tokens: int, stream: bool = False) -> Request:
        path = f"/v2/models/{model_name(model)}/generate" + ("_stream" if stream else "")
        return Request(path, {"text_input": prompt, "parameters": {
            "stream": stream, "exclude_input_in_output": True, "return_num_output_tokens": True,
            "temperature": 0, "max_tokens": max_tokens}})

    def ready_request(self, model: str) -> Request:
        return self._generate(model, READY_PROMPT, 8)

    def ready_text(self, body: bytes) -> str:
        return Field.parse(body, "generate").get("text_output").text(default="")

    def token_request(self, model: str) -> Request:
        return self._generate(model, "ping", 1)

    def token_text(self, body: bytes) -> str:
        return Field.parse(body, "generate").get("text_output").text()

    def stream_request(self, model: str, messages: list[dict[str, str]], max_tokens: int) -> Request:
        """The messages' contents as one prompt (the backend takes text, no chat template)."""
        return self._generate(model, "\n\n".join(message["content"] for message in messages), max_tokens, True)

    def stream_text(self, event: Field) -> str:
        return event.get("text_output").text(default="")

    def stream_tokens(self, event: Field) -> int | None:
        """num_output_tokens: the tokens this event adds (a number, or a one-element list)."""
        count = event.get("num_output_tokens")
        if count.null:
            return None
        return (count.at(0) if isinstance(count.value, list) else count).count(default=0)


class Triton:
    """The Triton runtime (see the module docstring)."""

    name = "triton"
    title = "Triton Inference Server"
    # tritonserver, its Python backend's stub (vLLM's frontend runs in it), vLLM's engine core and workers, and
    # the workers' `vllm serve --headless`.
    process_pattern = r"tritonserver|triton_python_backend_stub|vllm serve|VLLM::"
    # No draft counters: the vLLM backend's metrics have none, and vLLM's own "SpecDecoding metrics:" lines are
    # logged only when someone calls AsyncLLM.do_log_stats (vLLM's API server does, every 10 s; the backend never).
    metrics = Metrics("/metrics", requests="nv_inference_request_success",
                      needs="a speculative-decoding counter, which Triton's vLLM backend does not report; "
                            "`sparkpair bench --compare-baseline` measures what the draft buys instead (as seed 003 "
                            "compares the EAGLE model with the base model), and the vllm runtime reports acceptance")
    api: ServingApi = TritonApi()
    watch: Watch = Watch(every_s=10.0, exit_every_s=5.0, first_s=10.0)
    options_record: type[Any] = TritonOptions
    render_dir: str = "triton"
    playbook: str | None = None
    playbook_fixes: Mapping[str, str] = {}
    cause_fixes: Mapping[str, str] = {
        "config.invalid": "the key under the profile's serve_args (model.json: vLLM's engine arguments, Python names) "
                          "or engine_config.speculative_config; sparkpair inventory check validates both against "
                          "vLLM's own definitions",
        "memory.oom": "lower gpu_memory_utilization or max_model_len in the profile's serve_args (model.json; "
                      "models.PROFILE.variants.triton.serve_args for a profile of another runtime)",
        "memory.kvcache": "lower max_model_len (models.PROFILE.variants.triton.serve_args.max_model_len) or raise "
                          "gpu_memory_utilization",
    }
    # Its lines stay engine.signatures' own: its model-load line must come after the generic memory lines.
    failure_lines: tuple[FailureLine, ...] = ()
    fabric_proof: bool = False
    # Triton's HTTP front end takes no key, and model.json holds engine arguments only (vLLM's api_key is its API
    # server's, not an engine argument: problems refuses it).
    secret_options: Mapping[str, str] = {}
    # Triton's own lines around vLLM's (tests/fixtures/logs/triton: the simulated pair's real Triton 2.51 and vLLM
    # 0.32): the model's load and its instance (the backend's stub) first, vLLM's stages inside it, then the load
    # finished and the three services started (the ports open only then).
    stages: tuple[StageSpec, ...] = (
        StageSpec("launcher", "tritonserver loading the model (its Python backend stub), or the worker's vllm serve",
                  (r"\bloading: \S+:\d+", r"\bTRITONBACKEND_ModelInstanceInitialize: ", r"\bStarting Python backend stub",
                   r"\bLaunching vLLM \(v", r"\bheadless multiproc executor\b"), "Triton model load", 300.0),
        *vllm_runtime.RUNTIME.stages[1:-1],
        StageSpec("serving", "the model loaded and Triton's HTTP, gRPC and metrics services started",
                  (r"\bsuccessfully loaded '", r"\bStarted HTTPService at\b", r"\bStarted GRPCInferenceService at\b"),
                  "server start", 300.0),
    )

    def image(self, inventory: Inventory) -> str:
        return inventory.engine(self.name).image or inventory.container.image

    def container_name(self, inventory: Inventory) -> str:
        return inventory.engine(self.name).name or inventory.container.name

    def container_env(self, inventory: Inventory, node: Node, fabric: recipe.NodeFabric | None) -> dict[str, str]:
        """vLLM's per-node variables, as the vLLM runtime's native mode sets them (VLLM_HOST_IP on the node's twin
        toward the head; Gloo, TP and NCCL's sockets on the cabled ports; both halves of a cabled port as one NIC),
        recipe.SERVING_ENV and VLLM_CACHE_ENV (the HF cache offline, the compile caches), then engines.triton.env
        and container.env."""
        own = recipe.ports_toward_head(inventory, node)[1]
        twins = ",".join(node.links)
        env = {"VLLM_HOST_IP": str(node.links[own].ip), "GLOO_SOCKET_IFNAME": own, "TP_SOCKET_IFNAME": own,
               "NCCL_SOCKET_IFNAME": twins, "UCX_NET_DEVICES": twins, "OMPI_MCA_btl_tcp_if_include": own,
               **(fabric.env() if fabric else {}), **recipe.merged_halves(node),
               **recipe.SERVING_ENV, **recipe.VLLM_CACHE_ENV}
        return env | inventory.engine(self.name).env | inventory.container.env

    def container_spec(self, inventory: Inventory, node: Node, home: str, *, gpus: bool, infiniband: bool,
                       fabric: recipe.NodeFabric | None) -> recipe.ContainerSpec:
        """As the vLLM runtime's (`sleep infinity`, a private IPC namespace with NVIDIA's 10.24g /dev/shm), with
        Triton's image, name and environment; the commands run in it by `docker exec` (`starts`)."""
        spec_ = recipe.container_spec(inventory, node, home, gpus=gpus, infiniband=infiniband, fabric=fabric)
        mounts = {target: mount for target, mount in spec_.mounts.items() if target != recipe.HOST_KEY}
        return replace(spec_, image=self.image(inventory), name=self.container_name(inventory),
                       command=["sleep", "infinity"], env=self.container_env(inventory, node, fabric), mounts=mounts,
                       ipc_host=False, shm_size=vllm_runtime.SHM_SIZE)

    def config_files(self, inventory: Inventory, profile: Profile, node: Node,
                     fabric: recipe.NodeFabric | None) -> list[RenderedFile]:
        """container.env on every rank node; the model repository on the head (the workers load no model)."""
        text = render_template("container.env.j2", cluster=inventory.cluster.name,
                               env=self.container_env(inventory, node, fabric), per_node=not fabric,
                               per_node_names=" and ".join(recipe.PER_NODE_ENV))
        files = [RenderedFile("container.env", text)]
        if node.name == inventory.head.name:
            ranks = len(rank_names(inventory, profile))
            model = f"{REPOSITORY}/{model_name(profile.target)}"
            files += [RenderedFile(f"{model}/config.pbtxt", CONFIG_PBTXT.format(target=profile.target,
                                                                                 profile=profile.name)),
                      RenderedFile(f"{model}/1/model.json",
                                   json.dumps(self.engine_args(inventory, profile, 0, ranks), indent=2) + "\n")]
        return files

    def rendered(self, inventory: Inventory, profile: Profile) -> list[RenderedFile]:
        """The head's model repository, and each rank node's container.env under the node's name."""
        head = [item for item in self.config_files(inventory, profile, inventory.head, None)
                if item.path.startswith(REPOSITORY)]
        return head + [RenderedFile(f"{node.name}/container.env", item.content, item.mode)
                       for node in (inventory.nodes if profile.is_pair else [inventory.head])
                       for item in self.config_files(inventory, profile, node, None) if item.path == "container.env"]

    def engine_args(self, inventory: Inventory, profile: Profile, rank: int, ranks: int,
                    node: Node | None = None) -> dict[str, Any]:
        """vLLM's engine arguments for one rank on node (None: the head), in vLLM's Python names: model.json
        (rank 0) and, as flags, the workers' `vllm serve --headless`. The verified snapshot, the tensor x
        pipeline split, the ranks and the head's address node reaches, the draft, stats on (the backend reports
        vLLM's counters on Triton's metrics port only then), then the profile's serve_args."""
        args: dict[str, Any] = {"model": recipe.model_link(profile.target), "tensor_parallel_size": profile.tp_size}
        args |= {"pipeline_parallel_size": profile.pp_size} if profile.pp_size > 1 else {}
        if ranks > 1:
            head_port = recipe.ports_toward_head(inventory, node or inventory.head)[0]
            args |= {"distributed_executor_backend": "mp", "nnodes": ranks, "node_rank": rank,
                     "master_addr": str(inventory.head.links[head_port].ip),
                     "master_port": options(inventory).master_port}
        speculative = vllm_runtime.RUNTIME.speculative_config(profile)
        args |= {"speculative_config": speculative} if speculative else {}
        args["disable_log_stats"] = False
        return args | {arg_name(key): value for key, value in profile.serve_args.items()}

    def starts(self, inventory: Inventory, profile: Profile, nodes: list[str]) -> list[Start]:
        """tritonserver on the head (explicit model control, the profile's model loaded), then `vllm serve
        --headless` on every other rank node."""
        opts = options(inventory)
        server = ["tritonserver", "--model-repository", f"{recipe.CONFIG_DIR}/{REPOSITORY}",
                  "--model-control-mode", "explicit", "--load-model", model_name(profile.target),
                  "--http-port", str(inventory.server.port), "--grpc-port", str(opts.grpc_port),
                  "--metrics-port", str(opts.metrics_port)]
        starts = [Start(nodes[0], server, serves=True)]
        for rank, name in enumerate(nodes[1:], start=1):
            args = self.engine_args(inventory, profile, rank, len(nodes), inventory.node(name))
            args.pop("disable_log_stats")   # vLLM's default; `vllm serve` has no --no-disable-log-stats
            starts.append(Start(name, ["vllm", "serve", args.pop("model"), *flags_of(args), "--headless"]))
        return starts

    def engine_settings(self, profile: Profile) -> dict[str, Any]:
        return vllm_runtime.RUNTIME.engine_settings(profile)

    def draft_len(self, profile: Profile) -> int | None:
        return vllm_runtime.RUNTIME.draft_len(profile)

    def metrics_port(self, inventory: Inventory) -> int:
        port: int = options(inventory).metrics_port
        return port

    def other_ports(self, inventory: Inventory) -> dict[int, str]:
        """Triton's gRPC port (its HTTP port is server.port, its metrics port metrics_port)."""
        return {options(inventory).grpc_port: "the gRPC port in engines.triton.options"}

    def problems(self, inventory: Inventory, profile: Profile) -> list[str]:
        """A serve_args key that is no engine argument (model.json) or no `vllm serve` flag (the workers), one
        sparkpair sets itself; then vLLM's own checks of values and speculative_config keys."""
        known = vllm_runtime.definitions()
        version = f"vLLM {known['source']['version']}"
        engine, flags = set(known["engine_args"]), known["serve_options"]
        found, passed = [], {}
        for key, value in profile.serve_args.items():
            name = arg_name(key)
            if name in OWN_ARGS:
                found.append(f"serve_args.{key}: model.json's {name} is set by sparkpair from the inventory and the "
                             "profile; remove it")
            elif name not in engine:
                found.append(f"serve_args.{key}: {version}'s AsyncEngineArgs has no argument {name!r} (model.json "
                             "takes vLLM's engine arguments, Python names)")
            elif vllm_runtime.flag_of(name) not in flags:
                found.append(f"serve_args.{key}: {version}'s `vllm serve` has no flag {vllm_runtime.flag_of(name)} "
                             "for the worker ranks")
            else:
                passed[key] = value
        return found + vllm_runtime.RUNTIME.problems(inventory, replace(profile, serve_args=passed))

    def rank_log_paths(self, rank: int | None) -> list[str]:
        return [SERVE_LOG]

    def launcher_log(self, ranks: int) -> str | None:
        return None

    def image_needs(self, inventory: Inventory) -> tuple[str, ...]:
        """tritonserver on the head, vllm on the workers: NVIDIA's -vllm-python-py3 image holds both."""
        return ("tritonserver", "vllm")

    def image_needs_fix(self, inventory: Inventory, missing: list[str]) -> tuple[str, str]:
        return self.name, (f"Triton's vLLM image ({inventory.setting(self.name, 'image')} in the inventory; "
                           "NVIDIA's nvcr.io/nvidia/tritonserver:<yy.mm>-vllm-python-py3 holds tritonserver and vllm)")

    def cluster_script(self, inventory: Inventory) -> str | None:
        return None

    def stop_script(self) -> str:
        return "pkill -TERM -f '[t]ritonserver'; pkill -TERM -f '[v]llm serve'; true"

    def kill_script(self) -> str:
        return "pkill -KILL -f '[t]ritonserver|[t]riton_python_backend_stub|[v]llm serve|VLLM::'; true"


def arg_name(key: str) -> str:
    """A profile's serve_args key as vLLM's engine argument: max-model-len -> max_model_len."""
    return key.removeprefix("--").replace("-", "_")


def flags_of(args: Mapping[str, Any]) -> list[str]:
    """Engine arguments as `vllm serve` flags: true a switch, false its --no- form, a mapping its JSON."""
    argv: list[str] = []
    for name, value in args.items():
        flag = vllm_runtime.flag_of(name)
        if value is True or value is False:
            argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value, separators=(",", ":"))]
        else:
            argv += [flag, str(value)]
    return argv


def rank_names(inventory: Inventory, profile: Profile) -> list[str]:
    """The rank nodes' names, head first (every node for a profile of more than one rank)."""
    return [node.name for node in inventory.nodes] if profile.is_pair else [inventory.head.name]


RUNTIME = Triton()
