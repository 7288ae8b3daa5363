"""The known-bad catalog (sparkpair/data/known_bad.json, checks.knowncatalog, checks.known): every entry judged on a
real sample of the fact it reads (tests/fixtures/memory and the reference corpus, sources in their SOURCES.md and
INDEX.md), a catalog file read as hostile input (refused in one line naming the field, exit 2, before any node is
asked), and a FAIL stopping launch and setup-network like any launch-critical check.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from fakenode import ProbeRound
from test_checks import PROFILE, SIM, checked, healthy, rows
from test_seam_network_plan import NOT_YET, answers, pair_of

from sparkpair.checks import Facts, Status
from sparkpair.checks.catalog import is_launch_critical
from sparkpair.checks.known import check_known
from sparkpair.checks.knowncatalog import CatalogError, Versions, matches, packaged, parse_catalog, version_key
from sparkpair.cli import main
from sparkpair.network import flow
from sparkpair.network.run import SetupOptions
from sparkpair.probes import docker, host

ROOT = Path(__file__).resolve().parents[2]
MEMORY = ROOT / "tests" / "fixtures" / "memory"
CMA_KHO = (MEMORY / "meminfo-cma__dspark259.txt").read_text()       # CmaTotal 0 kB, CmaFree 940604 kB: a 7.0 kernel
CMA_HEALTHY = (MEMORY / "meminfo-cma__openipc2050.txt").read_text()  # CmaFree 559216 of CmaTotal 786432 kB
REAL_KERNEL = "6.17.0-1021-nvidia"       # `uname -r` of a real Spark (realworld/outputs/uname-a__1.txt)
PANIC_KERNEL = "6.17.0-1008-nvidia"      # as pytorch/pytorch#174358 names it
KHO_KERNEL = "7.0.0-1019-nvidia"         # as eugr/spark-vllm-docker#389 and NVIDIA/NV-Kernels#591 name it
CUDA_IMAGE_NCCL = "2.16.2-1"             # NCCL_VERSION as nvidia/cuda:12.0.0-runtime-ubuntu22.04 sets it (gitlab.com/
                                         # nvidia/container-images/cuda, dist/12.0.0/ubuntu2204/runtime/Dockerfile)
NCCL_INFO_VERSION = "2.28.9+cuda13.0"    # `NCCL version 2.28.9+cuda13.0` (tests/fixtures/rdma/nccl-debug-info-net-ib__1)
HANG_NCCL = "2.30.4"                     # the version NVIDIA/nccl#2167 reports (pip nvidia-nccl-cu13==2.30.4)


def judged(**facts_of_b: Any) -> dict[str, Any]:
    """known.* rows of spark-b after its facts changed (check -> finding)."""
    facts = healthy()
    for probe, value in facts_of_b.pop("probes", {}).items():
        facts.nodes["spark-b"][probe] = value
    if "image" in facts_of_b:
        facts.inventory = dataclasses.replace(facts.inventory, container=dataclasses.replace(
            facts.inventory.container, image=facts_of_b["image"]))
    return {row.check: row for row in check_known(facts) if row.node == "spark-b"}


def with_image_env(env: dict[str, str]) -> dict[Any, Any]:
    return {docker.image_config(SIM.container.image): docker.ImageConfig("sha256:" + "41" * 32, (), env, {})}


# --- each entry, on a real sample of the fact it reads ---------------------------------------------------------

def test_the_kho_kernel_is_proven_by_cmafree_above_cmatotal_and_cleared_by_kho_off() -> None:
    found = judged(probes={host.KERNEL: KHO_KERNEL, host.MEMINFO: host.parse_meminfo(CMA_KHO)})
    row = found["known.kernel-kho-cma"]
    assert row.status is Status.FAIL and row.detail.startswith("CmaFree 940604 kB > CmaTotal 0 kB: NCCL's init fails")
    assert "kho=off" in row.fix and "https://github.com/NVIDIA/NV-Kernels/pull/591 (2026-09-14)" in row.fix
    cleared = judged(probes={host.KERNEL: KHO_KERNEL, host.MEMINFO: host.parse_meminfo(CMA_HEALTHY)})
    assert cleared["known.kernel-kho-cma"].status is Status.OK
    assert "CmaFree 559216 kB <= CmaTotal 786432 kB: not affected" in cleared["known.kernel-kho-cma"].detail
    unread = judged(probes={host.KERNEL: KHO_KERNEL, host.MEMINFO: {"MemAvailable": 1}})["known.kernel-kho-cma"]
    assert unread.status is Status.WARN and "cannot be read (no CmaTotal/CmaFree" in unread.detail
    # the symptom is the proof whatever the version string says; a 6.17 kernel with a sane pool is not listed
    assert judged(probes={host.KERNEL: REAL_KERNEL, host.MEMINFO: host.parse_meminfo(CMA_KHO)})[
        "known.kernel-kho-cma"].status is Status.FAIL
    assert "known.kernel-kho-cma" not in judged(probes={host.KERNEL: REAL_KERNEL,
                                                        host.MEMINFO: host.parse_meminfo(CMA_HEALTHY)})


def test_the_panicking_617_kernel_is_named_by_its_version_only() -> None:
    assert judged(probes={host.KERNEL: PANIC_KERNEL})["known.kernel-6-17-0-1008-panic"].status is Status.WARN
    assert "known.kernel-6-17-0-1008-panic" not in judged(probes={host.KERNEL: REAL_KERNEL})


def test_nccl_2304_warns_unless_nvls_is_off_in_the_engines_environment() -> None:
    row = judged(probes=with_image_env({"NCCL_VERSION": f"{HANG_NCCL}-1"}))["known.nccl-2-30-4-nvls-hang"]
    assert row.status is Status.WARN and "NCCL_NVLS_ENABLE not set (on)" in row.detail
    off = dataclasses.replace(SIM, container=dataclasses.replace(SIM.container, env={"NCCL_NVLS_ENABLE": "0"}))
    facts = Facts(off, off.profile(PROFILE), dict(healthy().nodes))
    facts.nodes["spark-b"].update(with_image_env({"NCCL_VERSION": HANG_NCCL}))
    cleared = {f.check: f for f in check_known(facts) if f.node == "spark-b"}["known.nccl-2-30-4-nvls-hang"]
    assert cleared.status is Status.OK and "NCCL_NVLS_ENABLE=0: not affected" in cleared.detail
    assert "known.nccl-2-30-4-nvls-hang" not in judged(probes=with_image_env({"NCCL_VERSION": "2.30.3-1"}))


def test_an_nccl_older_than_the_playbooks_warns_and_the_validated_one_does_not() -> None:
    assert judged(probes=with_image_env({"NCCL_VERSION": CUDA_IMAGE_NCCL}))["known.nccl-before-2-28-9"].status \
        is Status.WARN
    for version in (NCCL_INFO_VERSION, "2.28.9-1", "2.29.7"):
        assert "known.nccl-before-2-28-9" not in judged(probes=with_image_env({"NCCL_VERSION": version}))
    assert judged(probes=with_image_env({"PATH": "/usr/bin"})) == judged()  # an image that states none: nothing


def test_the_outdated_ngc_vllm_image_is_named_by_its_reference() -> None:
    assert judged(image="nvcr.io/nvidia/vllm:25.12-py3")["known.vllm-image-25-12"].status is Status.WARN
    assert "known.vllm-image-25-12" not in judged(image="nvcr.io/nvidia/vllm:26.05-py3")


def test_every_node_says_which_catalog_judged_it_and_what_applies() -> None:
    summary = {row.node: row.detail for row in checked(healthy()) if row.check == "known.catalog"}
    assert summary == {name: "sparkpair's catalog of 2026-09-20, 5 entries: none applies" for name in summary}
    assert set(summary) == {"spark-a", "spark-b"}
    facts = healthy()
    facts.nodes["spark-b"][host.KERNEL] = PANIC_KERNEL
    assert rows(checked(facts), "known.catalog", "spark-b")[0].detail.endswith(": known.kernel-6-17-0-1008-panic")


def test_versions_compare_as_their_numbers() -> None:
    assert version_key(KHO_KERNEL) == (7, 0, 0, 1019) and version_key("2.28.9-1") == (2, 28, 9, 1)
    assert matches(Versions(first="7.0.0"), "kernel", KHO_KERNEL) and not matches(Versions(first="7.0.0"), "kernel",
                                                                                   REAL_KERNEL)
    assert matches(Versions(exactly=("2.30.4",)), "nccl", "2.30.4-1") and not matches(
        Versions(exactly=("2.30.4",)), "nccl", "2.30.40")
    assert not matches(Versions(before="2.28.9"), "nccl", "") and not matches(Versions(exactly=("x:1",)), "image", "x:2")


# --- the catalog as data: sparkpair's, and a file read as hostile input ----------------------------------------

def test_every_entry_of_sparkpairs_catalog_cites_public_sources_with_dates() -> None:
    catalog = packaged()
    assert catalog.updated == "2026-09-20" and len(catalog.entries) == 5
    for entry in catalog.entries:
        assert entry.sources and all(source.url.startswith("https://github.com/") for source in entry.sources)
        assert entry.symptom and entry.fix


GOOD = json.loads((ROOT / "sparkpair" / "data" / "known_bad.json").read_text())


def mutated(change: Any) -> str:
    data = json.loads(json.dumps(GOOD))
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize(("change", "named"), [
    (lambda d: d.pop("updated"), "updated"),
    (lambda d: d.update(entries={}), "entries"),
    (lambda d: d["entries"][0].update(id="Kernel KHO"), "entries[0].id"),
    (lambda d: d["entries"][1].update(component="bios"), "entries[1].component"),
    (lambda d: d["entries"][0].update(severity="PANIC"), "entries[0].severity"),
    (lambda d: d["entries"][0].update(proof="rm -rf /"), "entries[0].proof"),
    (lambda d: d["entries"][2].update(symptom="line one\nline two"), "entries[2].symptom"),
    (lambda d: d["entries"][2].update(fix="\x1b[2Jcleared"), "entries[2].fix"),
    (lambda d: d["entries"][3].update(fix="x" * 700), "entries[3].fix"),
    (lambda d: d["entries"][0]["sources"][0].update(url="http://example.com/x"), "entries[0].sources[0].url"),
    (lambda d: d["entries"][0]["sources"][0].update(date="14/09/2026"), "entries[0].sources[0].date"),
    (lambda d: d["entries"][0].update(sources=[]), "entries[0].sources"),
    (lambda d: d["entries"][0].update(versions={"from": "seven"}), "entries[0].versions.from"),
    (lambda d: d["entries"][4].update(versions={"from": "1"}), "entries[4].versions"),
    (lambda d: d["entries"][0].update(extra=1), "entries[0]: unknown key extra"),
    (lambda d: d["entries"].append(d["entries"][0]), "given twice"),
])
def test_a_catalog_that_is_not_one_is_refused_naming_the_field(change: Any, named: str) -> None:
    with pytest.raises(CatalogError, match=named.replace("[", r"\[").replace("]", r"\]")):
        parse_catalog(mutated(change), "f")


def test_a_huge_deep_or_broken_catalog_is_refused_before_it_is_parsed() -> None:
    for text, said in (("[" * 10000 + "]" * 10000, "nested deeper"), ('{"a": "' + "x" * 300_000 + '"}', "larger"),
                       ("{not json", "not JSON"), ("[]", "an object")):
        with pytest.raises(CatalogError, match=said):
            parse_catalog(text, "f")
    assert parse_catalog(json.dumps(GOOD), "f").origin == "f"


def test_doctor_catalog_file_refuses_a_bad_one_in_one_line_before_any_node_is_asked(
        tmp_path: Path, example_inventory_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "catalog.json"
    bad.write_text(mutated(lambda d: d["entries"][0]["sources"][0].update(date="yesterday")))
    for command in (["doctor"], ["launch"], ["setup-network", "--dry-run"]):
        assert main(["-i", str(example_inventory_path), *command, "--catalog", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "entries[0].sources[0].date: a date as YYYY-MM-DD" in err, err
        assert "SSH" not in err and "known_bad.json" in err
    for given, said in ((tmp_path / "none.json", "cannot be read"), (tmp_path, "cannot be read")):
        assert main(["-i", str(example_inventory_path), "doctor", "--catalog", str(given)]) == 2
        assert said in capsys.readouterr().err
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe{}")
    assert main(["-i", str(example_inventory_path), "doctor", "--catalog", str(binary)]) == 2
    assert "not UTF-8 text" in capsys.readouterr().err


# --- a FAIL stops launch and setup-network ---------------------------------------------------------------------

def test_a_catalog_fail_is_launch_critical_and_refuses_setup_network() -> None:
    assert is_launch_critical("known.kernel-kho-cma") and is_launch_critical("known.catalog")
    meminfo = "MemTotal:       125441420 kB\nMemAvailable:   121157276 kB\n" + CMA_KHO
    rounds = {"spark-a": ProbeRound(answers("spark-a"), others=NOT_YET),
              "spark-b": ProbeRound({**answers("spark-b"), host.KERNEL: f"{KHO_KERNEL}\n", host.MEMINFO: meminfo},
                                    others=NOT_YET)}
    pair, _ = pair_of(**rounds)
    plan = flow.plan_setup(pair, SIM, SetupOptions())
    assert [line.split(": known.")[0] for line in plan.refusals] == ["spark-b"]
    assert "known.kernel-kho-cma: CmaFree 940604 kB > CmaTotal 0 kB" in plan.refusals[0]
    assert "(fix: add kho=off to the kernel command line" in plan.refusals[0]
    healthy_rounds = {name: ProbeRound(answers(name), others=NOT_YET) for name in ("spark-a", "spark-b")}
    assert flow.plan_setup(pair_of(**healthy_rounds)[0], SIM, SetupOptions()).refusals == []
