"""The lines the stand-in SGLang prints, in SGLang's own formats, each with where it was seen.

SGLang logs through `logging` with `[%(asctime)s] %(message)s` (prepare_server_args' basicConfig)
in the launcher and `[%(asctime)s TP<rank>] %(message)s` in a scheduler process; uvicorn's own
lines and the access log go through the same format. The public logs each line is taken from are
kept in sparkpair's tests/fixtures/logs/sglang/ (tests/fixtures/logs/SOURCES.md names their
sources); a line no public log shows is marked HAND-MADE below, with the SGLang 0.5.23 source
that formats it where there is one.
"""

import sys
import time


def _stamp():
    return time.strftime("%Y-%m-%d %H:%M:%S")


def main(message):
    """A launcher-process line: `[2025-06-23 15:06:53] message` (multinode_node1__sglang7478.log)."""
    print(f"[{_stamp()}] {message}", file=sys.stderr, flush=True)


def tp(rank, message):
    """A scheduler line of TP rank RANK: `[2025-06-23 15:06:10 TP0] message` (the same log)."""
    print(f"[{_stamp()} TP{rank}] {message}", file=sys.stderr, flush=True)


def uvicorn(message):
    """uvicorn's lines through SGLang's format: `[2025-09-03 18:33:31] INFO:     ...`
    (decode_batches__sglang10053.log)."""
    print(f"[{_stamp()}] INFO:     {message}", file=sys.stdout, flush=True)


def server_args_line(server_args):
    """`server_args=ServerArgs(model_path=..., ...)` (multinode_node1__sglang7478.log): SGLang's own repr."""
    main(f"server_args={server_args!r}")


def world_line(rank, size, init_method):
    """multinode_node1__sglang7478.log: `world_size=16 rank=6 local_rank=6 distributed_init_method=tcp://... backend=nccl`."""
    tp(rank, f"world_size={size} rank={rank} local_rank=0 distributed_init_method={init_method} backend=nccl")


def init_dist_begin(rank):
    """multinode_node1__sglang7478.log."""
    tp(rank, "Init torch distributed begin.")


def nccl_version(rank, version):
    """multinode_node1__sglang7478.log: `Found nccl from library libnccl.so.2`, `sglang is using nccl==2.26.2`."""
    tp(rank, "Found nccl from library libnccl.so.2")
    tp(rank, f"sglang is using nccl=={version}")


def spans_nodes(rank):
    """The last line both ranks print before the MessageQueue hang (spark_tp2_hang__miaai3.log)."""
    tp(rank, "CustomAllreduce is disabled because this process group spans across nodes.")


def init_dist_end(rank, mem_gb):
    """init_dist_load__sglang11716.log: `Init torch distributed ends. mem usage=1.96 GB`."""
    tp(rank, f"Init torch distributed ends. mem usage={mem_gb:.2f} GB")


def load_begin(rank, avail_gb):
    """init_dist_load__sglang11716.log: `Load weight begin. avail mem=137.34 GB`."""
    tp(rank, f"Load weight begin. avail mem={avail_gb:.2f} GB")


def weights_format(rank):
    """init_dist_load__sglang11716.log: `Using model weights format ['*.safetensors']`."""
    tp(rank, "Using model weights format ['*.safetensors']")


def shards_bar(done, total, elapsed):
    """init_dist_load__sglang11716.log: `Loading safetensors checkpoint shards:   0% Completed | 0/30 [00:00<?, ?it/s]`
    (later redraws: tqdm's elapsed<remaining, rate, as the vLLM fixtures show them)."""
    percent = int(100 * done / total) if total else 100
    minutes, seconds = divmod(int(elapsed), 60)
    timing = "00:00<?, ?it/s" if done == 0 else f"{minutes:02d}:{seconds:02d}<00:00, {done / max(elapsed, 1e-6):.2f}it/s"
    sys.stderr.write(f"\rLoading safetensors checkpoint shards: {percent:3d}% Completed | {done}/{total} [{timing}]")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def load_end(rank, seconds, arch, avail_gb, usage_gb):
    """load_kv_pool__ktransformers1870.log: `Load weight end. elapsed=653.47 s, type=..., dtype=torch.bfloat16,
    avail mem=19.08 GB, mem usage=3.76 GB.`"""
    tp(rank, f"Load weight end. elapsed={seconds:.2f} s, type={arch}, dtype=torch.bfloat16, "
             f"avail mem={avail_gb:.2f} GB, mem usage={usage_gb:.2f} GB.")


def kv_pool(rank, tokens, k_gb, avail_gb):
    """load_kv_pool__ktransformers1870.log: `KV Cache is allocated. #tokens: ..., K size: ..., V size: ...`,
    `Memory pool end. avail mem=4.02 GB`."""
    tp(rank, f"KV Cache is allocated. #tokens: {tokens}, K size: {k_gb:.2f} GB, V size: {k_gb:.2f} GB")
    tp(rank, f"Memory pool end. avail mem={avail_gb:.2f} GB")


def limits(rank, tokens, running, context_len, avail_gb):
    """load_kv_pool__ktransformers1870.log: `max_total_num_tokens=..., chunked_prefill_size=..., ...`."""
    tp(rank, f"max_total_num_tokens={tokens}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
             f"max_running_requests={running}, context_len={context_len}, available_gpu_mem={avail_gb:.2f} GB")


def fired_up():
    """HAND-MADE: no public log in the search corpus shows this line; SGLang prints it once its warm-up
    request answered (sglang/srt/entrypoints/http_server.py, `_wait_and_warmup`)."""
    main("The server is fired up and ready to roll!")


def prefill(rank, new_tokens, running, queued, usage):
    """decode_batches__sglang10053.log: `Prefill batch. #new-seq: 1, #new-token: 103, #cached-token: 1, ...`."""
    tp(rank, f"Prefill batch. #new-seq: 1, #new-token: {new_tokens}, #cached-token: 0, token usage: {usage:.2f}, "
             f"#running-req: {running}, #queue-req: {queued}, ")


def decode(rank, running, tokens, usage, throughput, queued, accept=None):
    """decode_batches__sglang10053.log: `Decode batch. #running-req: 1, #token: 137, token usage: 0.00, cuda graph:
    True, gen throughput (token/s): 1.06, #queue-req: 0, `. With a draft SGLang inserts `accept len: X, accept rate:
    Y, ` before the throughput (HAND-MADE order: sglang/srt/managers/scheduler_components/metrics_reporter.py)."""
    spec = f"accept len: {accept[0]:.2f}, accept rate: {accept[1]:.2f}, " if accept else ""
    tp(rank, f"Decode batch. #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, {spec}"
             f"cuda graph: True, gen throughput (token/s): {throughput:.2f}, #queue-req: {queued}, ")
