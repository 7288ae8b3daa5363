"""sparkpair on the stand-in SGLang (sparkpair/sglang-sim:0.5.23: the real sglang package parses its command line,
simengine serves) across the simulated pair: `launch qwen3-235b --runtime sglang` at TP=2 with the Eagle3 draft,
then status, bench (acceptance from SGLang's own gauges), logs, the lock and diff, the bundle, stop; and the
prep's proofs of the stand-in that need a started SGLang (its parser refuses a misspelt option as sparkpair
does, the committed definitions are the image's), on the same start.

One start is shared by the module (`served`). `scripts/testbed sglang` puts the image in both nodes' engines and
the synthetic target `Qwen/Qwen3-235B-A22B-FP8` and draft in the head's HF cache; the module's inventory points
the profile's SGLang variant at that target (the built-in names the GPTQ-Int4 checkpoint that fits two Sparks)
and engines.sglang at the stand-in image. sparkpair copies both models to the worker.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, bundle_contents, ensure_networked, run_sparkpair

TARGET = "Qwen/Qwen3-235B-A22B-FP8"          # what scripts/testbed sglang plants (sglang_pair.TARGET_REPO)
DRAFT = "lmsys/Qwen3-235B-A22B-EAGLE3"
IMAGE = "sparkpair/sglang-sim:0.5.23"
CONTAINER = "sglang-multinode"
LAUNCH = ("launch", "qwen3-235b", "--runtime", "sglang", "--timeout", "600")


def _containers(bed, node: str) -> str:
    return bed.exec(node, "docker ps -a --format '{{.Names}} {{.Status}}'").stdout


@pytest.fixture(scope="module")
def served(testbed, tmp_path_factory):
    """The pair's inventory with SGLang's image and the stand-in's target, and one launch on it; stopped after."""
    testbed.cli("sglang", timeout=1800)
    ensure_networked(testbed)
    data = yaml.safe_load(Path(testbed.inventory).read_text())
    data["engines"] = {"sglang": {"image": IMAGE}}
    data["models"] = {"qwen3-235b": {"variants": {"sglang": {"target": TARGET}}}}
    folder = tmp_path_factory.mktemp("sglang")
    inventory = folder / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(data))
    run_sparkpair(testbed.inventory, "stop")
    run = run_sparkpair(inventory, *LAUNCH, "--lock", folder / "sparkpair.lock", timeout=900)
    yield testbed, inventory, run, folder
    run_sparkpair(inventory, "stop")


def test_launch_reaches_serving_at_tp2_across_both_nodes_with_the_eagle3_draft(served) -> None:
    bed, _, run, folder = served
    assert run.code == 0, run.text
    assert "--node-rank 1" in run.err and "--speculative-algorithm EAGLE3" in run.err
    assert "--speculative-eagle-topk 1" in run.err
    for node in ("spark-a", "spark-b"):
        assert f"{CONTAINER} Up" in _containers(bed, node)
    worker = bed.exec("spark-b", f"docker exec {CONTAINER} cat /var/log/sparkpair/serve.log").stdout
    assert "world_size=2 rank=1 local_rank=0" in worker and "Init torch distributed ends." in worker
    assert "type=LlamaForCausalLMEagle3" in worker   # the draft, from the worker's own (copied) cache
    env = bed.exec("spark-b", f"docker exec {CONTAINER} printenv SGLANG_HOST_IP GLOO_SOCKET_IFNAME").stdout.split()
    addresses = bed.exec("spark-b", f"ip -4 -o addr show dev {env[1]}").stdout
    assert env[0].startswith("198.1") and f" {env[0]}/" in addresses   # the worker's own QSFP twin and its address
    state = json.loads(bed.exec("spark-a", "cat ~/.sparkpair/state/launch.json", user="nvidia").stdout)
    assert state["runtime"] == "sglang" and state["nodes"] == ["spark-a", "spark-b"]
    assert (folder / "sparkpair.lock").exists()


def test_status_says_serving(served) -> None:
    bed, inventory, _, _ = served
    run = run_sparkpair(inventory, "status", "--json")
    status = json.loads(run.out)
    assert run.code == 0 and status["state"] == "serving", run.text
    assert status["model"] == TARGET and status["generation"].startswith("ok")
    assert all(node["ranks_alive"] > 0 for node in status["nodes"].values())


