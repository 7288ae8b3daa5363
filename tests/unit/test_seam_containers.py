"""engine.containers on a scripted node (tests/fakenode.py): the node's spec from its probes, and `ensure`
starting, reusing, refusing or replacing the engine container by what the node's Docker Engine says."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from fakenode import FakeNode, ProbeRound, containing, is_probe_round, prefix

from sparkpair.engine import containers
from sparkpair.errors import SparkpairError
from sparkpair.inventory import read_inventory
from sparkpair.probes import docker, host
from sparkpair.runtimes import runtime_named

FIXTURES = Path(__file__).parent.parent / "fixtures"
INVENTORY = read_inventory(FIXTURES / "inventory" / "sim.yaml")
NAME = INVENTORY.container.name
DOCKER_INFO = json.dumps({"ServerVersion": "28.3.3", "Runtimes": {"nvidia": {}, "runc": {}}}) + "\n200\n"


def container_answer(labels: dict[str, str] | None, running: bool = True) -> str:
    """What the Docker Engine API answers for GET /containers/NAME/json (None: there is none)."""
    if labels is None:
        return json.dumps({"message": f"No such container: {NAME}"}) + "\n404\n"
    return json.dumps({"Id": "c" * 64, "Name": f"/{NAME}", "State": {"Status": "running" if running else "exited",
                       "Running": running, "ExitCode": 0}, "Config": {"Image": INVENTORY.container.image,
                                                                      "Labels": labels}}) + "\n200\n"


def node_with(container_labels: dict[str, str] | None, running: bool = True) -> tuple[FakeNode, ProbeRound]:
    """A node with the NVIDIA runtime and /dev/infiniband, whose engine holds the container (labels: None for none);
    creating the mount folders and `docker run` succeed."""
    rounds = ProbeRound({docker.DOCKER_INFO: DOCKER_INFO, host.INFINIBAND_DEVICES: "yes\n",
                         docker.container(NAME): container_answer(container_labels, running)})
    node = FakeNode("spark-a").on(is_probe_round, rounds).on(containing("mkdir -p ", "&& chmod 700 "))
    return node.on(prefix("docker run "), "f" * 64 + "\n"), rounds


def spec_on(node: FakeNode) -> containers.recipe.ContainerSpec:
    return containers.node_spec(INVENTORY, runtime_named("trtllm"), node)


def docker_runs(node: FakeNode) -> list[list[str]]:
    return [shlex.split(text) for text in node.commands if text.startswith("docker run ")]


def test_a_node_without_the_container_gets_it_started_labelled_with_its_spec() -> None:
    node, rounds = node_with(None)
    spec = spec_on(node)
    assert containers.ensure(node, spec, replace_existing=False) == "started"
    [argv] = docker_runs(node)
    assert f"{containers.SPEC_LABEL}={containers.spec_hash(spec)}" in argv and argv[argv.index("--name") + 1] == NAME
    assert "--gpus all --device /dev/infiniband:/dev/infiniband" in " ".join(argv)  # what the node's facts said
    [mkdir] = [text for text in node.commands if text.startswith("mkdir -p ")]
    directories = [source for target, (source, _) in spec.mounts.items()
                   if target not in (containers.recipe.HOST_KEY, containers.recipe.ENGINE_CACHE)]
    assert directories and all(shlex.quote(source) in mkdir for source in directories)
    # the engine-cache volume is Docker's to make, never a directory made in the user's home
    volume = containers.recipe.ENGINE_CACHE_VOLUME
    assert volume not in mkdir and f"{volume}:{containers.recipe.ENGINE_CACHE}:rw" in argv
    assert [len(asked) for asked in rounds.asked] == [2, 1]  # the spec's two facts, then the container


def test_the_container_with_the_same_spec_running_is_reused_and_nothing_runs() -> None:
    probe_node, _ = node_with(None)
    spec = spec_on(probe_node)
    node, _ = node_with({containers.SPEC_LABEL: containers.spec_hash(spec), "sparkpair.node": "spark-a"})
    assert containers.ensure(node, spec, replace_existing=False) == "reused (same spec, running)"
    assert docker_runs(node) == [] and not any(text.startswith("mkdir") for text in node.commands)


def test_a_running_container_of_another_spec_is_left_alone_without_replace() -> None:
    node, _ = node_with({containers.SPEC_LABEL: "0" * 16, "sparkpair.node": "spark-a"})
    with pytest.raises(SparkpairError) as raised:
        containers.ensure(node, spec_on(node), replace_existing=False)
    assert raised.value.lines() == [f"spark-a: {NAME} is running with another spec (inventory, profile or the node's "
                                    "RoCE devices or GID index changed) (fix: sparkpair stop first, or rerun with "
                                    "--replace)"]
    assert docker_runs(node) == [] and not any("docker rm" in text for text in node.commands)


def test_someone_elses_container_is_refused_and_replaced_only_when_asked() -> None:
    node, _ = node_with({"maintainer": "someone"})
    with pytest.raises(SparkpairError, match=f"a container named {NAME} exists and was not started by sparkpair"):
        containers.ensure(node, spec_on(node), replace_existing=False)
    node.on(f"docker rm -f {NAME}", f"{NAME}\n")
    assert containers.ensure(node, spec_on(node), replace_existing=True) == "replaced"
    removed, started = node.commands.index(f"docker rm -f {NAME}"), node.commands.index(
        next(text for text in node.commands if text.startswith("docker run ")))
    assert removed < started


def test_a_stopped_sparkpair_container_of_the_same_spec_is_replaced() -> None:
    probe_node, _ = node_with(None)
    spec = spec_on(probe_node)
    node, _ = node_with({containers.SPEC_LABEL: containers.spec_hash(spec), "sparkpair.node": "spark-a"}, running=False)
    node.on(f"docker rm -f {NAME}", f"{NAME}\n")
    assert containers.ensure(node, spec, replace_existing=False) == "replaced"
    assert len(docker_runs(node)) == 1


def test_a_node_without_the_nvidia_runtime_or_rdma_devices_gets_neither() -> None:
    plain = json.dumps({"ServerVersion": "28.3.3", "Runtimes": {"runc": {}}}) + "\n200\n"
    node = FakeNode("spark-a").on(is_probe_round, ProbeRound({docker.DOCKER_INFO: plain, host.INFINIBAND_DEVICES: "no\n"}))
    spec = spec_on(node)
    assert not spec.gpus and spec.devices == []


def test_a_node_whose_docker_info_fails_names_the_node() -> None:
    node = FakeNode("spark-a").on(is_probe_round, ProbeRound({
        docker.DOCKER_INFO: (7, "", "curl: (7) Couldn't connect to server"), host.INFINIBAND_DEVICES: "no\n"}))
    with pytest.raises(SparkpairError) as raised:
        spec_on(node)
    [line] = raised.value.lines()
    assert line.startswith("spark-a: docker info failed: ") and "Couldn't connect" in line
