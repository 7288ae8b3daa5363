"""launch at N nodes (docs/cluster.md): a profile's tensor x pipeline split over one rank per Spark, TensorRT-LLM's
mpirun of N and vLLM's --nnodes N with each worker's --master-addr on the link it shares with the head, refused in
one line naming the field and the fix when the split does not fit the nodes; launch, status, logs, stop and bundle
past the two-node gate. The pair's files are unchanged (tests/unit/test_render.py's golden files)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakenode import FakeNode, ProbeRound, fake_pair, is_probe_round
from test_topology import F0, F1, ring_data, switch_data

from sparkpair import paths
from sparkpair.checks import Facts
from sparkpair.checks.node import needed_gib
from sparkpair.cli import main
from sparkpair.engine import launch, watch
from sparkpair.errors import InventoryError, UsageError
from sparkpair.inventory import Inventory, parse_inventory
from sparkpair.probes import docker
from sparkpair.probes.models import RepoManifest
from sparkpair.render import recipe
from sparkpair.runtimes import rank_nodes, render_profile, runtime_of

PIPELINE_OF_THREE = {"qwen3-235b": {"tp_size": 1, "pp_size": 3}}
TENSOR_OF_FOUR = {"qwen3-235b": {"tp_size": 4}}


def cluster(data: dict[str, Any], models: dict[str, Any] | None = None, **sections: Any) -> Inventory:
    return parse_inventory({**data, **({"models": models} if models else {}), **sections})


def pairs(argv: list[str]) -> dict[str, str]:
    """--flag value pairs of an argv (switches map to "")."""
    found: dict[str, str] = {}
    for index, word in enumerate(argv):
        if word.startswith("--"):
            following = argv[index + 1] if index + 1 < len(argv) else ""
            found[word] = "" if following.startswith("--") else following
    return found


# --- the profile's split -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("data", "split"), [(ring_data(), (1, 3)), (switch_data(4), (4, 1)), (switch_data(3), (1, 3))])
def test_a_split_the_inventory_does_not_set_is_chosen_from_the_model_s_heads(data: dict[str, Any],
                                                                              split: tuple[int, int]) -> None:
    """The largest tensor-parallel size dividing the node count and Qwen3-235B's 64 attention and 4 KV heads,
    pipeline stages for the rest; on either runtime."""
    inventory = cluster(data)
    for runtime in ("trtllm", "vllm"):
        profile = inventory.profile("qwen3-235b", runtime)
        assert (profile.tp_size, profile.pp_size) == split
        assert rank_nodes(inventory, profile) == [node["name"] for node in data["nodes"]]
    argv = recipe.mpirun_argv(inventory, inventory.profile("qwen3-235b"))
    assert argv[:3] == ["mpirun", "-np", str(len(data["nodes"]))] and pairs(argv)["--tp_size"] == str(split[0])


def test_an_explicit_split_is_kept_and_said_so() -> None:
    from sparkpair.inventory.profiles import split_note

    chosen = cluster(ring_data())
    note = split_note(chosen.profile("qwen3-235b"), chosen.models, 3)
    assert note == ("tp_size 1 x pp_size 3: chosen for 3 nodes from the model's 64 attention heads, 4 KV heads (set "
                    "models.qwen3-235b.tp_size and pp_size to choose another)")
    kept = cluster(switch_data(4), {"qwen3-235b": {"tp_size": 2, "pp_size": 2}})
    profile = kept.profile("qwen3-235b")
    assert (profile.tp_size, profile.pp_size) == (2, 2)
    assert split_note(profile, kept.models, 4) == "tp_size 2 x pp_size 2: as models.qwen3-235b sets it"


def test_the_example_s_ring_and_switch_blocks_launch_as_they_stand(tmp_path: Path) -> None:
    """The commented blocks of inventory.example.yaml, uncommented as they are: render (offline) writes a launch
    for the split chosen, and says which it is."""
    from test_topology import _uncommented

    for marker, end, split in (("# topology: ring", "#\n# Four Sparks", "--tp_size 1 --pp_size 3"),
                               ("# topology: switch", "container:", "--tp_size 4")):
        path = tmp_path / "inventory.yaml"
        path.write_text(yaml.safe_dump(_uncommented(marker, end)))
        out = tmp_path / marker.split()[-1]
        assert main(["-i", str(path), "render", "--out", str(out)]) == 0
        assert split in (out / "qwen3-235b" / "launch.sh").read_text()
        assert main(["-i", str(path), "render", "--runtime", "vllm", "--out", str(out / "vllm-run")]) == 0

def test_tensor_parallel_four_on_a_switch_of_four_is_one_mpirun_of_four_ranks() -> None:
    inventory = cluster(switch_data(4), TENSOR_OF_FOUR)
    profile = inventory.profile("qwen3-235b")
    assert rank_nodes(inventory, profile) == ["spark-a", "spark-b", "spark-c", "spark-d"]
    argv = recipe.mpirun_argv(inventory, profile)
    assert argv[:3] == ["mpirun", "-np", "4"] and pairs(argv)["--tp_size"] == "4" and "--pp_size" not in argv
    assert recipe.hostfile_lines(inventory) == [f"198.19.1.{11 + index} slots=1" for index in range(4)]
    hostfile = next(item for item in render_profile(inventory, profile) if item.path == "openmpi-hostfile")
    assert hostfile.content.count("slots=1") == 4


def test_a_ring_of_three_runs_a_pipeline_of_three_on_tensorrt_llm() -> None:
    inventory = cluster(ring_data(), PIPELINE_OF_THREE)
    argv = recipe.mpirun_argv(inventory, inventory.profile("qwen3-235b"))
    assert argv[:3] == ["mpirun", "-np", "3"]
    assert (pairs(argv)["--tp_size"], pairs(argv)["--pp_size"]) == ("1", "3")


@pytest.mark.parametrize(("data", "models", "needle"), [
    (ring_data(), {"qwen3-235b": {"tp_size": 2}}, "models.qwen3-235b: tp_size 2 x pp_size 1 is 2 ranks, but the "
                  "inventory has 3 nodes (one rank per Spark); set tp_size: 1 and pp_size: 3 under models.qwen3-235b"),
    (switch_data(4), {"qwen3-235b": {"tp_size": 1, "pp_size": 3}}, "set tp_size: 4 and pp_size: 1 under models.qwen3-235b"),
    (switch_data(4), {"qwen3-235b": {"tp_size": 4, "kv_heads": 6}},
     "models.qwen3-235b.tp_size: got 4, which neither divides nor is a multiple of the model's 6 KV heads (kv_heads)"),
    (switch_data(4), {"qwen3-235b": {"tp_size": 8}}, "tp_size 8 x pp_size 1 is 8 ranks, but the inventory has 4 "
                                                     "nodes"),
])
def test_a_split_that_does_not_fit_the_nodes_is_one_line_naming_the_field_and_the_fix(
        data: dict[str, Any], models: dict[str, Any] | None, needle: str) -> None:
    inventory = cluster(data, models)
    with pytest.raises(UsageError) as refused:
        rank_nodes(inventory, inventory.profile("qwen3-235b"))
    assert needle in str(refused.value) and "\n" not in str(refused.value) and refused.value.exit_code == 2


def test_a_tensor_parallel_size_that_is_no_power_of_two_is_refused_when_the_inventory_loads() -> None:
    with pytest.raises(InventoryError) as refused:
        cluster(ring_data(), {"qwen3-235b": {"tp_size": 3}})
    assert "models.qwen3-235b.tp_size: got 3; expected 1, 2, 4 or 8" in str(refused.value)


def test_a_one_node_profile_still_runs_on_the_node_asked_for_in_a_ring() -> None:
    inventory = cluster(ring_data())
    assert rank_nodes(inventory, inventory.profile("gpt-oss-120b"), "spark-c") == ["spark-c"]


# --- vLLM at N -----------------------------------------------------------------------------------------------------

def test_vllm_on_a_ring_gives_each_worker_the_heads_address_on_its_own_cable() -> None:
    inventory = cluster(ring_data(), PIPELINE_OF_THREE)
    profile = inventory.profile("qwen3-235b", "vllm")
    view = inventory.for_runtime("vllm")
    runtime = runtime_of(profile)
    starts = runtime.starts(view, profile, rank_nodes(view, profile))
    assert [(start.node, start.serves) for start in starts] == [("spark-a", True), ("spark-b", False), ("spark-c", False)]
    # spark-b shares 198.19.10.0/24 with the head (its f1 to the head's f0), spark-c 198.19.30.0/24 (its f0, f1)
    expected = {"spark-a": ("0", "198.19.10.1"), "spark-b": ("1", "198.19.10.1"), "spark-c": ("2", "198.19.30.2")}
    for start in starts:
        flags = pairs(start.argv)
        assert (flags["--node-rank"], flags["--master-addr"]) == expected[start.node]
        assert (flags["--nnodes"], flags["--tensor-parallel-size"], flags["--pipeline-parallel-size"]) == ("3", "1", "3")
        assert ("--headless" in start.argv) == (start.node != "spark-a")
    own = {"spark-a": (F0, "198.19.10.1"), "spark-b": (F1, "198.19.10.2"), "spark-c": (F0, "198.19.30.1")}
    for node in view.nodes:
        env = runtime.container_env(view, node, None)
        assert (env["GLOO_SOCKET_IFNAME"], env["VLLM_HOST_IP"]) == own[node.name]
        assert env["TP_SOCKET_IFNAME"] == env["OMPI_MCA_btl_tcp_if_include"] == own[node.name][0]


def test_vllm_through_a_switch_gives_every_worker_the_heads_address_in_the_switch_subnet() -> None:
    inventory = cluster(switch_data(4), TENSOR_OF_FOUR)
    profile = inventory.profile("qwen3-235b", "vllm")
    view = inventory.for_runtime("vllm")
    starts = runtime_of(profile).starts(view, profile, rank_nodes(view, profile))
    assert [pairs(start.argv)["--master-addr"] for start in starts] == ["198.19.1.11"] * 4
    assert [pairs(start.argv)["--node-rank"] for start in starts] == ["0", "1", "2", "3"]
    assert all("--pipeline-parallel-size" not in start.argv for start in starts)


def test_vllm_on_ray_in_a_ring_joins_each_worker_through_its_own_cable() -> None:
    inventory = cluster(ring_data(), PIPELINE_OF_THREE, vllm={"multinode": "ray"})
    profile = inventory.profile("qwen3-235b", "vllm")
    view = inventory.for_runtime("vllm")
    starts = runtime_of(profile).starts(view, profile, rank_nodes(view, profile))
    joins = {start.node: pairs(start.argv) for start in starts if start.argv[:2] == ["ray", "start"]}
    assert joins["spark-b"]["--address"] == "198.19.10.1:6379" and joins["spark-b"]["--node-ip-address"] == "198.19.10.2"
    assert joins["spark-c"]["--address"] == "198.19.30.2:6379" and joins["spark-c"]["--node-ip-address"] == "198.19.30.1"
    assert "198.19.30.2:6379" in starts[2].until and "-ge 3" in starts[2].until  # asked from spark-c's container


def test_a_profile_cannot_set_the_pipeline_split_behind_sparkpairs_back() -> None:
    inventory = cluster(ring_data(), {"qwen3-235b": {"tp_size": 1, "pp_size": 3, "variants": {"vllm": {
        "serve_args": {"pipeline_parallel_size": 3}}}}})
    problems = runtime_of(inventory.profile("qwen3-235b", "vllm")).problems(inventory.for_runtime("vllm"),
                                                                            inventory.profile("qwen3-235b", "vllm"))
    assert problems == ["serve_args.pipeline_parallel_size: --pipeline-parallel-size is set by sparkpair from the "
                        "inventory; remove it"]


# --- the stall watch and the launch plan over N ranks ---------------------------------------------------------------

def test_each_rank_of_a_pipeline_is_expected_to_hold_its_share_of_the_weights() -> None:
    target = RepoManifest(files={"model.safetensors": "b1"}, blobs={"b1": 3000}, revision="r")
    assert watch.expected_bytes(target, None, cluster(ring_data(), PIPELINE_OF_THREE).profile().ranks) == 1000


NAME = "trtllm-multinode"


def scripted(inventory: Inventory) -> list[FakeNode]:
    """Every node of inventory: no engine container yet, doctor's probes unanswered (the preflight is patched)."""
    absent = json.dumps({"message": f"No such container: {NAME}"}) + "\n404\n"
    return [FakeNode(node.name, home="/home/nvidia")
            .on(is_probe_round, ProbeRound({docker.container(NAME): absent}, others=(1, "", "not answered")))
            .on("date +%s.%N", lambda call, node: f"{time.time():.9f}\n")
            for node in inventory.nodes]


