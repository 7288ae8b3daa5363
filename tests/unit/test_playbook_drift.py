"""Playbook drift (issue 27, item 4): doctor's `playbook.*` rows compare what sparkpair would run with the
sourced snapshot of NVIDIA's playbooks (sparkpair/data/playbooks.json). A departure with a recorded reason
is INFO showing it; one without is WARN naming the playbook's value, ours and the fix. The snapshot names
a source for every value, and its reasons are the text of docs/profiles.md's tables."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkpair import report
from sparkpair.checks import Facts, Finding, Status, run_checks
from sparkpair.checks.catalog import DRIFT_CHECKS
from sparkpair.checks.playbook import GROUPS, reasons_of, snapshot, snapshot_problems
from sparkpair.errors import InventoryError
from sparkpair.inventory import Inventory, parse_inventory
from sparkpair.inventory.schema import DEPARTURE_KEY

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "inventory.example.yaml").read_text())
PROFILES_DOC = (ROOT / "docs" / "profiles.md").read_text()
# docs/profiles.md's departure tables, by the snapshot's reason groups.
TABLES = {"trtllm": "## Where sparkpair departs from the playbooks, and why",
          "vllm": "### Where sparkpair departs from NVIDIA's vLLM playbook, and why",
          "network": "### Where sparkpair departs from Connect Two Sparks, and why"}


def inventory(**changes: Any) -> Inventory:
    """The example inventory with top-level sections deep-updated by changes."""
    data = copy.deepcopy(EXAMPLE)
    for section, value in changes.items():
        if isinstance(value, dict) and isinstance(data.get(section), dict):
            data[section].update(value)
        else:
            data[section] = value
    return parse_inventory(data)


def drift(inv: Inventory, profile: str = "qwen3-235b", runtime: str = "trtllm") -> list[Finding]:
    """doctor's playbook rows for profile on runtime (they ask no node)."""
    chosen = inv.profile(profile, runtime)
    return run_checks(Facts(inv.for_runtime(chosen.runtime), chosen), DRIFT_CHECKS)


def departures(findings: list[Finding], status: Status) -> dict[str, Finding]:
    """Findings of one status by the departure key their detail starts with."""
    return {f.detail.split(":", 1)[0]: f for f in findings if f.status is status}


def test_the_example_inventory_shows_each_departure_with_its_reason() -> None:
    findings = drift(inventory())
    assert [f for f in findings if f.status in (Status.WARN, Status.FAIL)] == []
    explained = departures(findings, Status.INFO)
    assert set(explained) == {"env.OMPI_MCA_oob_tcp_if_include", "env.OMPI_MCA_orte_default_hostfile",
                              "config.enable_iter_perf_stats", "config.return_perf_metrics", "addressing.mtu",
                              "env.NCCL_IB_MERGE_NICS"}
    for key, finding in explained.items():
        why = reasons_of("network" if key.startswith("addressing.") else "trtllm")[key]
        assert finding.detail.endswith(f"Why (docs/profiles.md): {why}"), finding
        assert "0db7c14" in finding.detail and finding.node == "pair"
    assert "9000 here; 1500 in nvidia/connect-two-sparks/README.md" in explained["addressing.mtu"].detail
    ok = {f.check for f in findings if f.status is Status.OK}
    assert ok == {"playbook.image", "playbook.model"}


def test_the_example_on_vllm_shows_its_departures_with_their_reasons() -> None:
    findings = drift(inventory(), runtime="vllm")
    assert [f for f in findings if f.status is Status.WARN] == []
    explained = departures(findings, Status.INFO)
    assert {"flags.distributed-executor-backend", "flags.port", "env.NCCL_SOCKET_IFNAME", "env.MASTER_ADDR",
            "env.NCCL_IB_MERGE_NICS", "model.target", "model.draft", "flags.max-model-len"} <= set(explained)
    assert "mp here; ray in nvidia/vllm/README.md" in explained["flags.distributed-executor-backend"].detail


