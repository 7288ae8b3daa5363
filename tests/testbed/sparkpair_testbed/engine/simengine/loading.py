"""Every rank's start after the node checks: load the weights for real, then warm up.

Loading reads the model's safetensors files chunk by chunk (real reads: a file's offset grows
as TensorRT-LLM's page faults on its mmapped shards would) and keeps this rank's shard in memory
(the target split across the ranks, the draft head whole: real, growing resident memory). It
prints what TensorRT-LLM 1.x prints while it loads (``Use N GB for model weights.``, the
``Loading safetensors weights in parallel`` and ``Loading weights`` progress bars, ``Model init
total -- Ns``) and takes ``SIM_LOAD_SECONDS`` in all; on a node whose simulated GPU is in HW
slowdown (the device file the container runtime injects says so) everything it moves to the
GPU goes as much slower as its clock is lower. Warm-up prints, in TensorRT-LLM's order, a first
KV-cache allocation, the autotuner's and the CUDA-graph lines, then the KV cache it serves with
(a real TensorRT-LLM 1.1 start on a Spark: tests/fixtures/watch/ in the sparkpair repository).
"""

import json
import os
import sys
import time

from . import hub_layout

GPU_DEVICE = "/run/sparkpair-testbed/gpu0.json"  # the simulated GB10, injected by the container hook
MAX_SM_CLOCK_MHZ = 3003
CHUNKS = 400                  # "modules" the weights are loaded in (the progress bar's total)
MIN_CHUNK = 16 * 1024
BAR_EVERY_SECONDS = 0.5       # tqdm's redraw pace in a log file
CUDA_GRAPH_BATCH_SIZES = (8, 4, 2, 1)


def slowdown_factor(device=GPU_DEVICE):
    """How much slower the GPU works than at full clock: 1.0 unless the device reports HW slowdown."""
    try:
        with open(device) as handle:
            gpu = json.load(handle)
    except (OSError, ValueError):
        return 1.0
    clock = gpu.get("hw_slowdown_mhz")
    return MAX_SM_CLOCK_MHZ / float(clock) if clock else 1.0


def model_files(name, revision, env):
    """The safetensors files of a hub id (its cached snapshot) or a local directory, sorted."""
    if hub_layout.looks_like_local_path(name):
        folder = os.path.expanduser(name)
    else:
        cache = hub_layout.hub_cache_dir(env)
        commit = hub_layout.resolve_commit(cache, name, revision or "main")
        folder = str(hub_layout.snapshot_dir(cache, name, commit)) if commit else ""
    if not folder or not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, entry) for entry in os.listdir(folder) if entry.endswith(".safetensors"))


def _clock(seconds):
    minutes, secs = divmod(int(max(0, seconds)), 60)
    return f"{minutes:02d}:{secs:02d}"


def progress_bar(description, done, total, elapsed):
    """One redraw of a tqdm bar as it appears in a log: ``desc:  45%|████▌     | 361/801 [00:21<00:25, 17.29it/s]``."""
    fraction = done / total if total else 1.0
    eighths = int(fraction * 80)
    bar = "█" * (eighths // 8) + (" ▏▎▍▌▋▊▉"[eighths % 8] if eighths % 8 else "")
    rate = done / elapsed if elapsed > 0 else 0.0
    remaining = (total - done) / rate if rate else 0.0
    return (f"{description}: {fraction * 100:3.0f}%|{bar:<10}| {done}/{total} "
            f"[{_clock(elapsed)}<{_clock(remaining)}, {rate:.2f}it/s]")


class _Bar:
    """A progress bar redrawn in place with carriage returns, on stderr, at most every half second."""

    def __init__(self, description, total):
        self.description, self.total = description, total
        self.start = time.monotonic()
        self.drawn = 0.0

    def update(self, done):
        now = time.monotonic()
        if done < self.total and now - self.drawn < BAR_EVERY_SECONDS:
            return
        self.drawn = now
        end = "\n" if done >= self.total else ""
        sys.stderr.write("\r" + progress_bar(self.description, done, self.total, now - self.start) + end)
        sys.stderr.flush()


def _chunks(files, size):
    """(path, offset, length) of every chunk of every file, in order."""
    for path in files:
        length = os.path.getsize(path)
        for offset in range(0, length, size):
            yield path, offset, min(size, length - offset)


def load_weights(config, rank, world_size, timing, env, log):
    """Read the weights and keep this rank's shard; returns the shard (keep it: it is the rank's memory)."""
    started = time.monotonic()
    target = model_files(config.model, config.revision, env)
    draft = model_files(config.speculative.draft_model, None, env) \
        if config.speculative and config.speculative.draft_model else []
    files = target + draft
    total = sum(os.path.getsize(path) for path in files)
    log.info(f"Use {total / 1e9:.2f} GB for model weights.")
    parallel = _Bar("Loading safetensors weights in parallel", len(files))
    parallel.update(len(files))
    size = max(MIN_CHUNK, -(-total // CHUNKS)) if total else MIN_CHUNK
    pieces = list(_chunks(files, size))
    seconds = max(0.0, timing.load_seconds) * slowdown_factor()
    bar = _Bar("Loading weights", len(pieces))
    shard, handle, current = [], None, None
    try:
        for index, (path, offset, length) in enumerate(pieces, 1):
            if path != current:
                if handle is not None:
                    os.close(handle)
                handle, current = os.open(path, os.O_RDONLY), path
            data = os.read(handle, length)  # sequential: the file's offset shows how far the read got
            if path in draft or (offset // size) % world_size == rank:
                shard.append(data)
            _pace(started, seconds * index / len(pieces))
            bar.update(index)
    finally:
        if handle is not None:
            os.close(handle)
    if not pieces:
        bar.update(0)
        _pace(started, seconds)
    print(f"Model init total -- {time.monotonic() - started:.2f}s", file=sys.stderr, flush=True)
    return shard


def _pace(started, due):
    """Sleep until `due` seconds after `started` (the device's pace)."""
    delay = started + due - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def warm_up(config, max_seq_len, log):
    """What TensorRT-LLM 1.x logs between the weights and the executor, in its order: a first KV cache for
    the estimation, the autotuner, the CUDA graphs, then the KV cache it serves with."""
    def kv_cache(tokens):
        print(f"[TensorRT-LLM][INFO] Number of tokens per block: {config.kv_tokens_per_block}.", file=sys.stderr)
        print(f"[TensorRT-LLM][INFO] [MemUsageChange] Allocated {tokens * 73728 / 2**30:.2f} GiB for max tokens in "
              f"paged KV cache ({tokens}).", file=sys.stderr, flush=True)

    kv_cache(config.max_num_tokens + config.kv_tokens_per_block)
    log.info(f"max_seq_len={max_seq_len}, max_num_requests={config.max_batch_size}, "
             f"max_num_tokens={config.max_num_tokens}, max_batch_size={config.max_batch_size}")
    log.info("[Autotuner] Autotuning process starts ...")
    log.info("[Autotuner] Cache size after warmup is 28")
    log.info("[Autotuner] Autotuning process ends")
    draft_len = config.speculative.max_draft_len if config.speculative else 0
    log.info(f"Creating CUDA graph instances for {len(CUDA_GRAPH_BATCH_SIZES)} batch sizes.")
    for batch in CUDA_GRAPH_BATCH_SIZES:
        log.info(f"Run generation only CUDA graph warmup for batch size={batch}, draft_len={draft_len}")
    kv_cache(config.kv_max_tokens or 65536)