def test_a_launch_plan_on_a_switch_of_four_writes_every_nodes_config_and_runs_mpirun_of_four(
        monkeypatch: pytest.MonkeyPatch) -> None:
    examined = launch.examined
    monkeypatch.setattr(launch, "examined", lambda *args: (examined(*args)[0], []))
    inventory = cluster(switch_data(4), TENSOR_OF_FOUR)
    assert inventory.container.name == NAME
    plan = launch.plan_launch(fake_pair(*scripted(inventory)), inventory, launch.LaunchOptions(profile="qwen3-235b"))
    assert plan.nodes == ["spark-a", "spark-b", "spark-c", "spark-d"] and plan.preflight == []
    assert plan.containers == dict.fromkeys(plan.nodes, "none")
    assert plan.serve.startswith("mpirun -np 4 ") and "--tp_size 4" in plan.serve
    assert plan.split == "tp_size 4 x pp_size 1: as models.qwen3-235b sets it"
    chosen = cluster(switch_data(4))
    shown = launch.plan_launch(fake_pair(*scripted(chosen)), chosen, launch.LaunchOptions(profile="qwen3-235b"))
    assert shown.split.startswith("tp_size 4 x pp_size 1: chosen for 4 nodes") and shown.serve == plan.serve
    hostfile = f"create {paths.CONFIG_DIR}/openmpi-hostfile"
    assert {change.node for change in plan.changes if change.summary == hostfile} == set(plan.nodes)


