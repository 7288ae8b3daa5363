"""Runtimes: what one serving engine (TensorRT-LLM, vLLM) needs that the others do not, behind one seam.

Everything any engine shares lives in `engine` (containers, models, readiness, the watch, status,
logs, bundle, the diagnose framework, launch state) and asks the profile's `Runtime` for the rest:
the image and container of the engine, each node's container environment and config files, the
commands that start it on each node, the check of its settings against the engine's own
definitions, where each rank writes its output, how to find and stop its processes, its Prometheus
names and the stages of its start. Holds the `Runtime` protocol and `runtime_of` here, and one
module per engine: `trtllm`, `vllm`. A new engine (SGLang) is one new module listed in `RUNTIMES`;
docs/architecture.md says how.

Pure: no connection (the `pure` contract). May import: only the layers below its own in pyproject.toml's `[tool.importlinter]`
(`render`, `inventory`, the leaf modules).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from sparkpair.errors import UsageError
from sparkpair.render.recipe import Start

if TYPE_CHECKING:
    from sparkpair.inventory import Inventory, Node
    from sparkpair.inventory.profiles import Profile
    from sparkpair.render import RenderedFile
    from sparkpair.render.recipe import ContainerSpec, NodeFabric


@dataclass(frozen=True)
class Metrics:
    """Where the engine publishes Prometheus text and the names status reads from it; `drafts` (the count of
    draft proposals) when bench reads acceptance from these counters too, "" when the engine reports it per
    iteration elsewhere (TensorRT-LLM's JSON /metrics)."""

    path: str
    requests: str
    drafted: str
    accepted: str
    drafts: str = ""
    needs: str = ""   # what the engine needs before it publishes draft statistics (bench's warning names it)


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


class Runtime(Protocol):
    """What an engine must say for sparkpair to start, watch, judge and stop it on the pair."""

    name: str          # the inventory's and the CLI's word for it: trtllm, vllm
    title: str         # how people write it: TensorRT-LLM, vLLM
    process_pattern: str   # a regex on a process's command line that marks one of the engine's ranks
    metrics: Metrics
    stages: tuple[StageSpec, ...]   # the stages of its start, in order; the last one is "serving"
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
        """What launch writes to ~/.sparkpair/config on node, which runs a rank."""

    def rendered(self, inventory: Inventory, profile: Profile) -> list[RenderedFile]:
        """The runtime's files `sparkpair render` writes (beside the netplan files and launch.sh)."""

    def starts(self, inventory: Inventory, profile: Profile, nodes: list[str]) -> list[Start]:
        """The commands that start the engine, in order, for the ranks on nodes (serving node first)."""

    def problems(self, inventory: Inventory, profile: Profile) -> list[str]:
        """Every way the profile's settings break the engine's own definitions (empty: renderable)."""

    def rank_log_paths(self, rank: int | None) -> list[str]:
        """The files (in the container of the rank's node) holding rank's output; None: a one-node start."""

    def launcher_log(self, ranks: int) -> str | None:
        """The file on the serving node holding a launcher's output beside the ranks' (mpirun), if any."""

    def image_needs(self, inventory: Inventory) -> tuple[str, ...]:
        """Commands the engine image must have for the inventory's mode (doctor's docker.image-mode asks the
        image); empty when nothing is worth a look (TensorRT-LLM's image is NVIDIA's, whole)."""

    def cluster_script(self, inventory: Inventory) -> str | None:
        """sh, in the serving node's container, printing one line about a cluster the engine runs on (Ray's
        nodes), or None when it runs on none."""

    def stop_script(self) -> str:
        """sh, in a node's container: ask the engine's processes to end (SIGTERM)."""

    def kill_script(self) -> str:
        """sh, in a node's container: kill whatever is left of the engine's processes."""


def _registry() -> dict[str, Runtime]:
    from sparkpair.runtimes import trtllm, vllm

    return {trtllm.RUNTIME.name: trtllm.RUNTIME, vllm.RUNTIME.name: vllm.RUNTIME}


RUNTIME_NAMES = ("trtllm", "vllm")


def runtime_named(name: str) -> Runtime:
    """The runtime called name; a UsageError lists the known ones."""
    runtimes = _registry()
    if name not in runtimes:
        raise UsageError(f"no runtime {name!r}; known: {', '.join(sorted(runtimes))}")
    return runtimes[name]


def runtime_of(profile: Profile) -> Runtime:
    """The runtime a (resolved) profile runs on."""
    return runtime_named(profile.runtime)


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
    """The inventory as the profile's runtime sees it, once the profile passes the engine's own definitions;
    a RenderError names the first setting the engine does not know."""
    from sparkpair.errors import RenderError

    view = inventory.for_runtime(profile.runtime)
    problems = runtime_of(profile).problems(view, profile)
    if problems:
        raise RenderError(f"profile {profile.name}: {problems[0]}" +
                          (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    return view


def render_profile(inventory: Inventory, profile: Profile, source: str = "the inventory") -> list[RenderedFile]:
    """Every file `sparkpair render` writes for a profile: each node's netplan file, the runtime's own files and
    the launch runbook; a setting the engine does not know is a RenderError naming it."""
    from sparkpair.render import launch_script, netplan_file

    runtime = runtime_of(profile)
    view = checked_view(inventory, profile)
    config = [item.path for item in runtime.config_files(view, profile, view.head, None)]
    starts = runtime.starts(view, profile, rank_nodes(view, profile))
    spec = runtime.container_spec(view, view.head, "$HOME", gpus=True, infiniband=True, fabric=None)
    own = [*runtime.rendered(view, profile), launch_script(view, profile, config, starts, spec, source)]
    if runtime.name != "trtllm":  # beside TensorRT-LLM's files (the first runtime's), under the runtime's name
        own = [replace(item, path=f"{runtime.name}/{item.path}") for item in own]
    return [netplan_file(view, node, source) for node in view.nodes] + own
