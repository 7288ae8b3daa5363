"""sparkpair at N nodes on the simulated switch of four (docs/cluster.md): setup-network (a switch port that is down
named with its fix, by setup-network and by doctor; the restore at the end), doctor --deep and launch
--check-fabric across four ranks, launch, status, logs and stop with the stand-in TensorRT-LLM at TP=4 (one mpirun
of four ranks, one per node), diff of the four nodes, then the real vLLM (its CPU build) at TP=4 with --nnodes 4.
One shape start for the module; `testbed_shape` brings back the pair after it. Run under
`flock /tmp/simpair.lock`.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from conftest import EAGER_VLLM, run_sparkpair, variant_inventory
from sparkpair_testbed.layout import VLLM_RAY_IMAGE_TAG

NODES = ("spark-a", "spark-b", "spark-c", "spark-d")
TWINS = ("enp1s0f1np1", "enP2p1s0f1np1")   # each node's port f1 to the switch
SPLIT = {"qwen3-235b": {"tp_size": 4}}   # one rank per Spark of the switch


@pytest.fixture(scope="module")
def switch_of_four(testbed_shape, tmp_path_factory):
    """The switch of four, networked by sparkpair, and its inventory with qwen3-235b split over the four nodes."""
    bed = testbed_shape(4, "switch")
    # The vLLM image into spark-c's and spark-d's new engines (about 45 s of `docker load`) while setup-network
    # runs; the real-vLLM test's own bed.vllm() then finds it done (the testbed lock orders the two).
    loading = ThreadPoolExecutor(max_workers=1)
    loading.submit(bed.vllm)   # its outcome is the real-vLLM test's to report, through its own bed.vllm()
    data = yaml.safe_load(Path(bed.inventory).read_text())
    assert data["topology"] == "switch" and [node["name"] for node in data["nodes"]] == list(NODES)
    path = tmp_path_factory.mktemp("switch4") / "inventory.yaml"
    path.write_text(yaml.safe_dump({**data, "models": SPLIT}))
    # spark-c and spark-d are made anew with each shape (new host keys): what the pair's nodes learnt of an
    # earlier one is forgotten first, as setup-network's refusal says to for a reinstalled node
    made = [name for node in data["nodes"][2:] for name in (node["name"], *(ip.split("/")[0]
                                                                            for ip in node["links"].values()))]
    for name in NODES[:2]:
        bed.exec(name, " ".join(f"ssh-keygen -q -R {host} -f /home/nvidia/.ssh/known_hosts >/dev/null 2>&1;" for host in made)
                 + " rm -f /home/nvidia/.ssh/known_hosts.old", user="nvidia", check=False)
    networked = run_sparkpair(path, "setup-network", "--yes", timeout=900)
    if networked.code != 0:
        pytest.fail(f"setup-network on the switch of four failed:\n{networked.text}")
    run_sparkpair(path, "stop")
    yield bed, path
    run_sparkpair(path, "stop")
    loading.shutdown(wait=True)   # never a load still running when the pair comes back


def doctor_json(path: Path, *args: str) -> list[dict]:
    """doctor's findings, as --json prints them."""
    run = run_sparkpair(path, "doctor", "--json", *args, timeout=600)
    return json.loads(run.out)["findings"]


def _serving_on_every_node(path: Path) -> dict:
    run = run_sparkpair(path, "status", "--json")
    status = json.loads(run.out)
    assert run.code == 0 and status["state"] == "serving", run.text
    assert sorted(status["nodes"]) == list(NODES) and all(node["ranks_alive"] > 0 for node in status["nodes"].values())
    return status


def _stop_cleans_every_node(bed, path: Path, container: str) -> None:
    stop = run_sparkpair(path, "stop")
    assert stop.code == 0 and all(f"{name}: removed {container}" in stop.out for name in NODES), stop.text
    for name in NODES:
        assert container not in bed.exec(name, "docker ps -a --format '{{.Names}}'").stdout
    assert json.loads(run_sparkpair(path, "status", "--json").out)["state"] == "stopped"


def test_a_switch_port_that_is_down_is_named_by_setup_network_and_doctor_with_the_fix(switch_of_four) -> None:
    bed, path = switch_of_four
    bed.fault("switch-port-down", node="spark-c")
    try:
        networked = run_sparkpair(path, "setup-network", "--yes", timeout=900)
        assert networked.code == 1, networked.text
        for twin in TWINS:
            assert (f"spark-c: {twin}: no carrier (fix: check the QSFP cable from spark-c's {twin} to the switch and "
                    "that its switch port is up") in networked.err, networked.text
        report = doctor_json(path, "--only", "links.carrier")
        assert sorted((f["node"], f["detail"]) for f in report if f["status"] == "FAIL") == \
            [("spark-c", f"{twin}: no carrier") for twin in sorted(TWINS)]
        assert all("to the switch and that its switch port is up" in f["fix"] for f in report if f["status"] == "FAIL")
    finally:
        bed.heal()
    assert run_sparkpair(path, "setup-network", "--yes", timeout=900).code == 0