# --- the CLI -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("command", "reached"), [(["status"], "abc"), (["stop"], "abc"), (["logs"], ""),
                                                 (["bundle", "--out", "b.tar.gz"], "abc"),
                                                 (["launch", "gpt-oss-120b", "--no-wait"], "abc")])
def test_launch_status_logs_stop_and_bundle_reach_every_node_of_a_ring(
        ring_file: Path, command: list[str], reached: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(ring_file.parent / word) if word.endswith(".tar.gz") else word for word in command]
    main(["-i", str(ring_file), *argv])
    out, err = capsys.readouterr()
    assert "expected two for a command" not in err and "Traceback" not in err + out
    assert "SSH key" in err and all(f"spark-{n}" in out + err for n in reached)  # each was to be reached (logs:
    # the launch's head, not named)


@pytest.mark.parametrize(("command", "needle"), [
    (["launch", "--no-wait"], "models.qwen3-235b: tp_size 2 x pp_size 1 is 2 ranks"),
    (["render", "--out", "rendered"], "set tp_size: 1 and pp_size: 3 under models.qwen3-235b"),
    (["launch", "gpt-oss-120b", "--split-download"], "--split-download: works on two nodes only"),
])
def test_what_a_ring_cannot_launch_is_refused_in_one_line_before_any_node_is_asked(
        ring_file: Path, command: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An explicit split that does not fit the ring is kept as given, and refused."""
    data = yaml.safe_load(ring_file.read_text())
    ring_file.write_text(yaml.safe_dump({**data, "models": {"qwen3-235b": {"tp_size": 2}}}))
    out_dir = ring_file.parent / "rendered"
    assert main(["-i", str(ring_file), *[str(out_dir) if word == "rendered" else word for word in command]]) == 2
    err = capsys.readouterr().err
    assert needle in err and "SSH key" not in err and not out_dir.exists()
    assert err.count("\n") == 1 or err.startswith("Usage:")


def test_check_fabric_on_a_ring_goes_on_to_prove_every_rank(ring_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--check-fabric runs doctor --deep's MPI and NCCL jobs over every rank node (proven on the simulated switch
    of four and ring of three), so a ring is not refused for it: the launch goes on to reach the nodes."""
    data = yaml.safe_load(ring_file.read_text())
    ring_file.write_text(yaml.safe_dump({**data, "models": PIPELINE_OF_THREE}))
    assert main(["-i", str(ring_file), "launch", "--check-fabric", "--no-wait"]) == 1
    err = capsys.readouterr().err
    assert "works on two nodes only" not in err and "SSH key" in err and "Traceback" not in err
    assert "ssh-copy-id to every node of the inventory" in err and "both nodes" not in err  # three of them


def test_render_writes_a_ring_launch_once_the_profile_splits_over_three(ring_file: Path) -> None:
    data = yaml.safe_load(ring_file.read_text())
    ring_file.write_text(yaml.safe_dump({**data, "models": PIPELINE_OF_THREE}))
    out_dir = ring_file.parent / "rendered"
    assert main(["-i", str(ring_file), "render", "--out", str(out_dir)]) == 0
    launch_sh = (out_dir / "qwen3-235b" / "launch.sh").read_text()
    assert "mpirun -np 3 " in launch_sh and "--tp_size 1 --pp_size 3" in launch_sh
    assert (out_dir / "openmpi-hostfile").read_text().count("slots=1") == 3


def test_inventory_check_of_a_ring_names_every_node_and_each_profile_it_cannot_launch(
        ring_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-i", str(ring_file), "inventory", "check"]) == 0
    out, err = capsys.readouterr()
    assert "(spark-a (head), spark-b, spark-c;" in out and "qwen3-235b" not in err   # its split is chosen
    data = yaml.safe_load(ring_file.read_text())
    ring_file.write_text(yaml.safe_dump({**data, "models": {"qwen3-235b": {"tp_size": 2}}}))
    assert main(["-i", str(ring_file), "inventory", "check"]) == 0
    assert "warning: profile qwen3-235b (trtllm): not launchable here: models.qwen3-235b: tp_size 2" in \
        capsys.readouterr().err


def test_a_pair_listing_its_twins_in_another_order_keeps_each_nodes_first_twin_as_always() -> None:
    data = switch_data(2)
    data["topology"] = "pair"
    data["nodes"][1]["links"] = dict(reversed(list(data["nodes"][1]["links"].items())))
    inventory = cluster(data)
    view = inventory.for_runtime("vllm")
    worker = view.node("spark-b")
    env = runtime_of(inventory.profile("qwen3-235b", "vllm")).container_env(view, worker, None)
    first = next(iter(worker.links))
    assert (env["GLOO_SOCKET_IFNAME"], env["VLLM_HOST_IP"]) == (first, str(worker.links[first].ip))
    assert recipe.hostfile_lines(inventory)[1] == f"{worker.links[first].ip} slots=1"


def test_after_a_launch_across_four_the_pairs_inventory_acts_on_its_own_two_nodes_only() -> None:
    """A launch across the switch of four, then the inventory back to a pair: status, logs and stop act on the
    pair's nodes (before: the state's four names, two of which the pair no longer has)."""
    from sparkpair.engine.lifecycle import launch_nodes
    from sparkpair.engine.state import LaunchState

    four = LaunchState("qwen3-235b", ["spark-a", "spark-b", "spark-c", "spark-d"], 0.0, "mpirun -np 4 ...")
    pair = cluster(switch_data(2))
    assert launch_nodes(pair, four) == ["spark-a", "spark-b"]
    assert launch_nodes(cluster(switch_data(4)), four) == ["spark-a", "spark-b", "spark-c", "spark-d"]
    assert launch_nodes(pair, None) == ["spark-a", "spark-b"]
    gone = LaunchState("qwen3-235b", ["spark-x"], 0.0, "vllm serve ...")
    assert launch_nodes(pair, gone) == ["spark-a", "spark-b"]


def test_each_rank_node_needs_memory_for_its_own_share_of_the_target_tensor_or_pipeline() -> None:
    """A pipeline of three holds a third of the target on each node, as a tensor split of four a quarter (the
    memory check asked each node of a ring for the whole target at pp_size 3 and refused the launch)."""
    for data, split, ranks in ((ring_data(), PIPELINE_OF_THREE, 3), (switch_data(), TENSOR_OF_FOUR, 4)):
        inventory = parse_inventory({**data, "models": split})
        profile = inventory.profile()
        facts = Facts(inventory, profile)
        expected = profile.target_gib / ranks + (profile.draft_gib or 0) + profile.headroom_gib
        assert all(needed_gib(facts, node.name) == pytest.approx(expected) for node in inventory.nodes)
        assert needed_gib(facts, "spark-c") < profile.target_gib
