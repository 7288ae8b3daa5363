"""The simulated pair's stand-ins print what real DGX Sparks print (tests/fixtures/probes/real):
the same layout, order, units, spacing and GB10 memory fields, where only the machine's own values
(time, driver, temperature, serial, usage) may differ."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
from sparkpair_testbed import gb10
from sparkpair_testbed.layout import STANDINS_DIR, dgx_release

FIXTURES = Path(__file__).parent.parent / "fixtures" / "probes"
GPU = {"name": "NVIDIA GB10", "uuid": "GPU-0a1b2c3d-0000-1111-2222-333344445555", "index": 0,
       "pci_bus_id": "0000000F:01:00.0", "serial": "1234567890123", "node": "spark-a"}
IDLE_GB10_TABLES = ("nvidia-smi__4.txt", "docker-run-nvidia-smi__1.txt", "nvidia-smi__2.txt")


def real(name: str) -> str:
    return (FIXTURES / "real" / name).read_text()


def standin_output(name: str) -> str:
    return (FIXTURES / "standin" / name).read_text()


def nvidia_smi() -> ModuleType:
    """The nvidia-smi stand-in, loaded as a module (it is a script without a .py suffix)."""
    loader = importlib.machinery.SourceFileLoader("standin_nvidia_smi", str(STANDINS_DIR / "nvidia-smi"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def table_of(text: str) -> list[str]:
    """The nvidia-smi table from its timestamp line to the end of the GPU block (an NGC banner dropped)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}", line))
    return lines[start:start + 13]


def masked(line: str) -> str:
    """A table line with what differs between machines masked: versions, temperature, state, power."""
    line = re.sub(r"\d{3}\.\d+(\.\d+)? +", "DRIVER ", line)
    line = re.sub(r"CUDA Version: \d+\.\d+", "CUDA Version: X.Y", line)
    return re.sub(r"\d+C    P\d +\d+W", lambda m: "T" * len(m.group(0)), line)


@pytest.mark.parametrize("sample", IDLE_GB10_TABLES)
def test_the_nvidia_smi_table_is_a_real_gb10_table(sample: str) -> None:
    ours, theirs = table_of(nvidia_smi().table(GPU)), table_of(real(sample))
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}", ours[0].rstrip())  # "Fri Apr  3 14:11:57 2026"
    if theirs[0].endswith(" "):  # the samples whose trailing spaces were not trimmed
        assert len(ours[0]) == len(theirs[0])
    for mine, real_line in zip(ours[1:], theirs[1:], strict=True):
        assert len(mine) == len(real_line), (mine, real_line)
        assert masked(mine) == masked(real_line), (mine, real_line)
    assert "| Not Supported          |" in ours[9]


def test_no_process_on_a_headless_node_reads_as_on_a_real_one() -> None:
    ours = nvidia_smi().table(GPU).splitlines()
    theirs = real("docker-run-nvidia-smi__1.txt").splitlines()
    assert ours[-7:] == theirs[-7:]  # "No running processes found"


