"""The stand-in engine really spanning two MPI ranks (mpirun on loopback)."""

import json
import os
import signal
import socket
import time

import openai
import pytest
from simengine.testing import (
    MPIRUN_BASE,
    ServerJob,
    free_port,
    http_get,
    make_model,
    mpirun_args,
    pids_with_marker,
    run_tool,
    tool_env,
    wait_until,
)

MODEL = "nvidia/Qwen3-235B-A22B-FP4"
DRAFT = "nvidia/Qwen3-235B-A22B-Eagle3"
ACCEPT_PROB, DRAFT_LEN = 0.7, 3
SECRET = "hf_SECRET_pair_token_0123456789"
READY_LINES = ["[TRT-LLM] [I] get signal from executor worker", "INFO:     Started server process [",
               "INFO:     Waiting for application startup.", "INFO:     Application startup complete."]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    make_model(root, MODEL)
    make_model(root, DRAFT, local_dir=root / "eagle")
    return root


def recipe_yaml(tmp_path, draft_dir):
    path = tmp_path / "extra-llm-api-config.yml"
    path.write_text(f"""\
enable_attention_dp: false
enable_iter_perf_stats: true
cuda_graph_config:
    max_batch_size: 4
speculative_config:
    decoding_type: Eagle
    max_draft_len: {DRAFT_LEN}
    speculative_model_dir: {draft_dir}
kv_cache_config:
    free_gpu_memory_fraction: 0.9
    enable_block_reuse: false
""")
    return str(path)


def start_pair(tmp_path, cache, port, yaml_path, **knobs):
    env = tool_env(HF_HUB_CACHE=cache, **knobs)
    args = mpirun_args(2, ["trtllm-serve", MODEL, "--backend", "pytorch", "--tp_size", "2",
                           "--max_batch_size", "8", "--host", "127.0.0.1", "--port", str(port),
                           "--extra_llm_api_options", yaml_path])
    return ServerJob(args, env, tmp_path / "mpirun.log")


def client(port):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sim", max_retries=0, timeout=30)


@pytest.fixture
def pair(tmp_path, cache):
    port = free_port()
    job = start_pair(tmp_path, cache, port, recipe_yaml(tmp_path, cache / "eagle"),
                     SIM_ITER_MS=2, SIM_DRAFT_MS=0.5, SIM_PREFILL_MS=5, SIM_ACCEPT_PROB=ACCEPT_PROB, SIM_SEED=7,
                     HF_TOKEN=SECRET)
    try:
        job.wait_healthy(port, timeout=30)
        yield job, port
    finally:
        job.stop()


def test_two_ranks_serve_the_openai_api(pair):
    job, port = pair
    log = wait_until(lambda: all(line in job.output() for line in READY_LINES) and job.output(), 10,
                     what="the ready lines to be forwarded by mpirun")
    positions = [log.index(line) for line in READY_LINES]
    assert positions == sorted(positions), log
    assert "mpi_rank: 0" in log and "mpi_rank: 1" in log and "[RANK 1]" in log
    assert "EAGLE (v1/v2) draft checkpoints are incompatible with Eagle3" in log
    assert http_get(f"http://127.0.0.1:{port}/version")[1] == b'{"version": "1.3.0rc12"}'
    api = client(port)
    assert [m.id for m in api.models.list().data] == [MODEL]
    completion = api.completions.create(model=MODEL, prompt="Paris is great because", max_tokens=16)
    assert completion.usage.completion_tokens == 16 and len(completion.choices[0].text.split()) == 16
    assert completion.choices[0].finish_reason == "length" and completion.usage.prompt_tokens == 4
    stream = api.chat.completions.create(model=MODEL, max_tokens=32, stream=True,
                                         stream_options={"include_usage": True},
                                         messages=[{"role": "user", "content": "Say something"}])
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) == 32
    assert chunks[-1].usage.completion_tokens == 32 and chunks[-1].choices == []
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    again = api.chat.completions.create(model=MODEL, max_tokens=32,
                                        messages=[{"role": "user", "content": "Say something"}])
    assert again.choices[0].message.content == text, "generation is deterministic per prompt"


def test_request_errors(pair):
    _job, port = pair
    api = client(port)
    with pytest.raises(openai.NotFoundError):
        api.completions.create(model="no/such-model", prompt="x", max_tokens=2)
    with pytest.raises(openai.BadRequestError) as caught:
        api.completions.create(model=MODEL, prompt="x", max_tokens=2, extra_body={"frobnicate": 1})
    assert "extra_forbidden" in str(caught.value)


