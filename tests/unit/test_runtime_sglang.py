"""The SGLang runtime (runtimes/sglang.py): its start on each rank node, its options checked against SGLang's own
definitions (sparkpair/data/sglang_server_args.json), the Spark traps refused with their sources, acceptance from
its gauges, and a misspelt option refused by the CLI before any node is asked."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

import sparkpair.transport
from sparkpair.bench.client import CounterStats, acceptance_from_gauges
from sparkpair.cli import main
from sparkpair.errors import RenderError
from sparkpair.inventory import parse_inventory
from sparkpair.runtimes import checked_view, runtime_named
from sparkpair.runtimes.sglang import RUNTIME, canonical

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "inventory.example.yaml").read_text())


def _inventory(variant: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> Any:
    data = yaml.safe_load(yaml.safe_dump(EXAMPLE))
    if variant is not None:
        data["models"] = {"qwen3-235b": {"variants": {"sglang": variant}}}
    if env is not None:
        data["engines"] = {"sglang": {"env": env}}
    return parse_inventory(data)


def _problems(variant: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> list[str]:
    inventory = _inventory(variant, env)
    view = inventory.for_runtime("sglang")
    return RUNTIME.problems(view, view.profile("qwen3-235b"))


def test_the_registry_names_sglang_and_its_module() -> None:
    assert runtime_named("sglang") is RUNTIME and RUNTIME.title == "SGLang"


def test_each_rank_node_runs_launch_server_with_its_rank_and_the_heads_qsfp_address() -> None:
    view = _inventory().for_runtime("sglang")
    profile = view.profile("qwen3-235b")
    head, worker = RUNTIME.starts(view, profile, ["spark-a", "spark-b"])
    assert head.serves and not worker.serves
    assert head.argv[:3] == ["python3", "-m", "sglang.launch_server"]
    pairs = {flag: worker.argv[i + 1] for i, flag in enumerate(worker.argv[:-1]) if flag.startswith("--")}
    assert pairs["--node-rank"] == "1" and pairs["--nnodes"] == "2" and pairs["--tp-size"] == "2"
    assert pairs["--dist-init-addr"] == f"{next(iter(view.head.links.values())).ip}:25000"
    assert profile.target == "Qwen/Qwen3-235B-A22B-GPTQ-Int4" and pairs["--served-model-name"] == profile.target
    assert "--enable-metrics" in worker.argv
    spec = worker.argv[worker.argv.index("--speculative-algorithm"):]
    assert spec[:8:2] == ["--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
                          "--speculative-eagle-topk"]
    assert spec[1] == "EAGLE3" and spec[5] == "3" and spec[7] == "1"
    assert spec[spec.index("--speculative-num-draft-tokens") + 1] == "4"
    assert RUNTIME.draft_len(profile) == 3


def test_every_node_advertises_its_own_qsfp_address_and_nccl_defaults_over_a_leftover_nccl_conf() -> None:
    view = _inventory().for_runtime("sglang")
    for node in view.nodes:
        env = RUNTIME.container_env(view, node, None)
        assert env["SGLANG_HOST_IP"] == str(next(iter(node.links.values())).ip)
        assert env["GLOO_SOCKET_IFNAME"] == next(iter(node.links)) and env["NCCL_SOCKET_IFNAME"].split(",") == list(node.links)
        assert env["NCCL_IB_USE_INLINE"] == env["NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS"] == "0"


def test_the_built_in_variant_passes_sglangs_definitions() -> None:
    assert _problems() == []


def test_a_misspelt_option_is_refused_naming_it_and_the_nearest() -> None:
    problems = _problems({"serve_args": {"mem_fraction_statc": 0.8}})
    assert problems == ["serve_args.mem_fraction_statc: SGLang 0.5.23's launch_server has no option "
                        "--mem-fraction-statc (did you mean mem_fraction_static?)"]


def test_an_abbreviation_sglangs_argparse_would_take_is_refused_but_an_alias_is_not() -> None:
    assert canonical("--tensor-parallel-size") == "--tp-size" and canonical("--tp") is None
    assert any("has no option --tp " in p or p.endswith("has no option --tp") or "--tp (did" in p
               for p in _problems({"serve_args": {"tp": 2}}))
    assert _problems({"serve_args": {"nccl_init_addr": "x:1"}}) == [
        "serve_args.nccl_init_addr: --dist-init-addr is set by sparkpair from the inventory and the profile; remove it"]


@pytest.mark.parametrize(("serve_args", "expected"), [
    ({"port": 9000}, "serve_args.port: --port is set by sparkpair"),
    ({"api_key": "s3cret"}, "serve_args.api_key: SGLang takes --api-key only on its command line"),
    ({"enable_metrics": True}, "serve_args.enable_metrics: --enable-metrics is set by sparkpair"),
    ({"context_length": "long"}, "serve_args.context_length: --context-length takes a whole number, not 'long'"),
    ({"mem_fraction_static": True}, "serve_args.mem_fraction_static: --mem-fraction-static takes a value, not true"),
    ({"enable_metrics_for_all_schedulers": 3}, "--enable-metrics-for-all-schedulers is a switch; write true"),
    ({"quantization": "int3"}, "serve_args.quantization: 'int3' is not one of"),
])
def test_values_are_checked_against_the_options_own_kind(serve_args: dict[str, Any], expected: str) -> None:
    problems = _problems({"serve_args": serve_args})
    assert len(problems) == 1 and expected in problems[0], problems


def test_a_multi_node_eagle_draft_with_topk_other_than_1_is_refused_with_its_source() -> None:
    problems = _problems({"serve_args": {"speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8}})
    assert len(problems) == 1 and problems[0].startswith("serve_args.speculative_eagle_topk: 4 across nodes;")
    assert "al-engr.com" in problems[0] and problems[0].endswith("write 1")
    one_node = _inventory({"tp_size": 1, "serve_args": {"speculative_eagle_topk": 4}}).for_runtime("sglang")
    assert RUNTIME.problems(one_node, one_node.profile("qwen3-235b")) == []


def test_sglang_takes_no_engine_config() -> None:
    assert _problems({"engine_config": {"speculative_config": {"x": 1}}}) == [
        "engine_config.speculative_config: SGLang takes no configuration file; give launch_server options as "
        "serve_args (serve_args.speculative_config)"]


@pytest.mark.parametrize(("env", "expected"), [
    ({"SGLANG_HOST_IP": "192.168.1.20"}, "engines.sglang.env.SGLANG_HOST_IP: sparkpair sets it to each node's own QSFP"),
    ({"GLOO_SOCKET_IFNAME": "wlan0"}, "engines.sglang.env.GLOO_SOCKET_IFNAME: wlan0 is not a QSFP interface"),
    ({"NCCL_SOCKET_IFNAME": "enp1s0f1np1,eth0"}, "engines.sglang.env.NCCL_SOCKET_IFNAME: enp1s0f1np1,eth0 is not"),
    ({"NCCL_IB_USE_INLINE": "1"}, "engines.sglang.env.NCCL_IB_USE_INLINE: 1 froze SGLang's NCCL warm-up"),
])
def test_the_spark_traps_in_the_environment_are_refused_with_their_source(env: dict[str, str], expected: str) -> None:
    problems = _problems(env=env)
    assert len(problems) == 1 and problems[0].startswith(expected), problems
    assert any(source in problems[0] for source in ("MiaAI-Lab", "cabled twins", "luxingcom"))
    assert _problems(env={"NCCL_SOCKET_IFNAME": "=enp1s0f1np1"}) == []


def test_a_bad_setting_is_a_render_error_naming_the_profile() -> None:
    inventory = _inventory({"serve_args": {"mem_fraction_statc": 0.8}})
    profile = inventory.for_runtime("sglang").profile("qwen3-235b")
    with pytest.raises(RenderError, match=r"^profile qwen3-235b: serve_args\.mem_fraction_statc: "):
        checked_view(inventory, profile)


def test_acceptance_from_the_gauges_over_the_verifies_counted() -> None:
    acceptance = acceptance_from_gauges(100, 2.5, 0.5)
    assert acceptance is not None
    assert (acceptance.accepted_tokens, acceptance.draft_tokens, acceptance.requests_with_drafts) == (150, 300, 100)
    assert acceptance.mean_accepted_length == 2.5 and acceptance.rate == 0.5
    assert acceptance_from_gauges(10, 0.0, 0.0) is None and acceptance_from_gauges(10, 2.0, float("nan")) is None


def test_counter_stats_reads_the_gauges_after_the_verifies_counted() -> None:
    names = RUNTIME.metrics
    stats = CounterStats(None, names.path, (names.drafted, names.accepted, names.drafts),  # type: ignore[arg-type]
                         (names.accept_length, names.accept_rate))
    stats._before = {names.drafts: 40.0, names.accept_length: 9.0, names.accept_rate: 0.9}
    stats._after = {names.drafts: 60.0, names.accept_length: 2.0, names.accept_rate: 0.25}
    acceptance = stats.acceptance
    assert acceptance is not None and (acceptance.accepted_tokens, acceptance.draft_tokens) == (20, 80)


def test_launch_refuses_a_misspelt_option_before_any_node_is_asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    def no_pair(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a node was asked")
    monkeypatch.setattr(sparkpair.transport, "Pair", no_pair)
    monkeypatch.setattr(socket.socket, "connect", no_pair)
    monkeypatch.setattr(socket, "create_connection", no_pair)
    data = yaml.safe_load(yaml.safe_dump(EXAMPLE))
    data["models"] = {"qwen3-235b": {"variants": {"sglang": {"serve_args": {"mem_fraction_statc": 0.8}}}}}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    code = main(["-i", str(path), "launch", "qwen3-235b", "--runtime", "sglang"])
    err = capsys.readouterr().err
    assert code in (1, 2) and "serve_args.mem_fraction_statc: SGLang 0.5.23's launch_server has no option " \
        "--mem-fraction-statc (did you mean mem_fraction_static?)" in err, err
    assert "Traceback" not in err and "a node was asked" not in err
