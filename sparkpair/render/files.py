"""Render the files sparkpair puts on the nodes from jinja2 templates (StrictUndefined).

Pure: no network. Every rendered file is validated before anyone can use it; a failure is a
RenderError naming the template line or the offending key.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    import jinja2

from sparkpair import paths
from sparkpair.errors import RenderError, UsageError
from sparkpair.inventory import Inventory, Node
from sparkpair.inventory.messages import one_line
from sparkpair.inventory.profiles import Profile
from sparkpair.inventory.topology import ring_routes
from sparkpair.render import engine_config, recipe, runbook

NETPLAN_FILE = paths.NETPLAN_FILE


@dataclass(frozen=True)
class RenderedFile:
    """A generated file: where it goes (relative), its text and its mode."""

    path: str
    content: str
    mode: int = 0o644


def templates_dir() -> Path:
    """templates/ inside the installed package, or at the top of a source checkout."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "templates", package.parent / "templates"):
        if candidate.is_dir():
            return candidate
    raise RenderError("sparkpair's templates are missing from this installation; reinstall sparkpair")


@cache
def _environment() -> jinja2.Environment:
    import jinja2  # here, not at the top: doctor and status render nothing and skip its 0.03-0.1 s import

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["to_yaml"] = lambda value: yaml.safe_dump(value, sort_keys=False, default_flow_style=False).rstrip()
    env.filters["one_line"] = lambda value: one_line(str(value))  # free text in a comment cannot end it
    return env


def render_template(name: str, **context: Any) -> str:
    """Render templates/<name>; template errors name the template and line."""
    import jinja2

    try:
        return _environment().get_template(name).render(**context)
    except jinja2.TemplateError as error:
        line = getattr(error, "lineno", None)
        where = f"{name}:{line}" if line else name
        raise RenderError(f"template {where}: {error.message or type(error).__name__}") from None


def netplan_file(inventory: Inventory, node: Node, source: str = "the inventory") -> RenderedFile:
    """/etc/netplan/40-sparkpair-cx7.yaml for node: its QSFP twins, static, at the cluster MTU (on a ring, with
    `topology.ring_routes`)."""
    text = render_template("netplan-cx7.yaml.j2", node=node, mtu=inventory.cluster.mtu,
                           filename=NETPLAN_FILE, inventory_name=source, routes=ring_routes(inventory, node))
    return RenderedFile(f"{node.name}/{NETPLAN_FILE}", text, 0o600)


def hostfile(inventory: Inventory) -> RenderedFile:
    text = render_template("openmpi-hostfile.j2", cluster=inventory.cluster.name,
                           lines=recipe.hostfile_lines(inventory))
    return RenderedFile("openmpi-hostfile", text)


def container_env_file(inventory: Inventory, fabric: recipe.NodeFabric | None = None) -> RenderedFile:
    """One node's container.env: with its fabric (launch) it names the node's own NCCL_IB_HCA and GID
    index; without (an offline render) it says that launch asks each node for them."""
    text = render_template("container.env.j2", cluster=inventory.cluster.name,
                           env=recipe.container_env(inventory, fabric), per_node=not fabric,
                           per_node_names=" and ".join(recipe.PER_NODE_ENV))
    return RenderedFile("container.env", text)