def test_bench_reads_acceptance_from_sglangs_gauges(served, tmp_path: Path) -> None:
    _, inventory, _, _ = served
    run = run_sparkpair(inventory, "bench", "qwen3-235b", "--concurrency", "1", "--requests", "3",
                        "--max-tokens", "32", "--out", str(tmp_path), "--json", timeout=600)
    assert run.code == 0, run.text
    record = json.loads((tmp_path / "results.json").read_text())
    assert record["provenance"]["runtime"] == "sglang" and record["provenance"]["target"] == TARGET
    row = record["rows"][0]
    assert row["requests"] - row["errors"] == 3 and row["output_tokens"] >= 3
    # sglang:spec_accept_length and sglang:spec_accept_rate over the sglang:spec_verify_calls_total counted
    assert row["draft_tokens"] and 0.0 < row["acceptance_rate"] < 1.0 and 1.0 < row["mean_accepted_length"] <= 4.0
    status = json.loads(run_sparkpair(inventory, "status", "--json").out)
    assert 0.0 < status["acceptance_rate"] < 1.0


def test_logs_show_each_nodes_rank(served) -> None:
    _, inventory, _, _ = served
    run = run_sparkpair(inventory, "logs", "--tail", "5000")
    assert run.code == 0 and "==> spark-a (rank 0) <==" in run.out and "==> spark-b (rank 1) <==" in run.out
    assert "The server is fired up and ready to roll!" in run.out


def test_diff_against_the_lock_finds_nothing_and_the_bundle_holds_both(served, tmp_path: Path) -> None:
    _, inventory, _, folder = served
    lock = folder / "sparkpair.lock"
    held = json.loads(lock.read_text())
    assert IMAGE in json.dumps(held)
    assert run_sparkpair(inventory, "diff", "--lock", lock).code == 0
    names, text = bundle_contents(inventory, tmp_path / "bundle.tar.gz", lock)
    assert {"sparkpair.lock", "diff-lock.json"} <= names
    assert "world_size=2 rank=1" in text   # the worker's SGLang log


def test_sglangs_own_parser_refuses_the_misspelt_option_sparkpair_refuses(served, tmp_path: Path) -> None:
    bed, inventory, _, _ = served
    data = yaml.safe_load(inventory.read_text())
    data["models"]["qwen3-235b"]["variants"]["sglang"]["serve_args"] = {"mem_fraction_statc": 0.8}
    misspelt = tmp_path / "inventory.yaml"
    misspelt.write_text(yaml.safe_dump(data))
    ours = run_sparkpair(misspelt, *LAUNCH)
    assert ours.code != 0 and "has no option --mem-fraction-statc (did you mean mem_fraction_static?)" in ours.err
    theirs = bed.exec("spark-a", f"docker exec {CONTAINER} python3 -m sglang.launch_server --model-path x "
                                 "--mem-fraction-statc 0.8", check=False, timeout=120)
    assert theirs.returncode == 2
    assert theirs.stderr.strip().splitlines()[-1] == ("sglang serve: error: unrecognized arguments: "
                                                      "--mem-fraction-statc 0.8")


def test_the_committed_definitions_are_the_images(served) -> None:
    """scripts/sglang_schema/derive.py --check in the image: sparkpair/data's SGLang definitions are its SGLang's."""
    bed, _, _, _ = served
    check = bed.exec("spark-a", ["docker", "run", "--rm", "--network", "none",
                                 "-v", f"{ROOT / 'scripts' / 'sglang_schema'}:/derive:ro",
                                 "-v", f"{ROOT / 'sparkpair' / 'data'}:/data:ro", IMAGE,
                                 "python3", "/derive/derive.py", "--check", "--out-dir", "/data"], check=False, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_stand_in_answers_sglangs_own_api(served) -> None:
    """The native /generate (meta_info with the verify count and accept length) and /get_server_info: what the
    prep's own start proved, on this one."""
    bed, _, _, _ = served
    curl = "curl -s -m 60 http://127.0.0.1:8355"
    body = json.loads(bed.exec("spark-a", f"{curl}/generate -H 'Content-Type: application/json' "
                                          """-d '{"text": "Spark", "sampling_params": {"max_new_tokens": 9}}'""").stdout)
    meta = body["meta_info"]
    assert meta["completion_tokens"] == 9 and meta["finish_reason"]["type"] == "length" and meta["spec_verify_ct"] >= 1
    info = json.loads(bed.exec("spark-a", f"{curl}/get_server_info").stdout)
    assert info["version"] == "0.5.23" and info["nnodes"] == 2 and info["tp_size"] == 2


def test_stop_leaves_nothing_running(served) -> None:
    bed, inventory, _, _ = served
    run = run_sparkpair(inventory, "stop")
    assert run.code == 0, run.text
    for node in ("spark-a", "spark-b"):
        assert CONTAINER not in _containers(bed, node)
    assert json.loads(run_sparkpair(inventory, "status", "--json").out)["state"] == "stopped"
