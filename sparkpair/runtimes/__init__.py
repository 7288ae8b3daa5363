"""Runtimes: what one serving engine (TensorRT-LLM, vLLM) needs that the others do not, behind one seam.

Everything any engine shares lives in `engine` (containers, models, readiness, the watch, status,
logs, bundle, the diagnose framework, launch state), `checks` and `bench`, and asks the profile's
`Runtime` for the rest: the image and container of the engine, each node's container environment and
config files, the commands that start it on each node, the check of its settings (its inventory
options, the profile's serve_args and engine_config) against the engine's own definitions, where each
rank writes its output, how to find and stop its processes, how its HTTP server is asked whether it
serves (`ServingApi`), its Prometheus names and port, the stages of its start with their stall limits
and how often its start is worth watching, its playbook values and fix texts, the failure lines only it prints
(`FailureLine`, which diagnose merges with the shared ones). Holds the `Runtime`
protocol, `runtime_named` (which imports the module the registry, `sparkpair.registry`, names for a
runtime) and `runtime_of` here; `openai` (the OpenAI-compatible server TensorRT-LLM's and vLLM's
engines run) and one module per engine: `trtllm`, `vllm`, `triton`, `sglang`. A new engine is one new module and one
registry line; docs/architecture.md says how.

Pure: no connection (the `pure` contract). May import: only the layers below its own in pyproject.toml's `[tool.importlinter]`
(`render`, `inventory`, the leaf modules).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from sparkpair import registry
from sparkpair.errors import InventoryError, UsageError
from sparkpair.render.recipe import Start

if TYPE_CHECKING:
    from sparkpair.inventory import Inventory, Node
    from sparkpair.inventory.profiles import Profile
    from sparkpair.jsonfields import Field
    from sparkpair.render import RenderedFile
    from sparkpair.render.recipe import ContainerSpec, NodeFabric

RUNTIME_NAMES = registry.NAMES


@dataclass(frozen=True)
class Metrics:
    """Where the engine publishes Prometheus text and the names status and bench read from it, each "" when the
    engine has no such counter: requests served, draft tokens proposed and accepted, and `drafts` (the count of
    draft proposals) when bench reads acceptance from these counters; `iterations`, the path of per-iteration
    JSON statistics bench reads acceptance from instead (TensorRT-LLM's /metrics); `accept_length` and
    `accept_rate`, gauges of the mean tokens per verify and of accepted / proposed draft tokens, for an engine
    that keeps acceptance only so (SGLang): bench reads them after its requests with `drafts` counting the
    verifies; `needs`, what the engine needs before it publishes draft statistics (bench's warning names it)."""

    path: str
    requests: str = ""
    drafted: str = ""
    accepted: str = ""
    drafts: str = ""
    needs: str = ""
    iterations: str = ""
    accept_length: str = ""
    accept_rate: str = ""


@dataclass(frozen=True)
class StageSpec:
    """One stage of an engine's start: its name, what it means, the patterns (Python regular expressions,
    linear: `linepattern`'s rules) of lines that show it was reached, and for the launch watchdog its label,
    its stall limit in seconds (docs/runbooks.md#launch-stalled), whether the rank works alone there (its CPU
    time is progress; not while ranks wait on each other) and a line that shows the stage finished."""

    name: str
    description: str
    patterns: tuple[str, ...]
    label: str
    limit_s: float
    alone: bool = True
    finished: str | None = None


@dataclass(frozen=True)
class FailureLine:
    """A line only this engine prints for a known cause of a failed start (a cause id of `engine.signatures`, each
    with its runbook section), proven on a public log: its Python regular expression (linear: `linepattern`'s rules,
    `linepattern.followed_by` for "A, then B on the line") and its weight: "decisive" (the line names the cause),
    "strong" (it usually means it) or "hint" (harmless in a start that reached serving). diagnose tries every
    runtime's lines after the shared tools' (NCCL, MPI, CUDA, Ray) and before the generic ones (model, config, disk,
    memory, crashes)."""

    cause: str
    pattern: str
    weight: Literal["decisive", "strong", "hint"] = "decisive"


@dataclass(frozen=True)
class Watch:
    """How often a start of the engine is worth asking about while launch waits for it to serve (the port is
    polled every 0.2 s whatever these say): the watchdog's scan of every rank node (processes, output, GPU
    memory; its live line per node) every `every_s`, the first `first_s` after the start, and the check
    whether a start command exited (a docker exec per node) every `exit_every_s`, the first one that long
    after the start. Both take CPU from the starting engine, which has nothing to show at once: its own
    start-up (interpreters, imports, the launcher) comes first, every stall limit is a minute or more, and a
    start command that fails at once is seen at the first exit check."""

    every_s: float
    exit_every_s: float
    first_s: float


@dataclass(frozen=True)
class Request:
    """One HTTP request to the engine's server: its path and JSON body (a POST)."""

    path: str
    body: dict[str, Any]


class ServingApi(Protocol):
    """How sparkpair asks the engine's HTTP server whether it serves and has it generate: launch's readiness
    (health, the model, a first generation), status (the models, a one-token generation), bench (streamed
    generations). The parsers get the raw answer of a 200 (hostile: read it through `jsonfields.Field`,
    ShapeError for a wrong shape) or one parsed streamed event."""

    base: str                 # what clients put before the API's paths (shown in the endpoint: /v1)
    health: str               # a GET answering 200 once the server is up
    generation_words: str     # readiness's first generation in words: "a chat completion"
    stream_end: str | None    # the event payload that ends a streamed answer ("[DONE]"), None: the answer's end
    token_counts: str         # what stream_tokens says: "total" (the tokens so far, OpenAI's usage) or "delta"
    # (the event's own new tokens, Triton's num_output_tokens)

    def models(self, model: str) -> str:
        """The GET that says whether model is served."""

    def served(self, body: bytes, model: str) -> list[str]:
        """The model ids that GET's answer shows served (a server that only says 200: [model])."""

    def ready_request(self, model: str) -> Request:
        """Readiness's first generation (a few tokens)."""

    def ready_text(self, body: bytes) -> str:
        """The text of that generation's answer ("" when it holds none)."""

    def token_request(self, model: str) -> Request:
        """Status's one-token generation."""

    def token_text(self, body: bytes) -> str:
        """The text of that generation's answer (ShapeError when it is not a generation)."""

    def stream_request(self, model: str, messages: list[dict[str, str]], max_tokens: int) -> Request:
        """Bench's streamed generation of an answer to messages."""

    def stream_text(self, event: Field) -> str:
        """The generated text one streamed event carries ("" when none)."""

    def stream_tokens(self, event: Field) -> int | None:
        """The output tokens counted so far (token_counts "total") or added by this event ("delta") when the event
        says, else None."""


class Runtime(Protocol):
    """What an engine must say for sparkpair to start, watch, judge and stop it on the pair."""

    name: str          # the inventory's and the CLI's word for it (its registry line): trtllm, vllm
    title: str         # how people write it: TensorRT-LLM, vLLM
    process_pattern: str   # a regex on a process's command line that marks one of the engine's ranks
    metrics: Metrics
    stages: tuple[StageSpec, ...]   # the stages of its start, in order; the last one is "serving"
    watch: Watch       # how often launch asks about its start
    api: ServingApi    # how its HTTP server is asked whether it serves
    options_record: type[Any]   # the record (inventory `spec` fields, the engine's defaults) of engines.<name>.options
    render_dir: str    # where `sparkpair render` writes its files: "" beside the netplan files, else a directory
    playbook: str | None        # its key under `runtimes` in data/playbooks.json; None: no NVIDIA playbook pins it
    playbook_fixes: Mapping[str, str]   # a playbook departure key -> its fix ({value}, {profile}) where serve_args
    # or engine_config cannot set it (a flag sparkpair sets from another field)
    cause_fixes: Mapping[str, str]      # a diagnose cause id -> its fix in this engine's words (engine.signatures)
    failure_lines: tuple[FailureLine, ...]   # the lines of failed starts only this engine prints (diagnose's)
    fabric_proof: bool  # doctor --deep's MPI and NCCL jobs run in its image (its launcher is mpirun)
    secret_options: Mapping[str, str]  # an option whose value is a secret -> the variable the engine reads it from

    def image(self, inventory: Inventory) -> str:
        """The engine image the inventory names for this runtime."""

    def container_name(self, inventory: Inventory) -> str:
        """The name of the engine container on each node."""

    def container_env(self, inventory: Inventory, node: Node, fabric: NodeFabric | None) -> dict[str, str]:
        """The environment of node's engine container (its own fabric settings when asked of it)."""

    def container_spec(self, inventory: Inventory, node: Node, home: str, *, gpus: bool, infiniband: bool,
                       fabric: NodeFabric | None) -> ContainerSpec:
        """What `docker run` gets on node (home: the login user's home there)."""

    def config_files(self, inventory: Inventory, profile: Profile, node: Node,
                     fabric: NodeFabric | None) -> list[RenderedFile]:
        """What launch writes under ~/.sparkpair/config on node, which runs a rank (mounted read-only in its
        container at render.recipe.CONFIG_DIR); a path may hold directories (a model repository)."""

    def rendered(self, inventory: Inventory, profile: Profile) -> list[RenderedFile]:
        """The runtime's files `sparkpair render` writes (beside the netplan files and launch.sh)."""

    def starts(self, inventory: Inventory, profile: Profile, nodes: list[str]) -> list[Start]:
        """The commands that start the engine, in order, for the ranks on nodes (serving node first)."""

    def problems(self, inventory: Inventory, profile: Profile) -> list[str]:
        """Every way the profile's settings (serve_args, engine_config) and the inventory's options for the engine
        break the engine's own definitions, one line each naming the field (empty: renderable)."""

    def engine_settings(self, profile: Profile) -> dict[str, Any]:
        """The engine's configuration as sparkpair hands it over (TensorRT-LLM: the --extra_llm_api_options YAML):
        what doctor compares with a playbook's `config`."""

    def draft_len(self, profile: Profile) -> int | None:
        """The draft length the engine runs the profile with (None: no draft)."""

    def metrics_port(self, inventory: Inventory) -> int:
        """The port on the serving node where `metrics.path` answers."""

    def other_ports(self, inventory: Inventory) -> dict[int, str]:
        """Ports the engine binds on the serving node besides server.port and metrics_port, each with the setting
        that names it (Triton's gRPC port); doctor's `ports.serving` checks them free."""

    def rank_log_paths(self, rank: int | None) -> list[str]:
        """The files (in the container of the rank's node) holding rank's output; None: a one-node start."""

    def launcher_log(self, ranks: int) -> str | None:
        """The file on the serving node holding a launcher's output beside the ranks' (mpirun), if any."""

    def image_needs(self, inventory: Inventory) -> tuple[str, ...]:
        """Commands the engine image must have for the inventory's mode (doctor's docker.image-mode asks the
        image); empty when nothing is worth a look (TensorRT-LLM's image is NVIDIA's, whole)."""

    def image_needs_fix(self, inventory: Inventory, missing: list[str]) -> tuple[str, str]:
        """When the image lacks missing (of image_needs): the mode in words (`vllm, ray mode`) and the fix."""

    def cluster_script(self, inventory: Inventory) -> str | None:
        """sh, in the serving node's container, printing one line about a cluster the engine runs on (Ray's
        nodes), or None when it runs on none."""

    def stop_script(self) -> str:
        """sh, in a node's container: ask the engine's processes to end (SIGTERM)."""

    def kill_script(self) -> str:
        """sh, in a node's container: kill whatever is left of the engine's processes."""


def runtime_named(name: str) -> Runtime:
    """The runtime called name (the `RUNTIME` of the module its registry line names); a UsageError lists the
    known ones."""
    try:
        line = registry.registered(name)
    except KeyError:
        raise UsageError(f"no runtime {name!r}; known: {', '.join(sorted(registry.NAMES))}") from None
    runtime: Runtime = importlib.import_module(line.module).RUNTIME
    return runtime


def every_runtime() -> list[Runtime]:
    """Every registered runtime, in the registry's order."""
    return [runtime_named(line.name) for line in registry.RUNTIMES]


def runtime_of(profile: Profile) -> Runtime:
    """The runtime a (resolved) profile runs on."""
    return runtime_named(profile.runtime)


def fabric_prover() -> Runtime:
    """The runtime whose image doctor --deep's MPI and NCCL jobs run in (its launcher is mpirun)."""
    return next(runtime for runtime in every_runtime() if runtime.fabric_proof)


def engine_options(inventory: Inventory, runtime: Runtime) -> Any:
    """`engines.<runtime>.options` read as the runtime's options_record (its defaults for what is not given); an
    InventoryError names each bad option and what it expects."""
    from sparkpair.inventory import messages
    from sparkpair.inventory.validation import Invalid, parse

    try:
        return parse(runtime.options_record, inventory.engine(runtime.name).options)
    except Invalid as error:
        raise InventoryError(messages.describe(error.problems, "the inventory",
                                               prefix=("engines", runtime.name, "options"))) from None


def options_problems(inventory: Inventory, runtime: Runtime) -> list[str]:
    """engine_options' problems as lines (empty: the options are good)."""
    try:
        engine_options(inventory, runtime)
    except InventoryError as error:
        return [line.removeprefix("the inventory: ") for line in error.lines()]
    return []


def engine_sections(inventory: Inventory) -> dict[str, Any]:
    """Every runtime's `engines.<name>` with its defaults filled in (`inventory show`), as JSON data."""
    from sparkpair.inventory import json_data

    sections = {}
    for runtime in every_runtime():
        section = json_data(inventory.engine(runtime.name))
        try:
            section["options"] = json_data(engine_options(inventory, runtime))
        except InventoryError:
            pass  # shown as given; `inventory check` names what is wrong with it
        sections[runtime.name] = section
    return sections


def inventory_schema() -> dict[str, Any]:
    """The inventory's JSON Schema with each runtime's own options under `engines.<name>.options`, and the
    former top-level section named after a runtime (`vllm:`) that is still read as `engines.<name>`."""
    from sparkpair.inventory import Inventory, record_schema
    from sparkpair.inventory.schema import ENGINE_FIELDS, Engine

    schema = record_schema(Inventory)
    sections = {}
    for runtime in every_runtime():
        options = record_schema(runtime.options_record)
        section = record_schema(Engine)
        section["properties"]["options"] = options
        sections[runtime.name] = section
        former = {key: value for key, value in section["properties"].items() if key in ENGINE_FIELDS}
        schema["properties"][runtime.name] = {
            "title": f"{runtime.title} (former spelling of engines.{runtime.name})", "type": "object",
            "properties": {**former, **options["properties"]}, "additionalProperties": False}
    schema["properties"]["engines"] = {**schema["properties"]["engines"], "properties": sections}
    return schema


def rank_nodes(inventory: Inventory, profile: Profile, node: str | None = None) -> list[str]:
    """Node names in rank order: every node for a profile of more than one rank (head first; its tp_size x pp_size
    must be the number of nodes), else the one chosen (default: the head). A UsageError names a bad --node, or
    the profile's field and the fix when its ranks do not fit the inventory's nodes."""
    problems = profile.parallelism_problems(len(inventory.nodes))
    if problems:
        raise UsageError(problems[0])
    if profile.is_pair:
        if node is not None:
            raise UsageError(f"--node: this profile runs on every node (tp_size {profile.tp_size} x pp_size "
                             f"{profile.pp_size})")
        return [n.name for n in inventory.nodes]
    if node is not None and node not in [n.name for n in inventory.nodes]:
        raise UsageError(f"--node: no node {node!r}; the inventory has {', '.join(n.name for n in inventory.nodes)}")
    return [node or inventory.head.name]


def checked_view(inventory: Inventory, profile: Profile) -> Inventory:
    """The inventory as the profile's runtime sees it, once its options and the profile pass the engine's own
    definitions; a RenderError names the first setting the engine does not know."""
    from sparkpair.errors import RenderError

    view = inventory.for_runtime(profile.runtime)
    runtime = runtime_of(profile)
    problems = options_problems(view, runtime) or runtime.problems(view, profile)
    if problems:
        raise RenderError(f"profile {profile.name}: {problems[0]}" +
                          (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    return view


def render_profile(inventory: Inventory, profile: Profile, source: str = "the inventory") -> list[RenderedFile]:
    """Every file `sparkpair render` writes for a profile: each node's netplan file, the runtime's own files and
    the launch runbook; a setting the engine does not know is a RenderError naming it."""
    from sparkpair.render import launch_script, netplan_file
    from sparkpair.render.runbook import Probe

    runtime = runtime_of(profile)
    view = checked_view(inventory, profile)
    config = [item.path for item in runtime.config_files(view, profile, view.head, None)]
    starts = runtime.starts(view, profile, rank_nodes(view, profile))
    spec = runtime.container_spec(view, view.head, "$HOME", gpus=True, infiniband=True, fabric=None)
    ready = runtime.api.ready_request(profile.target)
    readiness = [Probe(runtime.api.health), Probe(runtime.api.models(profile.target)), Probe(ready.path, ready.body)]
    own = [*runtime.rendered(view, profile), launch_script(view, profile, config, starts, spec, readiness, source)]
    if runtime.render_dir:  # its own directory beside the netplan files (TensorRT-LLM's, the first, sit there)
        own = [replace(item, path=f"{runtime.render_dir}/{item.path}") for item in own]
    return [netplan_file(view, node, source) for node in view.nodes] + own