def test_metrics_report_the_configured_acceptance(pair):
    _job, port = pair  # the job was started with HF_TOKEN=SECRET
    api = client(port)
    http_get(f"http://127.0.0.1:{port}/metrics")  # drain
    for index in range(3):
        api.completions.create(model=MODEL, prompt=f"prompt number {index}", max_tokens=500)
    stats = json.loads(http_get(f"http://127.0.0.1:{port}/metrics")[1])
    assert json.loads(http_get(f"http://127.0.0.1:{port}/metrics")[1]) == [], "drained on read"
    spec = [item["specDecodingStats"] for item in stats]
    drafted = sum(s["numDraftTokens"] for s in spec)
    accepted = sum(s["numAcceptedTokens"] for s in spec)
    requests = sum(s["numRequestsWithDraftTokens"] for s in spec)
    expected_k = sum(ACCEPT_PROB ** i for i in range(1, DRAFT_LEN + 1))
    assert drafted == DRAFT_LEN * requests and len(stats) >= 400
    assert abs(accepted / drafted - expected_k / DRAFT_LEN) < 0.08
    assert abs((accepted + requests) / requests - (1 + expected_k)) < 0.25
    for item in stats:
        assert {"iter", "iterLatencyMS", "numActiveRequests", "kvCacheStats", "inflightBatchingStats"} <= set(item)
    prometheus = http_get(f"http://127.0.0.1:{port}/prometheus/metrics")[1].decode()
    assert "trtllm_request_success_total{" in prometheus
    assert "trtllm_spec_decode_num_draft_tokens_total{" in prometheus
    assert "trtllm_spec_decode_num_accepted_tokens_total{" in prometheus
    assert SECRET not in prometheus + json.dumps(stats) + _job.output()


def rank_pid(job, rank):
    return wait_until(lambda: pids_with_marker(job.marker, f"OMPI_COMM_WORLD_RANK={rank}"), 10,
                      what=f"rank {rank} process")[0]


def test_killing_rank_1_fails_requests_and_ends_the_job(pair):
    job, port = pair
    os.kill(rank_pid(job, 1), signal.SIGKILL)
    started = time.monotonic()

    def request_fails():
        try:
            client(port).completions.create(model=MODEL, prompt="x", max_tokens=50)
        except (openai.APIConnectionError, openai.InternalServerError):
            return True
        return False
    wait_until(request_fails, 10, interval=0.2, what="a failing request")
    assert job.wait_exit(timeout=10) != 0
    assert time.monotonic() - started < 10


def test_a_hung_rank_makes_rank_0_fail_requests_and_abort(tmp_path, cache):
    port = free_port()
    job = start_pair(tmp_path, cache, port, recipe_yaml(tmp_path, cache / "eagle"), SIM_COLLECTIVE_TIMEOUT_S=1.5)
    try:
        job.wait_healthy(port)
        worker = rank_pid(job, 1)
        os.kill(worker, signal.SIGSTOP)
        with pytest.raises((openai.APIConnectionError, openai.InternalServerError)):
            client(port).completions.create(model=MODEL, prompt="x", max_tokens=20)
        assert job.wait_exit(timeout=15) != 0
        assert "Executor died" in job.output()
    finally:
        for pid in pids_with_marker(job.marker):
            os.kill(pid, signal.SIGCONT)
        job.stop()


def test_model_missing_on_rank_1_stops_every_rank(tmp_path, cache):
    port, empty = free_port(), tmp_path / "empty-cache"
    empty.mkdir()
    serve = ["trtllm-llmapi-launch", "trtllm-serve", MODEL, "--tp_size", "2", "--port", str(port)]
    args = (MPIRUN_BASE + ["-np", "1", "env", f"HF_HUB_CACHE={cache}"] + serve
            + [":", "-np", "1", "env", f"HF_HUB_CACHE={empty}"] + serve)
    result = run_tool(args, tool_env(), timeout=60)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"OSError: rank 1 on {socket.gethostname()}:" in output
    assert "couldn't find them in the cached files" in output
    assert str(empty / "models--nvidia--Qwen3-235B-A22B-FP4") in output
    assert "1 of 2 rank(s) failed their startup checks (rank 1 on" in output
    assert "Application startup complete" not in output


def test_world_size_mismatch_under_mpirun(tmp_path, cache):
    args = mpirun_args(2, ["trtllm-serve", MODEL, "--tp_size", "1", "--port", str(free_port())])
    result = run_tool(args, tool_env(HF_HUB_CACHE=cache), timeout=60)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert output.count("RuntimeError: MPI world size is 2, but tp_size * pp_size * cp_size") == 1


def test_invalid_yaml_under_mpirun_ends_every_rank(tmp_path, cache):
    bad = tmp_path / "bad.yml"
    bad.write_text("kv_cache_config:\n  foo: 1\n")
    args = mpirun_args(2, ["trtllm-serve", MODEL, "--tp_size", "2", "--config", str(bad),
                           "--port", str(free_port())])
    result = run_tool(args, tool_env(HF_HUB_CACHE=cache), timeout=60)
    assert result.returncode != 0
    assert "kv_cache_config.foo\n  Extra inputs are not permitted" in result.stdout + result.stderr
