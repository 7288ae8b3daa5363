"""vLLM across the pair: `vllm serve` on every rank node, natively (`--nnodes`/`--node-rank`, the worker
`--headless`) or on a two-node Ray cluster (NVIDIA's vLLM playbook), with an Eagle3 draft through
`--speculative-config`.

Every flag (serve_args) and every speculative-config key (engine_config.speculative_config) a profile sets
is checked against vLLM's own definitions, derived from the real package (`sparkpair/data/vllm_serve.json`,
scripts/vllm_schema/derive.py names the source of each part); a name vLLM does not know is refused at
render time, naming it. Its inventory options (`engines.vllm.options`, `VllmOptions`): the multi-node mode
and the ports of torch.distributed's and Ray's rendezvous.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from sparkpair.inventory.profiles import capture_problems
from sparkpair.inventory.schema import PORT
from sparkpair.inventory.validation import Choice, spec
from sparkpair.render import RenderedFile, recipe, render_template
from sparkpair.render.recipe import Start
from sparkpair.runtimes import FailureLine, Metrics, ServingApi, StageSpec, Watch, engine_options
from sparkpair.runtimes.openai import OPENAI

if TYPE_CHECKING:
    from sparkpair.inventory import Inventory, Node
    from sparkpair.inventory.profiles import Profile

DATA = "vllm_serve.json"
SERVE_LOG = f"{recipe.LOG_DIR}/serve.log"
RAY_LOG = f"{recipe.LOG_DIR}/ray.log"      # `ray start`'s output in Ray mode (the start's log="ray")
# What vLLM sets the same as a flag sparkpair passes, by another name (a profile setting one is refused, as one
# setting a flag of `owned_flags`): the positional model's --model, --speculative-config's keys (vllm/engine/
# arg_utils.py: create_speculative_config), a file of any options (--config), the HF token sparkpair hands over as
# HF_TOKEN_PATH, and the other factors of the world the split is checked against (vllm/config/parallel.py:
# world_size = pp x tp x pcp; data parallel runs dp of them: every --data-parallel-* option).
SAME_BY_OTHER_NAMES = ("--model", "--spec-method", "--spec-model", "--spec-tokens", "--config", "--hf-token",
                       "--prefill-context-parallel-size")
WORLD_PREFIXES = ("--data-parallel", "--no-data-parallel")
SHM_SIZE = "10.24g"  # NVIDIA's vLLM playbook (run_cluster.sh)
CONNECTOR = "vllm_hidden_states"   # train-draft's capture: vLLM's hidden-states connector, any device (package data)
DECODING_METHODS = {"Eagle3": "eagle3", "Eagle": "eagle", "DraftTarget": "draft_model"}
ENGINE_CONFIG_KEYS = ("speculative_config",)   # what a profile's engine_config may hold for vLLM


@dataclass(frozen=True, kw_only=True)
class VllmOptions:
    """engines.vllm.options: how the ranks form one engine, and the rendezvous ports."""

    multinode: str = spec(Choice("native", "ray"), "native")   # native: --nnodes/--node-rank; ray: NVIDIA's playbook
    master_port: int = spec(PORT, 29501)
    ray_port: int = spec(PORT, 6379)


def options(inventory: Inventory) -> VllmOptions:
    """The inventory's engines.vllm.options (InventoryError naming a bad one)."""
    found: VllmOptions = engine_options(inventory, RUNTIME)
    return found


@cache
def definitions() -> dict[str, Any]:
    """vLLM's serve options and speculative-config keys, as derived from the pinned vLLM package."""
    data: dict[str, Any] = json.loads(resources.files("sparkpair.data").joinpath(DATA).read_text())
    return data


def flag_of(name: str) -> str:
    """A profile's serve_args key as vLLM's long option: max_model_len -> --max-model-len."""
    return "--" + name.removeprefix("--").replace("_", "-")