@pytest.mark.parametrize(("changes", "check", "key", "words"), [
    ({"container": {"env": {"NCCL_SOCKET_IFNAME": "enp1s0f1np1"}}}, "playbook.env", "env.NCCL_SOCKET_IFNAME",
     "set container.env.NCCL_SOCKET_IFNAME: enp1s0f1np1,enP2p1s0f1np1"),
    ({"container": {"env": {"NCCL_DEBUG": "INFO"}}}, "playbook.env", "env.NCCL_DEBUG", "remove container.env.NCCL_DEBUG"),
    ({"container": {"image": "nvcr.io/nvidia/tensorrt-llm/release:1.4.0rc0"}}, "playbook.image", "image",
     "set container.image: nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12"),
    ({"models": {"qwen3-235b": {"serve_args": {"max_num_tokens": 4096}}}}, "playbook.flags", "flags.max_num_tokens",
     "set models.qwen3-235b.serve_args.max_num_tokens: 1024"),
    ({"models": {"qwen3-235b": {"llm_api": {"kv_cache_config": {"free_gpu_memory_fraction": 0.8}}}}}, "playbook.flags",
     "config.kv_cache_config.free_gpu_memory_fraction",
     "set models.qwen3-235b.llm_api.kv_cache_config.free_gpu_memory_fraction: 0.9"),
    ({"models": {"qwen3-235b": {"max_draft_len": 4}}}, "playbook.flags", "config.speculative_config.max_draft_len",
     "set models.qwen3-235b.max_draft_len: 3"),
    ({"nodes": [{"name": "spark-a", "host": "spark-a.local", "links": {"enp1s0f1np1": "198.19.1.11/24",
                                                                       "enP2p1s0f1np1": "198.19.2.11/24"}},
                {"name": "spark-b", "host": "spark-b.local", "links": {"enp1s0f1np1": "198.19.1.12/24",
                                                                       "enP2p1s0f1np1": "198.19.2.12/24"}}]},
     "playbook.addressing", "addressing.addresses", "spark-a: enp1s0f1np1 192.168.100.10/24"),
    ({"server": {"port": 8000}}, "playbook.flags", "flags.port", "set server.port: 8355"),
])
def test_a_departure_without_a_reason_warns_naming_the_field_and_the_fix(changes: dict[str, Any], check: str,
                                                                          key: str, words: str) -> None:
    warned = departures(drift(inventory(**changes)), Status.WARN)
    assert list(warned) == [key], warned
    finding = warned[key]
    assert finding.check == check and finding.detail.endswith("no reason recorded"), finding
    assert words in finding.fix and f"playbook_reasons: {{{key}: ...}}" in finding.fix, finding.fix


def test_the_operators_reason_turns_the_warning_into_info_showing_it() -> None:
    why = "kept at INFO while we qualify the pair"
    findings = drift(inventory(container={"env": {"NCCL_DEBUG": "INFO"}}, playbook_reasons={"env.NCCL_DEBUG": why}))
    explained = departures(findings, Status.INFO)
    assert explained["env.NCCL_DEBUG"].detail.endswith(f"Why (playbook_reasons): {why}")
    assert departures(findings, Status.WARN) == {}


def test_sparkpairs_own_reason_does_not_cover_an_override_of_the_same_value() -> None:
    findings = drift(inventory(container={"env": {"OMPI_MCA_oob_tcp_if_include": "enp1s0f1np1"}}))
    assert list(departures(findings, Status.WARN)) == ["env.OMPI_MCA_oob_tcp_if_include"]


def test_other_twins_of_the_same_scheme_are_no_departure_from_the_environment() -> None:
    """The playbooks say to substitute the twins that are Up: the environment is compared with them."""
    nodes = [{"name": name, "host": f"{name}.local",
              "links": {"enp1s0f0np0": f"192.168.100.{last}/24", "enP2p1s0f0np0": f"192.168.101.{last}/24"}}
             for name, last in (("spark-a", 10), ("spark-b", 11))]
    findings = drift(inventory(nodes=nodes))
    assert not any(key in departures(findings, Status.WARN) | departures(findings, Status.INFO)
                   for key in ("env.UCX_NET_DEVICES", "env.NCCL_SOCKET_IFNAME", "env.OMPI_MCA_btl_tcp_if_include"))
    assert departures(findings, Status.WARN) == {}


def test_the_shipped_snapshot_names_a_source_for_every_value() -> None:
    assert snapshot_problems(snapshot()) == []
    assert {"speculative-decoding", "connect-two-sparks", "vllm"} <= set(snapshot()["sources"])


def value_groups(data: dict[str, Any]) -> list[tuple[str, ...]]:
    """The path of every value group of the snapshot."""
    paths: list[tuple[str, ...]] = [("addressing", kind) for kind in GROUPS["addressing"] if kind in data["addressing"]]
    for section in ("runtimes", "recipes"):
        paths += [(section, name, kind) for name, entry in data[section].items() for kind in GROUPS[section]
                  if kind in entry]
    return paths