def test_doctor_deep_runs_mpi_and_the_allreduce_across_all_four_ranks(switch_of_four) -> None:
    _, path = switch_of_four
    report = {f["check"]: f for f in doctor_json(path, "--deep", "--only", "deep.mpi,deep.allreduce", "--timeout", "120")}
    assert report["deep.mpi"]["status"] == "OK" and report["deep.mpi"]["node"] == "cluster", report
    assert all(f"rank {rank} {name}" in report["deep.mpi"]["detail"] for rank, name in enumerate(NODES))
    assert report["deep.allreduce"]["status"] == "OK" and "sum 10 as expected" in report["deep.allreduce"]["detail"]


def test_check_fabric_proves_all_four_ranks_and_stops_the_socket_fallback_before_any_model_loads(switch_of_four):
    bed, path = switch_of_four
    run = run_sparkpair(path, "launch", "--check-fabric", "--timeout", "60", timeout=600)
    assert run.code == 1 and "--check-fabric: NCCL over RoCE is not proven" in run.err, run.text
    assert "NCCL fell back to TCP sockets on spark-a, spark-b, spark-c, spark-d" in run.out, run.text
    for name in NODES:
        assert "trtllm-multinode" not in bed.exec(name, "docker ps -a --format '{{.Names}}'").stdout


def test_the_stand_in_tensorrt_llm_reaches_ready_at_tp4_across_the_switch(switch_of_four) -> None:
    bed, path = switch_of_four
    run = run_sparkpair(path, "launch", "--timeout", "300", timeout=1200)
    assert run.code == 0 and "ready in" in run.out, run.text
    assert "mpirun -np 4 " in run.err + run.out and "--tp_size 4" in run.err + run.out
    state = json.loads(bed.exec("spark-a", "cat ~/.sparkpair/state/launch.json", user="nvidia").stdout)
    assert state["nodes"] == list(NODES) and state["runtime"] == "trtllm"
    _serving_on_every_node(path)
    logs = run_sparkpair(path, "logs", "--tail", "20")
    assert logs.code == 0 and all(f"==> {name} (rank {rank}) <==" in logs.out for rank, name in enumerate(NODES))
    _stop_cleans_every_node(bed, path, "trtllm-multinode")


def test_diff_puts_the_four_nodes_side_by_side_a_planted_kernel_first(switch_of_four) -> None:
    """After the launch above placed the models on every node: nothing differs, but a planted kernel."""
    bed, path = switch_of_four
    kernel = bed.exec("spark-a", "uname -r").stdout.strip()
    bed.fault("kernel-string", node="spark-d")
    try:
        run = run_sparkpair(path, "diff", "--json", timeout=300)
        found = json.loads(run.out)
        assert run.code == 1 and found["nodes"] == list(NODES), run.text
        first = found["fields"][0]
        assert (first["field"], first["values"]) == ("kernel", {**{name: kernel for name in NODES[:3]},
                                                               "spark-d": "6.11.0-1099-nvidia-drifted"})
    finally:
        bed.heal()
    healthy = run_sparkpair(path, "diff", timeout=300)
    assert healthy.code == 0 and "≠" not in healthy.out, healthy.text


def test_the_real_vllm_reaches_ready_at_tp4_with_nnodes_4(switch_of_four, tmp_path: Path) -> None:
    bed, split = switch_of_four
    path = variant_inventory(split, tmp_path, EAGER_VLLM)  # four ranks compiling on two cores took minutes
    bed.vllm()  # the vLLM image in every node's engine, the tiny target and draft in the head's cache
    for name in NODES[2:]:  # the Ray image only where its two-node playbook runs: no 3 GB load into the others
        assert VLLM_RAY_IMAGE_TAG not in bed.exec(name, "docker images --format '{{.Repository}}:{{.Tag}}'").stdout
    run = run_sparkpair(path, "launch", "qwen3-235b", "--runtime", "vllm", "--timeout", "1500", timeout=1800)
    assert run.code == 0 and "ready in" in run.out, run.text
    state = json.loads(bed.exec("spark-a", "cat ~/.sparkpair/state/launch.json", user="nvidia").stdout)
    assert state["nodes"] == list(NODES) and state["runtime"] == "vllm"
    head = next(iter(yaml.safe_load(path.read_text())["nodes"][0]["links"].values())).split("/")[0]
    lines = state["command"].splitlines()  # each node's `vllm serve`: its rank, the head's switch address
    assert len(lines) == 4 and all(f"[{name}] vllm serve " in line and f"--nnodes 4 --node-rank {rank} " in line
                                   and f"--master-addr {head} " in line
                                   for rank, (name, line) in enumerate(zip(NODES, lines, strict=True)))
    last = bed.exec("spark-d", "docker exec vllm-multinode cat /var/log/sparkpair/serve.log").stdout
    assert "world_size=4 rank=3" in last
    _serving_on_every_node(path)
    _stop_cleans_every_node(bed, path, "vllm-multinode")


def test_restore_returns_every_node_of_the_switch_to_before_sparkpair(switch_of_four) -> None:
    bed, path = switch_of_four
    run = run_sparkpair(path, "setup-network", "--restore", "--yes", timeout=900)
    assert run.code == 0, run.text
    for name in NODES:
        assert f"{name}: " in run.out + run.err and "removed /etc/netplan/40-sparkpair-cx7.yaml" in run.out + run.err
        for twin in TWINS:
            shown = bed.exec(name, f"ip -o -4 addr show dev {twin}").stdout
            assert shown.strip() == "", f"{name}:{twin} still has {shown}"
