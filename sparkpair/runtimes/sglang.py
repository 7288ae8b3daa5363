"""SGLang across the pair: `python3 -m sglang.launch_server` on every rank node (`--nnodes`, `--node-rank`,
`--dist-init-addr` at the head's QSFP address), the head serving SGLang's OpenAI-compatible API, with an Eagle3
draft through its `--speculative-*` options.

Every option a profile sets (serve_args) is checked against SGLang's own definitions, derived from the real
package's ServerArgs parser (`sparkpair/data/sglang_server_args.json`, scripts/sglang_schema/derive.py names
the source); a name SGLang does not know is refused at render time, naming it and the nearest option. SGLang
takes no configuration file: a profile's engine_config is refused. The traps users report on Sparks are
refused here too, each with its source (docs/profiles.md#on-sglang): an environment that moves
SGLANG_HOST_IP or the NCCL/Gloo socket off the node's QSFP interface, NCCL settings that froze the warm-up
in a leftover /etc/nccl.conf, and a multi-node Eagle draft with `--speculative-eagle-topk` other than 1. Its
inventory options (`engines.sglang.options`, `SglangOptions`): the port of the rendezvous at
`--dist-init-addr`.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from sparkpair.inventory.schema import PORT
from sparkpair.inventory.validation import spec
from sparkpair.linepattern import followed_by
from sparkpair.render import RenderedFile, recipe, render_template
from sparkpair.render.recipe import Start
from sparkpair.runtimes import FailureLine, Metrics, ServingApi, StageSpec, Watch, engine_options
from sparkpair.runtimes.openai import OPENAI

if TYPE_CHECKING:
    from sparkpair.inventory import Inventory, Node
    from sparkpair.inventory.profiles import Profile

DATA = "sglang_server_args.json"
SERVE_LOG = f"{recipe.LOG_DIR}/serve.log"
# Options sparkpair sets from the inventory, the profile and the launch; a profile that sets one is refused.
OWN_FLAGS = ("--model-path", "--served-model-name", "--tp-size", "--pp-size", "--host", "--port", "--nnodes",
             "--node-rank", "--dist-init-addr", "--enable-metrics", "--speculative-algorithm",
             "--speculative-draft-model-path", "--speculative-num-steps")
SECRET_FLAGS = ("--api-key", "--admin-api-key", "--ssl-keyfile-password")
ALGORITHMS = {"Eagle3": "EAGLE3", "Eagle": "EAGLE", "DraftTarget": "STANDALONE"}
SHM_SIZE = "10.24g"   # the vLLM playbook's; SGLang's processes share tensors through /dev/shm too
# Set per node by sparkpair (its own QSFP address and interface): a value in the inventory's shared env would
# give every node the same one. Sources: MiaAI-Lab/Qwen3.8-Flash-Next-Dual-DGX-Sparks#3 (SGLANG_HOST_IP unset:
# the MessageQueue advertised the Wi-Fi address, both ranks hung after NCCL), al-engr.com's
# sglang-deepseek-spark-pivot (GLOO_SOCKET_IFNAME "missing from every guide").
PINNED_ENV = ("SGLANG_HOST_IP", "HOST_IP", "SGLANG_LOCAL_IP_NIC")
SOCKET_ENV = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
# NCCL reads /etc/nccl.conf and ~/.nccl.conf and the environment wins over both: a leftover /etc/nccl.conf in an
# image with both at 1 froze SGLang PyNccl's warm-up on Sparks (luxingcom/aicad-nccl-optimization#1), so every
# container gets NCCL's own defaults and an inventory that sets them to 1 is refused.
NCCL_CONF_TRAP = {"NCCL_IB_USE_INLINE": "0", "NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS": "0"}
TOPK_SOURCE = ("multi-node Eagle/MTP in SGLang needs --speculative-eagle-topk 1 (al-engr.com's two-Spark SGLang "
               "posts; SGLang 0.5.23 refuses MTP otherwise)")


@dataclass(frozen=True, kw_only=True)
class SglangOptions:
    """engines.sglang.options: the port of the rendezvous (`--dist-init-addr HEAD:PORT`, torch's store)."""

    dist_init_port: int = spec(PORT, 25000)   # sparkrun's


def options(inventory: Inventory) -> SglangOptions:
    """The inventory's engines.sglang.options (InventoryError naming a bad one)."""
    found: SglangOptions = engine_options(inventory, RUNTIME)
    return found


@cache
def definitions() -> dict[str, Any]:
    """SGLang's server options and ServerArgs fields, as derived from the pinned sglang package."""
    data: dict[str, Any] = json.loads(resources.files("sparkpair.data").joinpath(DATA).read_text())
    return data


def flag_of(name: str) -> str:
    """A profile's serve_args key as SGLang's long option: mem_fraction_static -> --mem-fraction-static."""
    return "--" + name.removeprefix("--").replace("_", "-")


def canonical(flag: str) -> str | None:
    """The option's own long name for flag or one of its aliases (--tensor-parallel-size -> --tp-size); None when
    SGLang has no such option (argparse's prefix matching is not followed: a profile spells options in full)."""
    known: dict[str, dict[str, Any]] = definitions()["options"]
    option = known.get(flag) or next((entry for entry in known.values() if flag in entry["aliases"]), None)
    if option is None:
        return None
    own = "--" + option["dest"].replace("_", "-")
    return own if own in known else flag


def _head_address(inventory: Inventory, node: Node | None = None) -> str:
    """The head's address on the cable or subnet node shares with it (the head's first for the head, or no node)."""
    head = inventory.head
    return str(head.links[recipe.ports_toward_head(inventory, node or head)[0]].ip)


def _own_twin(inventory: Inventory, node: Node) -> str:
    """node's interface toward the head: its SGLANG_HOST_IP's and Gloo's."""
    return recipe.ports_toward_head(inventory, node)[1]


def _value_problem(name: str, flag: str, option: dict[str, Any], value: Any) -> str | None:
    """What is wrong with value for one option (None: SGLang's parser takes it)."""
    if isinstance(value, bool):
        if value and option["value"]:
            return f"serve_args.{name}: {flag} takes a value, not true"
        if not value and option["default"] is True and canonical("--no-" + flag[2:]) is None:
            return f"serve_args.{name}: {flag} is on by default and SGLang has no --no-{flag[2:]}"
        return None
    if not option["value"]:
        return f"serve_args.{name}: {flag} is a switch; write true"
    kind = option["type"]
    if kind in ("int", "human_readable_int") and not isinstance(value, int):
        return f"serve_args.{name}: {flag} takes a whole number, not {value!r}"
    if kind == "float" and not isinstance(value, (int, float)):
        return f"serve_args.{name}: {flag} takes a number, not {value!r}"
    if option["choices"] and str(value) not in option["choices"]:
        return f"serve_args.{name}: {value!r} is not one of {', '.join(option['choices'])}"
    return None


class Sglang:
    """The SGLang runtime (see the module docstring)."""

    name = "sglang"
    title = "SGLang"
    # The launcher (python3 -m sglang.launch_server, or `sglang serve`) and the processes it starts, which SGLang
    # names sglang::scheduler_TP0, sglang::detokenizer.
    process_pattern = r"sglang\.launch_server|sglang serve|sglang::"
    # SGLang 0.5.23 counts verify calls but keeps acceptance as gauges (sparkpair/data/sglang_metrics.json).
    metrics = Metrics("/metrics", "sglang:num_requests_total", drafts="sglang:spec_verify_calls_total",
                      accept_length="sglang:spec_accept_length", accept_rate="sglang:spec_accept_rate",
                      needs="a draft SGLang loaded (`sparkpair logs`: the draft's `Load weight end` line) and "
                            "--enable-metrics, which sparkpair passes")
    api: ServingApi = OPENAI
    watch: Watch = Watch(every_s=10.0, exit_every_s=5.0, first_s=10.0)
    options_record: type[Any] = SglangOptions
    render_dir: str = "sglang"
    # NVIDIA's SGLang playbook (nvidia/sglang/README.md) runs one Spark only (--tp 1, port 30000, no multi-node
    # section): no two-Spark value of it to compare with; its image is the registry line's default.
    playbook: str | None = None
    playbook_fixes: Mapping[str, str] = {}
    cause_fixes: Mapping[str, str] = {
        "config.invalid": "the option under the profile's serve_args (models.PROFILE.variants.sglang.serve_args); "
                          "sparkpair inventory check validates it against SGLang's own definitions",
        "memory.oom": "lower mem_fraction_static or context_length in models.PROFILE.variants.sglang.serve_args",
        "memory.kvcache": "raise mem_fraction_static or lower context_length in "
                          "models.PROFILE.variants.sglang.serve_args",
    }
    # Its failure lines, each proven on a public log (tests/fixtures/logs/SOURCES.md: sglang_*.log).
    failure_lines: tuple[FailureLine, ...] = (
        FailureLine("memory.kvcache", r"Not enough memory(?: to allocate KV cache)?\. Please try to increase "
                                      r"--mem-fraction-static"),
        FailureLine("memory.held", r"The memory capacity is unbalanced\. Some GPUs may be occupied by other processes"),
        FailureLine("fabric.interface", r"failed to format addr, unknown family=\d+", "strong"),
        FailureLine("engine.died", r"Received sigquit from a child proc", "hint"),
        FailureLine("engine.died", followed_by(r"SIGQUIT received\.", r"It usually means one child failed"), "hint"),
        FailureLine("engine.died", r"\bScheduler hit an exception\b|\bRank \d+ scheduler died\b", "hint"),
    )
    fabric_proof: bool = False
    # SGLang 0.5.23 reads these only from its command line, where ps and docker inspect show them: refused in a
    # profile (SECRET_FLAGS), none is passed (sparkpair's own requests then need no key).
    secret_options: Mapping[str, str] = {}
    # The start as SGLang prints it on each node (tests/fixtures/logs/sglang: public logs, SOURCES.md). The ranks
    # wait on each other from the rendezvous until torch.distributed is up.
    stages: tuple[StageSpec, ...] = (
        StageSpec("launcher", "sglang.launch_server started: its arguments",
                  (r"\bserver_args=ServerArgs\(", r"\bsglang\.launch_server' is still supported\b"),
                  "SGLang start-up", 300.0),
        StageSpec("distributed", "torch.distributed and NCCL are joining the ranks at --dist-init-addr",
                  (r"\bworld_size=\d+ rank=\d+ local_rank=\d+ distributed_init_method=", r"\bInit torch distributed "
                   r"begin\b", r"\bsglang is using nccl==", r"\bCustomAllreduce is disabled because\b"),
                  "torch.distributed", 300.0, alone=False, finished=r"\bInit torch distributed ends\b"),
        StageSpec("model", "loading the weights (target, then draft)",
                  (r"\bLoad weight begin\b", r"\bUsing model weights format\b"), "model load", 600.0,
                  finished=r"\bLoad weight end\b"),
        StageSpec("kvcache", "allocating the KV cache pool",
                  (r"\bKV Cache is allocated\b", r"\bMemory pool end\b", r"\bmax_total_num_tokens=\d+"),
                  "KV cache", 900.0),
        StageSpec("compile", "capturing CUDA graphs", (r"\bCapture cuda graph begin\b",), "compile", 1800.0,
                  finished=r"\bCapture cuda graph end\b"),
        StageSpec("http", "the HTTP server is up and SGLang warms it up with a first request",
                  (r"\bUvicorn running on\b", r"\bApplication startup complete\b"), "warm-up", 300.0),
        StageSpec("serving", "SGLang says it serves", (r"The server is fired up and ready to roll!",),
                  "server start", 300.0),
    )

    def image(self, inventory: Inventory) -> str:
        return inventory.engine(self.name).image or inventory.container.image

    def container_name(self, inventory: Inventory) -> str:
        return inventory.engine(self.name).name or inventory.container.name

    def container_env(self, inventory: Inventory, node: Node, fabric: recipe.NodeFabric | None) -> dict[str, str]:
        """Each node's own QSFP address as SGLANG_HOST_IP (what SGLang's cross-node MessageQueue advertises),
        Gloo and NCCL's sockets on its cabled twins, NCCL's defaults over a leftover /etc/nccl.conf, the node's
        own NCCL_IB_HCA and GID index, both halves of the cabled port as one NIC, recipe.SERVING_ENV."""
        own = _own_twin(inventory, node)
        env = {
            "SGLANG_HOST_IP": str(node.links[own].ip),
            "GLOO_SOCKET_IFNAME": own,
            "NCCL_SOCKET_IFNAME": ",".join(node.links),
            **NCCL_CONF_TRAP,
            **(fabric.env() if fabric else {}),
            **recipe.merged_halves(node),
            **recipe.SERVING_ENV,
        }
        env.update(inventory.engine(self.name).env)
        env.update(inventory.container.env)
        return env

    def container_spec(self, inventory: Inventory, node: Node, home: str, *, gpus: bool, infiniband: bool,
                       fabric: recipe.NodeFabric | None) -> recipe.ContainerSpec:
        """The recipe's `docker run` (host network, memlock, the same mounts) with SGLang's image, name and
        environment and a /dev/shm of its own; the launch runs in it by `docker exec` (`starts`)."""
        spec_ = recipe.container_spec(inventory, node, home, gpus=gpus, infiniband=infiniband, fabric=fabric)
        mounts = {target: mount for target, mount in spec_.mounts.items() if target != recipe.HOST_KEY}
        return replace(spec_, image=self.image(inventory), name=self.container_name(inventory),
                       command=["sleep", "infinity"], env=self.container_env(inventory, node, fabric), mounts=mounts,
                       ipc_host=False, shm_size=SHM_SIZE)

    def config_files(self, inventory: Inventory, profile: Profile, node: Node,
                     fabric: recipe.NodeFabric | None) -> list[RenderedFile]:
        text = render_template("container.env.j2", cluster=inventory.cluster.name,
                               env=self.container_env(inventory, node, fabric), per_node=not fabric,
                               per_node_names=" and ".join(recipe.PER_NODE_ENV))
        return [RenderedFile("container.env", text)]

    def rendered(self, inventory: Inventory, profile: Profile) -> list[RenderedFile]:
        """Each rank node's container.env (its own SGLANG_HOST_IP), under the node's name."""
        nodes = inventory.nodes if profile.is_pair else [inventory.head]
        return [RenderedFile(f"{node.name}/container.env", item.content, item.mode)
                for node in nodes for item in self.config_files(inventory, profile, node, None)]

    def starts(self, inventory: Inventory, profile: Profile, nodes: list[str]) -> list[Start]:
        return [Start(node, self.serve_argv(inventory, profile, rank, len(nodes), node), serves=rank == 0)
                for rank, node in enumerate(nodes)]

    def serve_argv(self, inventory: Inventory, profile: Profile, rank: int, ranks: int, node: str) -> list[str]:
        """`python3 -m sglang.launch_server` for one rank on node: the verified snapshot served under the repo id,
        the tensor x pipeline split, the ranks and the rendezvous at the head's address on the link node shares
        with it, /metrics on, the draft, then the profile's own options."""
        argv = ["python3", "-m", "sglang.launch_server", "--model-path", recipe.model_link(profile.target),
                "--served-model-name", profile.target, "--tp-size", str(profile.tp_size)]
        argv += ["--pp-size", str(profile.pp_size)] if profile.pp_size > 1 else []
        argv += ["--host", "0.0.0.0", "--port", str(inventory.server.port), "--enable-metrics"]
        if ranks > 1:
            head = _head_address(inventory, inventory.node(node))
            argv += ["--nnodes", str(ranks), "--node-rank", str(rank),
                     "--dist-init-addr", f"{head}:{options(inventory).dist_init_port}"]
        argv += self.speculative_argv(profile)
        for name, value in profile.serve_args.items():
            flag = flag_of(name)
            if value is True:
                argv.append(flag)
            elif value is False:
                argv += [] if canonical("--no-" + flag[2:]) is None else ["--no-" + flag[2:]]
            else:
                argv += [flag, str(value)]
        return argv

    def speculative_argv(self, profile: Profile) -> list[str]:
        """The draft's options: algorithm, verified snapshot, steps (max_draft_len), topk 1 and steps + 1 draft
        tokens unless the profile gives them (empty without a draft)."""
        if not profile.draft:
            return []
        steps = self.draft_len(profile) or 3
        own = {flag_of(name): value for name, value in profile.serve_args.items()}
        argv = ["--speculative-algorithm", ALGORITHMS.get(profile.decoding_type or "Eagle3", "EAGLE3"),
                "--speculative-draft-model-path", recipe.model_link(profile.draft),
                "--speculative-num-steps", str(steps)]
        argv += [] if "--speculative-eagle-topk" in own else ["--speculative-eagle-topk", "1"]
        argv += [] if "--speculative-num-draft-tokens" in own else ["--speculative-num-draft-tokens", str(steps + 1)]
        return argv

    def engine_settings(self, profile: Profile) -> dict[str, Any]:
        """SGLang takes command-line options only: the draft's, as doctor compares them."""
        argv = self.speculative_argv(profile)
        return {argv[i].removeprefix("--"): argv[i + 1] for i in range(0, len(argv), 2)}

    def draft_len(self, profile: Profile) -> int | None:
        """--speculative-num-steps: the profile's max_draft_len, 3 when it names none."""
        return (profile.max_draft_len or 3) if profile.draft else None

    def metrics_port(self, inventory: Inventory) -> int:
        return inventory.server.port

    def other_ports(self, inventory: Inventory) -> dict[int, str]:
        return {}

    def problems(self, inventory: Inventory, profile: Profile) -> list[str]:
        known = definitions()
        version = f"SGLang {known['source']['version']}"
        found = []
        for name, value in profile.serve_args.items():
            flag = canonical(flag_of(name))
            if flag is None:
                near = difflib.get_close_matches(flag_of(name), known["options"], n=1)
                found.append(f"serve_args.{name}: {version}'s launch_server has no option {flag_of(name)}"
                             + (f" (did you mean {near[0][2:].replace('-', '_')}?)" if near else ""))
            elif flag in SECRET_FLAGS:
                found.append(f"serve_args.{name}: SGLang takes {flag} only on its command line, where ps and docker "
                             "inspect show it; sparkpair does not pass secrets there: remove it")
            elif flag in OWN_FLAGS:
                found.append(f"serve_args.{name}: {flag} is set by sparkpair from the inventory and the profile; "
                             "remove it")
            elif problem := _value_problem(name, flag, known["options"][flag], value):
                found.append(problem)
        topk = next((value for name, value in profile.serve_args.items()
                     if canonical(flag_of(name)) == "--speculative-eagle-topk"), 1)
        if profile.draft and profile.is_pair and topk != 1:
            found.append(f"serve_args.speculative_eagle_topk: {topk} across nodes; {TOPK_SOURCE}: write 1")
        found += [f"engine_config.{key}: SGLang takes no configuration file; give launch_server options as "
                  f"serve_args (serve_args.{key})" for key in profile.engine_config]
        return found + env_problems(inventory)

    def rank_log_paths(self, rank: int | None) -> list[str]:
        return [SERVE_LOG]   # every rank's launch_server writes its own node's serve.log

    def launcher_log(self, ranks: int) -> str | None:
        return None

    def image_needs(self, inventory: Inventory) -> tuple[str, ...]:
        return ()   # SGLang's image is whole (launch_server is the only mode): nothing worth a container start

    def image_needs_fix(self, inventory: Inventory, missing: list[str]) -> tuple[str, str]:
        return self.name, (f"an SGLang image (lmsysorg/sglang:latest-cu130, NVIDIA's SGLang playbook's) in "
                           f"{inventory.setting(self.name, 'image')}")

    def cluster_script(self, inventory: Inventory) -> str | None:
        return None

    def stop_script(self) -> str:
        return "pkill -TERM -f '[s]glang.launch_server|[s]glang serve'; true"

    def kill_script(self) -> str:
        return "pkill -KILL -f '[s]glang.launch_server|[s]glang serve|[s]glang::'; true"


def env_problems(inventory: Inventory) -> list[str]:
    """The inventory's environment for SGLang against the traps users report on Sparks (see PINNED_ENV,
    SOCKET_ENV, NCCL_CONF_TRAP): one line each naming the variable and the fix."""
    env = {**inventory.engine(RUNTIME.name).env, **inventory.container.env}
    twins = {twin for node in inventory.nodes for twin in node.links}
    where = inventory.setting(RUNTIME.name, "env")
    found = [f"{where}.{key}: sparkpair sets it to each node's own QSFP address (one value here would give every "
             "node the same; unset, SGLang advertises the LAN or IPv6 address and hangs after NCCL "
             "init, MiaAI-Lab/Qwen3.8-Flash-Next-Dual-DGX-Sparks#3); remove it" for key in PINNED_ENV if key in env]
    for key in SOCKET_ENV:
        names = [part.lstrip("=^") for part in env.get(key, "").split(",") if part]
        if any(name not in twins for name in names):
            found.append(f"{where}.{key}: {env[key]} is not a QSFP interface of the inventory ({', '.join(sorted(twins))});"
                         " SGLang's Gloo and NCCL sockets must stay on the cabled twins; remove it")
    found += [f"{where}.{key}: 1 froze SGLang's NCCL warm-up on Sparks (a leftover /etc/nccl.conf, "
              f"luxingcom/aicad-nccl-optimization#1); remove it (sparkpair sets {value})"
              for key, value in NCCL_CONF_TRAP.items() if env.get(key, value) != value]
    return found


RUNTIME = Sglang()