@pytest.mark.parametrize("path", value_groups(snapshot()), ids=".".join)
@pytest.mark.parametrize("field", ["source", "where"])
def test_a_snapshot_value_missing_its_source_is_found(path: tuple[str, ...], field: str) -> None:
    data = copy.deepcopy(snapshot())
    holder = data
    for part in path:
        holder = holder[part]
    del holder[field]
    assert any(problem.startswith(".".join(path) + ":") for problem in snapshot_problems(data))


def test_a_source_without_its_url_or_commit_is_found() -> None:
    data = copy.deepcopy(snapshot())
    del data["sources"]["vllm"]["commit"]
    data["sources"]["connect-two-sparks"]["url"] = "http://example.invalid/readme"
    problems = snapshot_problems(data)
    assert "sources.vllm: no commit" in problems and any("connect-two-sparks: url" in p for p in problems)


def documented_reasons(group: str) -> set[tuple[frozenset[str], str]]:
    """The rows of one departure table in docs/profiles.md that name doctor rows: (keys, why)."""
    start = PROFILES_DOC.index(TABLES[group])
    found = set()
    for line in PROFILES_DOC[start:].split("\n")[2:]:
        if line.startswith("#"):
            break
        if not line.startswith("| `"):
            continue
        cells = line.strip().strip("|").split(" | ")
        found.add((frozenset(re.findall(r"`([^`]+)`", cells[0])), cells[-1].strip()))
    return found


@pytest.mark.parametrize("group", list(TABLES))
def test_the_reasons_in_docs_profiles_and_the_data_agree(group: str) -> None:
    data = {(frozenset(row["keys"]), row["why"]) for row in snapshot()["reasons"][group]}
    assert documented_reasons(group) == data


def test_every_reason_key_is_one_an_operator_can_record_too() -> None:
    keys = {key for rows in snapshot()["reasons"].values() for row in rows for key in row["keys"]}
    assert keys and all(DEPARTURE_KEY.parse(key, ("key",), []) == key for key in keys)


@pytest.mark.parametrize(("reasons", "words"), [
    ({"env.NCCL_DEBUG": "two\nlines"}, "playbook_reasons.env.NCCL_DEBUG"),
    ({"env.NCCL_DEBUG": "\x1b[31mred"}, "playbook_reasons.env.NCCL_DEBUG"),
    ({"../etc/passwd": "why"}, "playbook_reasons"),
    ({"env.NCCL_DEBUG": "x" * 301}, "playbook_reasons.env.NCCL_DEBUG"),
])
def test_a_bad_playbook_reason_is_one_line_naming_the_field(reasons: dict[str, str], words: str) -> None:
    with pytest.raises(InventoryError) as caught:
        inventory(playbook_reasons=reasons)
    lines = caught.value.lines()
    assert len(lines) == 1 and words in lines[0] and "\x1b" not in lines[0] and "\n" not in lines[0], lines


def test_info_rows_are_shown_and_counted(capsys: pytest.CaptureFixture[str]) -> None:
    report.findings(drift(inventory()), 0.5)
    out = capsys.readouterr().out
    assert "INFO" in out and "config.return_perf_metrics" in out
    assert out.rstrip().endswith("0 FAIL, 0 WARN, 2 OK, 0 SKIP, 6 INFO in 0.5 s")


def test_a_node_with_one_twin_is_told_to_give_it_both() -> None:
    nodes = [{"name": name, "host": f"{name}.local", "links": {"enp1s0f1np1": f"192.168.100.{last}/24"}}
             for name, last in (("spark-a", 10), ("spark-b", 11))]
    warned = departures(drift(inventory(nodes=nodes)), Status.WARN)
    assert {"env.UCX_NET_DEVICES", "env.NCCL_SOCKET_IFNAME", "addressing.addresses"} <= set(warned)
    assert warned["env.UCX_NET_DEVICES"].fix.startswith("give each node both twins of the cabled port")


def test_the_built_in_profiles_depart_only_with_reasons() -> None:
    """Every built-in on every runtime it has, on the example inventory: no unexplained departure (gpt-oss-120b
    follows the playbook's long-context draft since doctor found it still on the earlier one)."""
    example = inventory()
    unexplained = {(name, runtime, key) for name in example.profiles for runtime in ("trtllm", "vllm")
                   if runtime == example.profiles[name].runtime or runtime in example.profiles[name].variants
                   for key in departures(drift(example, name, runtime), Status.WARN)}
    assert unexplained == set()