def _head_address(inventory: Inventory, node: Node | None = None) -> str:
    """The head's address that node reaches: on the cable or subnet node shares with the head (in a ring each
    worker has its own cable to it); the head's first address for the head itself, or no node."""
    head = inventory.head
    return str(head.links[recipe.ports_toward_head(inventory, node or head)[0]].ip)


def _own_twin(inventory: Inventory, node: Node) -> str:
    """node's interface toward the head (the head's own: its first): its VLLM_HOST_IP, Gloo's and TP's socket."""
    return recipe.ports_toward_head(inventory, node)[1]


class Vllm:
    """The vLLM runtime (see the module docstring)."""

    name = "vllm"
    title = "vLLM"
    # Rank processes: the API server and `vllm serve` itself, vLLM's engine core and workers (setproctitle
    # names them VLLM::EngineCore, VLLM::Worker_TP1, ...), and Ray's workers in Ray mode.
    process_pattern = r"vllm serve|VLLM::|ray::RayWorkerWrapper"
    metrics = Metrics("/metrics", "vllm:request_success_total", "vllm:spec_decode_num_draft_tokens_total",
                      "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_drafts_total",
                      needs="a speculative_config that vLLM accepted: `sparkpair status` shows the draft, "
                            "`sparkpair logs` its 'Loading drafter model' line")
    api: ServingApi = OPENAI
    watch: Watch = Watch(every_s=10.0, exit_every_s=5.0, first_s=10.0)
    options_record: type[Any] = VllmOptions
    render_dir: str = "vllm"
    playbook: str | None = "vllm"
    playbook_fixes: Mapping[str, str] = {"flags.tensor-parallel-size": "set {profile}.tp_size: {value}",
                      "flags.distributed-executor-backend": "set engines.vllm.options.multinode: ray (NVIDIA's Ray "
                                                            "cluster)"}
    cause_fixes: Mapping[str, str] = {
        "config.invalid": "the flag under the profile's serve_args, or the key under engine_config.speculative_config; "
                          "sparkpair inventory check validates both against vLLM's own definitions",
        "memory.oom": "lower gpu_memory_utilization or max_model_len in the profile's serve_args "
                      "(models.PROFILE.variants.vllm.serve_args for a profile of another runtime)",
        "memory.kvcache": "lower max_model_len (models.PROFILE.variants.vllm.serve_args.max_model_len) or raise "
                          "gpu_memory_utilization",
        "engine.ray": "engines.vllm.options.multinode: native in the inventory (the default: no Ray); for Ray mode "
                      "an image with ray[default] installed, as NVIDIA's playbook does",
        "ray.placement": "VLLM_HOST_IP is the node's QSFP twin address (sparkpair sets it); or leave Ray: "
                         "engines.vllm.options.multinode: native (the default)",
    }
    failure_lines: tuple[FailureLine, ...] = ()   # its lines are engine.signatures' own
    fabric_proof: bool = False
    # The start as vLLM 0.32 prints it (tests/fixtures/logs/vllm: real logs of the simulated pair's vLLM). The
    # ranks wait on each other while torch.distributed joins them and while KV cache sizes are agreed.
    stages: tuple[StageSpec, ...] = (
        StageSpec("launcher", "vllm serve started: its version and arguments",
                  (r"\bvLLM API server version\b", r"\bnon-default args:", r"\bLaunching vLLM \(v",
                   r"\bheadless multiproc executor\b"), "vLLM start-up", 300.0),
        StageSpec("distributed", "torch.distributed is joining the ranks (Gloo/NCCL world)",
                  (r"\bworld_size=\d+ rank=\d+", r"\bdistributed_init_method="), "torch.distributed", 300.0, alone=False),
        StageSpec("model", "loading the model weights (target, then draft)",
                  (r"\bStarting to load model\b", r"\bLoading weights took\b", r"\bLoading safetensors checkpoint",
                   r"\bLoading drafter model\b"), "model load", 600.0, finished=r"\bModel loading took\b"),
        StageSpec("compile", "torch.compile and CUDA graph capture",
                  (r"\btorch\.compile\b", r"\bCompiling a graph\b", r"\bDynamo bytecode transform\b",
                   r"\bCapturing CUDA graphs?\b", r"\bWarming up model for the compilation\b",
                   r"\bsaved AOT compiled function\b"), "compile", 1800.0),
        StageSpec("kvcache", "profiling memory and allocating the KV cache",
                  (r"\bAvailable KV cache memory\b", r"\bKV cache size: \d", r"\bMaximum concurrency for\b",
                   r"\binit engine \(profile, create kv cache", r"\bGiB for KV cache on node\b",
                   r"\bdrafter KV cache initialized\b"), "KV cache", 900.0),
        StageSpec("serving", "the OpenAI API server is up",
                  (r"\bStarting vLLM API server\b", r"\bUvicorn running on\b", r"\bApplication startup complete\b"),
                  "server start", 300.0),
    )

    # vLLM reads its API key from VLLM_API_KEY when --api-key is not given (vllm/entrypoints/serve/middleware/
    # register.py): launch places the value as a 0600 file and the serve command exports it from there.
    secret_options: Mapping[str, str] = {"--api-key": "VLLM_API_KEY"}

    def image(self, inventory: Inventory) -> str:
        return inventory.engine(self.name).image or inventory.container.image

    def container_name(self, inventory: Inventory) -> str:
        return inventory.engine(self.name).name or inventory.container.name

    def container_env(self, inventory: Inventory, node: Node, fabric: recipe.NodeFabric | None) -> dict[str, str]:
        """The playbook's per-node variables: VLLM_HOST_IP is the node's own QSFP address on its twin toward the
        head (a pair's: its first); Gloo, TP and NCCL's socket traffic stay on the cabled ports; NCCL_IB_HCA and
        the GID index are the node's own; recipe.SERVING_ENV and VLLM_CACHE_ENV (the HF cache offline, the compile
        caches)."""
        twins = list(node.links)
        own = _own_twin(inventory, node)
        env = {
            "VLLM_HOST_IP": str(node.links[own].ip),
            "GLOO_SOCKET_IFNAME": own,
            "TP_SOCKET_IFNAME": own,
            "NCCL_SOCKET_IFNAME": ",".join(twins),
            "UCX_NET_DEVICES": ",".join(twins),
            "OMPI_MCA_btl_tcp_if_include": own,
            **(fabric.env() if fabric else {}),
            **recipe.merged_halves(node),
            **recipe.SERVING_ENV, **recipe.VLLM_CACHE_ENV,
        }
        if options(inventory).multinode == "ray":
            env |= {"RAY_memory_monitor_refresh_ms": "0", "MASTER_ADDR": _head_address(inventory, node)}
        env.update(inventory.engine(self.name).env)
        env.update(inventory.container.env)
        return env

    def container_spec(self, inventory: Inventory, node: Node, home: str, *, gpus: bool, infiniband: bool,
                       fabric: recipe.NodeFabric | None) -> recipe.ContainerSpec:
        """The recipe's `docker run` (host network, memlock, the same mounts) with vLLM's image, name and
        environment, and NVIDIA's vLLM playbook's `--shm-size 10.24g` in a private IPC namespace (vLLM's
        processes share memory through /dev/shm); the commands run in it by `docker exec` (`starts`)."""
        spec = recipe.container_spec(inventory, node, home, gpus=gpus, infiniband=infiniband, fabric=fabric)
        mounts = {target: mount for target, mount in spec.mounts.items() if target != recipe.HOST_KEY}
        return replace(spec, image=self.image(inventory), name=self.container_name(inventory),
                       command=["sleep", "infinity"], env=self.container_env(inventory, node, fabric), mounts=mounts,
                       ipc_host=False, shm_size=SHM_SIZE)

    def config_files(self, inventory: Inventory, profile: Profile, node: Node,
                     fabric: recipe.NodeFabric | None) -> list[RenderedFile]:
        text = render_template("container.env.j2", cluster=inventory.cluster.name,
                               env=self.container_env(inventory, node, fabric), per_node=not fabric,
                               per_node_names=" and ".join(recipe.PER_NODE_ENV))
        connector = resources.files("sparkpair.data").joinpath(f"{CONNECTOR}.py").read_text(encoding="utf-8")
        return [RenderedFile("container.env", text)] + \
            ([RenderedFile(f"{CONNECTOR}.py", connector, 0o644)] if profile.capture_hidden_states else [])

    def rendered(self, inventory: Inventory, profile: Profile) -> list[RenderedFile]:
        """Each rank node's container.env (its own VLLM_HOST_IP), under the node's name."""
        nodes = inventory.nodes if profile.is_pair else [inventory.head]
        return [RenderedFile(f"{node.name}/container.env", item.content, item.mode)
                for node in nodes for item in self.config_files(inventory, profile, node, None)]

    def starts(self, inventory: Inventory, profile: Profile, nodes: list[str]) -> list[Start]:
        if len(nodes) > 1 and options(inventory).multinode == "ray":
            return self._ray_starts(inventory, profile, nodes)
        return [Start(node, self.serve_argv(inventory, profile, rank, len(nodes), node=node), serves=rank == 0,
                      secret_env=self._secret_env(profile)) for rank, node in enumerate(nodes)]

    def _ray_starts(self, inventory: Inventory, profile: Profile, nodes: list[str]) -> list[Start]:
        """NVIDIA's playbook: a Ray head on the serving node, the other nodes join it, then `vllm serve
        --distributed-executor-backend ray` on the head once Ray counts every node."""
        port = str(options(inventory).ray_port)
        head_ip = _head_address(inventory)
        status = f"ray status --address {head_ip}:{port}"
        starts = [Start(nodes[0], ["ray", "start", "--block", "--head", "--port", port, "--node-ip-address", head_ip],
                        log="ray", until=f"{status} >/dev/null 2>&1", until_means="the Ray head is up")]
        for name in nodes[1:]:
            node = inventory.node(name)
            starts.append(Start(name, ["ray", "start", "--block", "--address", f"{_head_address(inventory, node)}:{port}",
                                       "--node-ip-address", str(node.links[_own_twin(inventory, node)].ip)], log="ray"))
        last = f"ray status --address {_head_address(inventory, inventory.node(nodes[-1]))}:{port}"
        joined = f'test "$({last} 2>/dev/null | grep -c " node_")" -ge {len(nodes)}'
        starts[-1] = replace(starts[-1], until=joined, until_means=f"the Ray cluster has {len(nodes)} nodes (ray status)")
        return starts + [Start(nodes[0], self.serve_argv(inventory, profile, 0, len(nodes), ray=True), serves=True,
                               secret_env=self._secret_env(profile))]

    def _secret_env(self, profile: Profile) -> tuple[str, ...]:
        return tuple(env for option, env in self.secret_options.items() if option in map(flag_of, profile.serve_args))

    def serve_argv(self, inventory: Inventory, profile: Profile, rank: int, ranks: int, ray: bool = False,
                   node: str | None = None) -> list[str]:
        """`vllm serve` for one rank on node (None: the head): the verified snapshot under the repo id's name,
        the nodes' addresses (--master-addr: the head's address on the link node shares with it) and ranks, the
        tensor x pipeline split, the draft, then the profile's own flags."""
        capture = profile.capture_hidden_states
        argv = ["env", f"PYTHONPATH={recipe.CONFIG_DIR}"] if capture else []   # the capture's connector
        argv += ["vllm", "serve", recipe.model_link(profile.target), "--served-model-name", profile.target,
                "--host", "0.0.0.0", "--port", str(inventory.server.port),
                "--tensor-parallel-size", str(profile.tp_size)]
        argv += ["--pipeline-parallel-size", str(profile.pp_size)] if profile.pp_size > 1 else []
        if ray:
            argv += ["--distributed-executor-backend", "ray"]
        elif ranks > 1:
            argv += ["--distributed-executor-backend", "mp", "--nnodes", str(ranks), "--node-rank", str(rank),
                     "--master-addr", _head_address(inventory, inventory.node(node) if node else None),
                     "--master-port", str(options(inventory).master_port)]
            argv += ["--headless"] if rank > 0 else []
        speculative = self.speculative_config(profile)
        if speculative:
            argv += ["--speculative-config", json.dumps(speculative, separators=(",", ":"))]
        if capture:  # vLLM's extract_hidden_states: rank 0 writes one file per request, its path in the answer
            argv += ["--kv-transfer-config", json.dumps({
                "kv_connector": "SparkpairHiddenStatesConnector", "kv_connector_module_path": CONNECTOR,
                "kv_role": "kv_producer", "kv_connector_extra_config": {
                    "shared_storage_path": f"{recipe.HIDDEN_STATES_DIR}/{capture['folder']}"}},
                separators=(",", ":")), "--no-enable-chunked-prefill"]
        for name, value in profile.serve_args.items():
            flag = flag_of(name)
            if flag in self.secret_options:
                continue  # never in argv: the serve command reads it from its file (`starts`: secret_env)
            if value is True:
                argv.append(flag)
            elif value is False:
                argv.append("--no-" + flag[2:])
            else:
                argv += [flag, str(value)]
        return argv

    def speculative_config(self, profile: Profile) -> dict[str, Any]:
        """--speculative-config: the draft's method, its verified snapshot, the draft length, then the
        profile's own keys (empty without a draft); capturing hidden states, vLLM's extract_hidden_states at the
        draft config's auxiliary layers and the last layer (its output before the final norm)."""
        capture = profile.capture_hidden_states
        if capture:
            layers = [*capture["layers"], capture["last"]]
            return {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                    "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": layers}}}
        if not profile.draft:
            return {}
        return {"method": DECODING_METHODS.get(profile.decoding_type or "Eagle3", "eagle3"),
                "model": recipe.model_link(profile.draft), "num_speculative_tokens": profile.max_draft_len or 3,
                **_own_speculative(profile)}

    def engine_settings(self, profile: Profile) -> dict[str, Any]:
        speculative = self.speculative_config(profile)
        return {"speculative_config": speculative} if speculative else {}

    def draft_len(self, profile: Profile) -> int | None:
        """num_speculative_tokens: the profile's max_draft_len, 3 when it names none."""
        return (profile.max_draft_len or 3) if profile.draft else None

    def metrics_port(self, inventory: Inventory) -> int:
        return inventory.server.port

    def owned_flags(self, inventory: Inventory, profile: Profile) -> set[str]:
        """The options sparkpair sets: every flag of every serve line it builds for the profile (one rank or several,
        native or Ray, a pipeline, a draft), and what vLLM sets the same by other names (SAME_BY_OTHER_NAMES, every
        option of WORLD_PREFIXES)."""
        bare = replace(profile, serve_args={}, pp_size=2, draft=profile.draft or "org/draft")
        lines = [self.serve_argv(inventory, bare, rank, 2) for rank in (0, 1)] + [self.serve_argv(inventory, bare, 0, 2,
                                                                                                  ray=True)]
        world = [flag for flag in definitions()["serve_options"] if flag.startswith(WORLD_PREFIXES)]
        return {arg for argv in lines for arg in argv if arg.startswith("--")} | {*SAME_BY_OTHER_NAMES, *world}

    def other_ports(self, inventory: Inventory) -> dict[int, str]:
        return {}

    def problems(self, inventory: Inventory, profile: Profile) -> list[str]:
        known = definitions()
        options: dict[str, dict[str, Any]] = known["serve_options"]
        version = f"vLLM {known['source']['version']}"
        found = capture_problems(profile.capture_hidden_states)
        if found:   # not a capture sparkpair can render (nor build a serve line of)
            return found
        owned = self.owned_flags(inventory, profile)
        for name, value in profile.serve_args.items():
            flag = flag_of(name)
            if flag in owned:
                found.append(f"serve_args.{name}: {flag} is set by sparkpair from the inventory; remove it")
            elif flag not in options:
                found.append(f"serve_args.{name}: {version}'s `vllm serve` has no option {flag}")
            elif isinstance(value, bool) and options[flag]["value"] and not (value is False and "--no-" + flag[2:]
                                                                            in options):
                found.append(f"serve_args.{name}: {flag} takes a value, not {str(value).lower()}")
            elif not isinstance(value, bool) and not options[flag]["value"]:
                found.append(f"serve_args.{name}: {flag} is a switch; write true")
            elif options[flag]["choices"] and not isinstance(value, bool) and str(value) not in options[flag]["choices"]:
                found.append(f"serve_args.{name}: {value!r} is not one of {', '.join(options[flag]['choices'])}")
        for key, value in profile.engine_config.items():
            if key not in ENGINE_CONFIG_KEYS:
                found.append(f"engine_config.{key}: vLLM's engine_config holds only {', '.join(ENGINE_CONFIG_KEYS)}; "
                             f"give `vllm serve` options as serve_args (serve_args.{key})")
            elif not isinstance(value, dict):
                found.append(f"engine_config.{key}: a mapping of {version}'s SpeculativeConfig keys")
        keys = set(known["speculative_config"]["keys"])
        for key in _own_speculative(profile):
            if key not in keys:
                found.append(f"engine_config.speculative_config.{key}: {version}'s SpeculativeConfig has no key "
                             f"{key!r}")
            elif key in ("method", "model", "num_speculative_tokens"):
                found.append(f"engine_config.speculative_config.{key}: set by sparkpair from the profile's draft, "
                             "decoding_type and max_draft_len; remove it")
        method = self.speculative_config(profile).get("method")
        if method is not None and method not in known["speculative_config"]["methods"]:
            found.append(f"decoding_type: {version} has no speculative method {method!r}")
        return found

    def rank_log_paths(self, rank: int | None) -> list[str]:
        return [SERVE_LOG, RAY_LOG]  # every rank's `vllm serve` writes its own node's serve.log (Ray mode: ray.log)

    def launcher_log(self, ranks: int) -> str | None:
        return None

    def image_needs(self, inventory: Inventory) -> tuple[str, ...]:
        """vllm, and Ray's CLI in Ray mode (NVIDIA's vLLM image has no Ray: its playbook installs it)."""
        return ("vllm", "ray") if options(inventory).multinode == "ray" else ("vllm",)

    def image_needs_fix(self, inventory: Inventory, missing: list[str]) -> tuple[str, str]:
        """Ray missing: an image with it, or native mode; vllm missing: vLLM's image."""
        mode = f"{self.name}, {options(inventory).multinode} mode"
        if "ray" in missing:
            return mode, ("an image with ray[default] installed (NVIDIA's vLLM playbook pip-installs it), or "
                          "engines.vllm.options.multinode: native in the inventory")
        return mode, f"the engine image for {self.name} ({inventory.setting(self.name, 'image')} in the inventory)"

    def cluster_script(self, inventory: Inventory) -> str | None:
        """In Ray mode: how many nodes `ray status` counts, as `ray: N nodes`."""
        ray = options(inventory)
        if ray.multinode != "ray":
            return None
        status = f"ray status --address {_head_address(inventory)}:{ray.ray_port}"
        return f'echo "ray: $({status} 2>/dev/null | grep -c " node_") nodes"'

    def stop_script(self) -> str:
        return "pkill -TERM -f '[v]llm serve'; pkill -TERM -f '[r]ay start'; true"

    def kill_script(self) -> str:
        return "pkill -KILL -f '[v]llm serve|VLLM::|[r]ay::|[r]aylet|[g]cs_server'; ray stop --force >/dev/null 2>&1; true"


def _own_speculative(profile: Profile) -> dict[str, Any]:
    """The profile's engine_config.speculative_config (empty when it gives none, or not a mapping)."""
    own = profile.engine_config.get("speculative_config")
    return own if isinstance(own, dict) else {}


RUNTIME = Vllm()
