"""The launch as a list of human-readable steps: what `sparkpair render` writes to launch.sh."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace

from sparkpair.inventory import Inventory
from sparkpair.inventory.profiles import Profile
from sparkpair.render import recipe

HOME = "$HOME"


@dataclass(frozen=True)
class Step:
    """One block of the runbook: a title, the node(s) it runs on, and its shell lines."""

    title: str
    where: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Probe:
    """One readiness request to the engine's HTTP server as its runtime asks it: a GET of path, or a POST of
    body (JSON) to it."""

    path: str
    body: dict[str, object] | None = None


def shell_words(argv: list[str]) -> str:
    """Join argv for a shell, leaving $HOME expandable (it is quoted with double quotes)."""
    return " ".join(f'"{arg}"' if HOME in arg else shlex.quote(arg) for arg in argv)


READY_WAIT_S = 1800   # how long the readiness step waits for the server (a first start of Qwen3-235B loads for minutes)


def launch_steps(inventory: Inventory, profile: Profile, config_files: list[str],
                 starts: list[recipe.Start], spec: recipe.ContainerSpec, readiness: list[Probe]) -> list[Step]:
    """Every step of `sparkpair launch PROFILE`, in order, as a person runs them by hand; config_files: what
    launch puts in ~/.sparkpair/config; starts: the runtime's commands that start the engine, each on its node;
    spec: the runtime's engine container on the head (its home as $HOME; each node's differs by its label);
    readiness: what launch asks the server before it says it serves (the first: its health)."""
    nodes = inventory.nodes if profile.is_pair else [inventory.head]
    where_all = " and ".join(node.name for node in nodes)
    name = inventory.container.name
    files = [f"~/{recipe.NODE_CONFIG_DIR}/{file}" for file in config_files]
    steps = [
        Step("Preflight: the launch-critical checks", "this machine", (f"sparkpair doctor {profile_args(profile)}",)),
        Step("Files: the rendered config in ~/.sparkpair/config, the HF token in ~/.sparkpair/secrets (0600)",
             where_all, (f"mkdir -p ~/{recipe.NODE_CONFIG_DIR} ~/{recipe.NODE_SECRETS_DIR} && "
                         f"chmod 700 ~/{recipe.NODE_SECRETS_DIR}",
                         "# then copy, from the folder `sparkpair render` wrote (a node's own copy under its name "
                         "when there is one):",
                         *(f"#   {file}" for file in files))),
        *(Step("Engine container", node.name, (shell_words(recipe.docker_run_argv(_on_node(spec, node.name))),))
          for node in nodes),
        Step("Models into the HF cache (the hub on for the download; the container keeps it off)",
             inventory.head.name, tuple(_download_lines(name, profile))),
    ]
    if profile.is_pair:
        steps.append(Step(f"Models to {inventory.worker.name} over the QSFP link", inventory.head.name,
                          tuple(shell_words(recipe.sync_argv(inventory, repo, HOME)) for repo in profile.repos)))
    steps += [
        Step("Stable model paths: each repo's downloaded snapshot", where_all, tuple(_link_lines(inventory, profile))),
        *(Step("Serve (detached; rank output in the container)", start.node, (_serve_line(inventory, start),))
          for start in starts),
        Step("Readiness: " + ", ".join(probe.path for probe in readiness), inventory.head.name,
             tuple(_readiness_lines(inventory, readiness))),
        Step("Stop", where_all, (f"docker rm -f {shlex.quote(name)}",)),
    ]
    return steps


def profile_args(profile: Profile) -> str:
    """The profile and its runtime as `sparkpair launch` and `doctor` take them."""
    return f"{shlex.quote(profile.name)} --runtime {profile.runtime}"


def _on_node(spec: recipe.ContainerSpec, node: str) -> recipe.ContainerSpec:
    """The head's engine container spec as another node's: labelled with that node."""
    return replace(spec, labels={**spec.labels, "sparkpair.node": node})


def _download_lines(container: str, profile: Profile) -> list[str]:
    lines = []
    environment = [word for key, value in recipe.DOWNLOAD_ENV.items() for word in ("-e", f"{key}={value}")]
    for repo in profile.repos:
        argv = ["docker", "exec", "-u", "$(id -u):$(id -g)", *environment, container] + recipe.download_argv(repo)
        lines.append(" ".join(shlex.quote(a) if not a.startswith("$(") else f'"{a}"' for a in argv))
    return lines


def _link_lines(inventory: Inventory, profile: Profile) -> list[str]:
    """What launch does once the models are verified: HF_HOME/sparkpair-models/org--name -> the snapshot refs/main
    names (the engine's config and command line name these paths)."""
    cache = recipe.hf_cache_on_node(inventory, HOME)
    lines = [f'mkdir -p "{cache}/{recipe.MODEL_LINKS}"']
    for repo in profile.repos:
        name, target = recipe.snapshot_link(repo, f'$(cat "{cache}/hub/{recipe.repo_dirname(repo)}/refs/main")')
        lines.append(f'ln -sfn "{target}" "{cache}/{name}"')
    return lines


def _serve_line(inventory: Inventory, start: recipe.Start) -> str:
    command = recipe.shell_line(start.argv)
    inner = (f"mkdir -p {recipe.LOG_DIR} && {recipe.secret_exports(start.secret_env)}exec {command} "
             f"> {recipe.LOG_DIR}/serve.log 2>&1")  # an engine secret comes from its file in secrets, never argv
    return f"docker exec -d {shlex.quote(inventory.container.name)} sh -c {shlex.quote(inner)}"


def _readiness_lines(inventory: Inventory, readiness: list[Probe]) -> list[str]:
    base = f"http://localhost:{inventory.server.port}"
    tries = READY_WAIT_S // 5
    health = readiness[0].path
    return [f"for try in $(seq {tries}); do curl -sf {base}{health} >/dev/null && break; sleep 5; done  "
            f"# up to {READY_WAIT_S // 60} minutes",
            *(f"curl -sf -w '\\n' {base}{probe.path}" if probe.body is None else
              f"curl -sf -w '\\n' {base}{probe.path} -H 'Content-Type: application/json' -d "
              f"{shlex.quote(json.dumps(probe.body))}" for probe in readiness)]
