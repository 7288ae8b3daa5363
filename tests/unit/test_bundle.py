"""sparkpair bundle (engine.bundle) and its redaction (engine.redact); status's liveness verdict."""

from __future__ import annotations

import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from sparkpair.engine import bundle, lifecycle, redact
from sparkpair.inventory import read_inventory

ROOT = Path(__file__).resolve().parents[2]
CORPUS_LOGS = Path("/work/shared/reference/realworld/logs")
REAL_LOGS = [ROOT / "tests" / "fixtures" / "watch" / "trtllm-1.1.0rc3-spark-gpt-oss-120b.log",
             *sorted(CORPUS_LOGS.glob("*.log"))]


@pytest.mark.parametrize("text,expected,kind", [
    ("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz012345 x", "HF_TOKEN=[REDACTED] x", "Hugging Face token"),
    ("export MY_SERVICE_TOKEN=abc123xyz", "export MY_SERVICE_TOKEN=[REDACTED]", "value of MY_SERVICE_TOKEN"),
    ('"Env": ["HF_TOKEN=zzzzzzzzzzzzzzzz", "NCCL_SOCKET_IFNAME=enp1s0f1np1"]',
     '"Env": ["HF_TOKEN=[REDACTED]", "NCCL_SOCKET_IFNAME=enp1s0f1np1"]', "value of HF_TOKEN"),
    ('{"hf_token": "secretvalue99"}', '{"hf_token": "[REDACTED]"}', "value of hf_token"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc", "Authorization: Bearer [REDACTED]", "bearer credential"),
    ("TLLM_SPAWN_PROXY_PROCESS_IPC_HMAC_KEY=0123456789abcdef", "TLLM_SPAWN_PROXY_PROCESS_IPC_HMAC_KEY=[REDACTED]",
     "value of TLLM_SPAWN_PROXY_PROCESS_IPC_HMAC_KEY"),
    ('          password: "hunter22"', '          password: "[REDACTED]"', "value of password"),
    ("git clone https://user:pa55w0rd@host/x", "git clone https://user:[REDACTED]@host/x", "password in a URL"),
    ("a\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA\n-----END OPENSSH PRIVATE KEY-----\nz", "a\n[REDACTED]\nz",
     "private key"),
    ("vllm serve /sparkpair/hf/m --api-key sk-canary0123 --port 8355", "vllm serve /sparkpair/hf/m --api-key [REDACTED] "
     "--port 8355", "value of api-key"),
    ("vllm serve m --api-key 'sk canary' --port 1", "vllm serve m --api-key [REDACTED] --port 1", "value of api-key"),
    ("--api-key=sk-canary0123", "--api-key=[REDACTED]", "value of api-key"),
    # vLLM's own start line (tests/fixtures/logs/vllm/healthy-tp2-eagle3.head.log) with the api_key vLLM prints as a list
    ("(APIServer pid=7) INFO 11-25 22:23:31 [api_utils.py:286] non-default args: {'port': 8355, "
     "'api_key': ['sk-canary0123', 'sk-other4567'], 'nnodes': 2}",
     "(APIServer pid=7) INFO 11-25 22:23:31 [api_utils.py:286] non-default args: {'port': 8355, "
     "'api_key': ['[REDACTED]'], 'nnodes': 2}", "value of api_key"),
])
def test_what_looks_like_a_secret_is_redacted(text: str, expected: str, kind: str) -> None:
    redacted, found = redact.redact(text)
    assert redacted == expected and found[kind] >= 1


@pytest.mark.parametrize("text", [
    "HF_TOKEN_PATH=/sparkpair/secrets/hf_token", "max_tokens=16 max_num_tokens=1024", '"max_tokens": 16',
    "num_tokens: 5, tokens_per_block=32", "[TRT-LLM] [I] Generating a new HMAC key for server proxy_request_queue",
    "NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1",
])
def test_ordinary_settings_stay(text: str) -> None:
    assert redact.redact(text) == (text, {})


def test_an_engine_option_named_as_secret_is_redacted_whatever_its_name() -> None:
    """redact's options: a runtime's secret options, redacted in both spellings even when not named like a secret."""
    text = "serve --ssl-keyfile-password hunter22 --opaque-credential=abc123 --port 1"
    redacted, found = redact.redact(text, options=["--opaque-credential"])
    assert redacted == "serve --ssl-keyfile-password [REDACTED] --opaque-credential=[REDACTED] --port 1", redacted
    assert found == {"value of ssl-keyfile-password": 1, "value of opaque-credential": 1}


def test_real_logs_lose_nothing_and_a_known_secret_goes_wherever_it_is() -> None:
    for path in REAL_LOGS:
        text = path.read_text(errors="replace")
        assert redact.redact(text)[0] == text, path.name
    assert redact.redact("token=? no: Canary0123456789 here", ["Canary0123456789"])[0].endswith("[REDACTED] here")


def test_the_bundle_asks_nothing_of_secrets_or_keys(example_inventory_path: Path) -> None:
    inventory = read_inventory(example_inventory_path)
    for head in (True, False):
        for path, probe in bundle.node_probes(inventory, inventory.nodes[0].name, head).items():
            assert "secrets" not in probe.command.text and ".ssh" not in probe.command.text, path
            verbs = re.findall(r"sparkpair_root ([a-z-]+)", probe.command.shown)  # root only to read what it needs
            assert set(verbs) <= {"dmesg", "netplan-read"} and "sudo" not in probe.command.shown, path


def test_the_image_is_asked_its_versions_and_says_unknown_when_it_cannot_tell(tmp_path: Path) -> None:
    answer = subprocess.run(["sh", "-c", bundle.IMAGE_VERSIONS], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin", "NCCL_VERSION": "2.28.9"}, timeout=60)
    values = dict(line.split(": ", 1) for line in answer.stdout.splitlines())
    assert list(values) == ["tensorrt_llm", "nccl", "ucx", "openmpi", "cuda"]
    assert values["tensorrt_llm"] == "unknown" and values["nccl"] == "2.28.9" and values["cuda"] == "unknown"
    assert all(values.values())


def test_the_archive_is_private_lists_every_file_and_what_was_redacted(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "Operator0Token0Value")
    out = tmp_path / "evidence.tar.gz"
    result = bundle.BundleResult(path=str(out), missing=["spark-b/network/rdma-link.txt: rdma: not found"])
    files = [bundle.Collected("spark-a/engine/docker-inspect.json", '"Env": ["A_TOKEN=abcdef"]', "spark-a: docker"),
             bundle.Collected("spark-b/logs/x.log", "said Operator0Token0Value once", "spark-b: logs"),
             bundle.Collected("doctor.json", "{}", "sparkpair doctor --json")]
    bundle._write(result, files, out, "sim-pair")
    assert out.stat().st_mode & 0o777 == 0o600 and result.redactions == 2
    with tarfile.open(out) as archive:
        names = archive.getnames()
        manifest = archive.extractfile("evidence/MANIFEST.txt").read().decode()  # type: ignore[union-attr]
        log = archive.extractfile("evidence/spark-b/logs/x.log").read().decode()  # type: ignore[union-attr]
    assert names == ["evidence/MANIFEST.txt"] + [f"evidence/{item.path}" for item in files]
    assert log == "said [REDACTED] once"
    assert "spark-a/engine/docker-inspect.json  (" in manifest and "redacted: 1 value of A_TOKEN" in manifest
    assert "redacted: 1 known secret" in manifest and "doctor.json" in manifest
    assert "Not collected:\n  spark-b/network/rdma-link.txt: rdma: not found" in manifest


def _status(health: str = "ok", generation: str = "ok in 0.05 s", b_state: str = "running", b_ranks: int = 1,
            b_container: str = "running") -> lifecycle.Status:
    nodes = {"spark-a": {"container": "running", "ranks_alive": 1, "rank_state": "running"},
             "spark-b": {"container": b_container, "ranks_alive": b_ranks, "rank_state": b_state}}
    return lifecycle.Status(nodes=nodes, health=health, generation=generation, model="m")


@pytest.mark.parametrize("status,generated,state", [
    (_status(), True, "serving"),
    (_status(b_state="stopped"), True, "wedged"),
    (_status(generation="no answer within 5 s"), False, "wedged"),
    (_status(b_ranks=0, b_state="gone"), False, "degraded"),
    (_status(health="http 503", generation="not tried"), False, "degraded"),
    (_status(b_container="exited", b_ranks=0), False, "degraded"),
])
def test_serving_needs_both_ranks_running_and_a_generation_not_just_health(status: lifecycle.Status,
                                                                          generated: bool, state: str) -> None:
    assert lifecycle._overall(status, ["spark-a", "spark-b"], generated) == state