def llm_api_config(inventory: Inventory, profile: Profile) -> RenderedFile:
    """The validated --extra_llm_api_options YAML of a (TensorRT-LLM) profile."""
    profile_name = profile.name
    options = recipe.llm_api_options(profile)
    judged = engine_config.judged_version(inventory.container.image)
    flags = recipe.passed_flags(inventory, profile)
    problems = engine_config.option_problems(options, flags, judged) + engine_config.flag_problems(flags, judged)
    if problems:
        raise RenderError(f"profile {profile_name}: {problems[0]}" +
                          (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    text = render_template("extra-llm-api-config.yml.j2", profile_name=profile_name, profile=profile,
                           options=options, judged=judged.label)
    return RenderedFile(f"{profile_name}/extra-llm-api-config.yml", text)


def launch_script(inventory: Inventory, profile: Profile, config_files: list[str], starts: list[recipe.Start],
                  spec: recipe.ContainerSpec, readiness: list[runbook.Probe],
                  source: str = "the inventory") -> RenderedFile:
    """The runbook of a launch: every command sparkpair runs, node by node (config_files: what launch writes to
    ~/.sparkpair/config; starts: the runtime's commands that start the engine; readiness: the requests launch
    sends the server before it says it serves)."""
    profile_name = profile.name
    text = render_template("launch.sh.j2", profile_name=profile_name, profile=profile, inventory_name=source,
                           launch_args=runbook.profile_args(profile),
                           steps=runbook.launch_steps(inventory, profile, config_files, starts, spec, readiness),
                           secrets_dir=recipe.NODE_SECRETS_DIR, token_path=recipe.HF_TOKEN_FILE)
    return RenderedFile(f"{profile_name}/launch.sh", text, 0o755)


def rsh_agent(inventory: Inventory) -> RenderedFile:
    """mpirun's rsh agent for the inventory's MPI transport."""
    nodes = [{"name": node.name, "names": node.ssh_names} for node in inventory.nodes]
    text = render_template("mpi-rsh-agent.sh.j2", cluster=inventory.cluster.name, nodes=nodes,
                           transport=inventory.container.mpi_transport, sshd_port=inventory.container.sshd_port,
                           ssh_dir=recipe.SSH_DIR, user=inventory.cluster.user, container=inventory.container.name)
    return RenderedFile("mpi-rsh-agent", text, 0o755)


def sshd_entrypoint(inventory: Inventory) -> RenderedFile:
    """The engine container's entrypoint for the sshd transport."""
    text = render_template("sshd-entrypoint.sh.j2", cluster=inventory.cluster.name,
                           sshd_port=inventory.container.sshd_port, ssh_dir=recipe.SSH_DIR, host_key=recipe.HOST_KEY,
                           env_file=f"{recipe.CONFIG_DIR}/container.env")
    return RenderedFile("entrypoint.sh", text, 0o755)


def node_config_files(inventory: Inventory, profile: Profile,
                      fabric: recipe.NodeFabric | None = None) -> list[RenderedFile]:
    """What a TensorRT-LLM launch writes to ~/.sparkpair/config on a node that runs a rank (fabric: that
    node's own)."""
    files = [container_env_file(inventory, fabric), llm_api_config(inventory, profile)]
    if profile.is_pair:
        files += [hostfile(inventory), rsh_agent(inventory)]
        if inventory.container.mpi_transport == "sshd":
            files.append(sshd_entrypoint(inventory))
    return [RenderedFile(item.path.rsplit("/", 1)[-1], item.content, item.mode) for item in files]


def trtllm_files(inventory: Inventory, profile: Profile) -> list[RenderedFile]:
    """The TensorRT-LLM files `sparkpair render` writes for a profile (beside the netplan files and launch.sh)."""
    files = [hostfile(inventory), container_env_file(inventory), rsh_agent(inventory), llm_api_config(inventory, profile)]
    if inventory.container.mpi_transport == "sshd":
        files.append(sshd_entrypoint(inventory))
    return files


def write_files(files: list[RenderedFile], out_dir: Path) -> list[Path]:
    """Write files under out_dir atomically (temp file, then rename) with their modes."""
    written = []
    for item in files:
        target = out_dir / item.path
        temp = None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(item.content)
            os.chmod(temp, item.mode)
            os.replace(temp, target)
        except OSError as error:
            if temp is not None and os.path.exists(temp):
                os.unlink(temp)
            raise UsageError(f"cannot write {target}: {error.strerror or error}",
                             hint="choose a directory you can write to") from None
        written.append(target)
    return written