@pytest.mark.parametrize("sample, fields, fmt", [
    ("nvidia-smi-query-gpu__1.txt", "name,compute_cap,driver_version,memory.total", "csv,noheader"),
    ("nvidia-smi-query-gpu__2.txt", "name,memory.used,memory.total,utilization.gpu", "csv,noheader,nounits"),
    ("nvidia-smi-query-gpu__3.txt", "name,memory.total,memory.free", "csv"),
])
def test_gpu_queries_answer_like_a_real_gb10(sample: str, fields: str, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = nvidia_smi()
    assert module.csv_query(fields, module.fields(GPU), fmt) == 0
    ours = capsys.readouterr().out.splitlines()
    theirs = real(sample).splitlines()[:len(ours)]  # one node of the srun sample
    masked_driver = [re.sub(r"\d{3}\.\d+\.\d+", "DRIVER", line) for line in ours]
    assert masked_driver == [re.sub(r"\d{3}\.\d+\.\d+", "DRIVER", line) for line in theirs]


def test_the_captured_standin_outputs_are_current() -> None:
    assert standin_output("nvidia-smi-query.csv") == f"0, NVIDIA GB10, {nvidia_smi().DRIVER}, [N/A]\n"
    assert standin_output("meminfo.txt") == gb10.MEMINFO
    assert standin_output("dgx-release.txt").replace(re.search(r'SERIAL_NUMBER="(\d+)"', standin_output(
        "dgx-release.txt")).group(1), "S") == dgx_release("S")


def procps_free(meminfo: dict[str, int]) -> dict[str, int]:
    """What procps-ng 4's `free -b` prints for a meminfo (its own arithmetic), in bytes."""
    kib = {name: value * 1024 for name, value in meminfo.items()}
    cache = kib["Buffers"] + kib["Cached"] + kib["SReclaimable"]
    return {"total": kib["MemTotal"], "used": kib["MemTotal"] - kib["MemAvailable"], "free": kib["MemFree"],
            "shared": kib["Shmem"], "buff/cache": cache, "available": kib["MemAvailable"],
            "swap total": kib["SwapTotal"], "swap free": kib["SwapFree"]}


def free_numbers(text: str) -> list[int]:
    return [int(n) for line in text.splitlines() if line.startswith(("Mem:", "Swap:")) for n in line.split()[1:]]


def test_a_node_shows_the_memory_of_a_real_gb10() -> None:
    fields = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S+):\s+(\d+)", gb10.MEMINFO, re.MULTILINE)}
    free = procps_free(fields)
    assert free_numbers(real("free-b__1.txt")) == [free["total"], free["used"], free["free"], free["shared"],
                                                   free["buff/cache"], free["available"], free["swap total"],
                                                   free["swap total"] - free["swap free"], free["swap free"]]
    assert free_numbers(standin_output("free-b.txt")) == free_numbers(real("free-b__1.txt"))  # the node's real procps
    assert free_numbers(standin_output("free.txt"))[0] * 1024 == free["total"]                 # and in KiB
    assert 119 < free["total"] / 1024 ** 3 < 122


def test_meminfo_is_laid_out_as_the_kernel_prints_it() -> None:
    machine = (FIXTURES / "meminfo.txt").read_text()  # this machine's real /proc/meminfo
    pairs = [(m.group(1), int(m.group(2))) for m in re.finditer(r"^(\S+):\s+(\d+)", machine, re.MULTILINE)]
    assert gb10.render_meminfo(pairs) == machine


def test_taking_memory_moves_what_the_kernel_would_move() -> None:
    taken = {m.group(1): int(m.group(2))
             for m in re.finditer(r"^(\S+):\s+(\d+)", gb10.with_memory_taken(gb10.MEMINFO, 40), re.MULTILINE)}
    before = dict(gb10.MEMINFO_KB)
    delta = before["MemAvailable"] - taken["MemAvailable"]
    assert taken["MemAvailable"] == 40 * 1024 * 1024 and taken["MemTotal"] == before["MemTotal"]
    assert before["MemFree"] - taken["MemFree"] == delta and taken["AnonPages"] - before["AnonPages"] == delta
    with pytest.raises(ValueError):
        gb10.with_memory_taken(gb10.MEMINFO, 500)


def column_ends(line: str) -> list[int]:
    return [match.end() for match in re.finditer(r"\S+", line)]


def test_the_node_disk_reads_like_a_real_spark_disk() -> None:
    ours, theirs = standin_output("df-h.txt").splitlines(), real("df-h-cache.txt").splitlines()
    assert ours[0] == theirs[0]  # "Filesystem      Size  Used Avail Use% Mounted on"
    mine, real_row = ours[1].split(), theirs[1].split()
    assert (mine[0], mine[1], mine[-1]) == (real_row[0], real_row[1], real_row[-1]) == ("/dev/nvme0n1p2", "3.7T", "/")
    header_ends, row_ends = column_ends(ours[0]), column_ends(ours[1])
    assert header_ends[1:5] == row_ends[1:5]  # Size, Used, Avail, Use% right-aligned under their headers


def test_dgx_release_has_the_real_layout() -> None:
    keys = [line.split("=")[0] for line in real("dgx-release__1.txt").splitlines()]
    assert [line.split("=")[0] for line in dgx_release("1983925020080").splitlines()] == keys
    assert dgx_release("1983925020080") == real("dgx-release__1.txt")  # the same file, but for the serial number


def test_ethtool_prints_speed_and_link_as_a_real_connectx7() -> None:
    linked = standin_output("ethtool-linked.txt").splitlines()
    assert real("ethtool-grep-speed__3.txt").rstrip("\n") in linked  # "\tSpeed: 200000Mb/s"
    assert "\tLink detected: yes" in linked
    assert "\tSpeed: Unknown!" in standin_output("ethtool-no-link.txt").splitlines()
