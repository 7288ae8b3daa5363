"""Iteration statistics (/metrics), per-request perf metrics (/perf_metrics) and counters
(/prometheus/metrics), shaped like TensorRT-LLM's."""

import threading
import time
from collections import deque

DEFAULT_MAX_ITERATIONS = 1000
SIMULATED_GPU_MEM_BYTES = 96 * 1024 ** 3


class EngineStats:
    """Thread-safe store of everything the metrics endpoints report."""

    def __init__(self, config):
        self._lock = threading.Lock()
        self.iteration_stats_enabled = bool(config.enable_iter_perf_stats)
        self._iterations = deque(maxlen=config.iter_stats_max_iterations or DEFAULT_MAX_ITERATIONS)
        keep = config.perf_metrics_max_requests if config.return_perf_metrics else 0
        self._perf = deque(maxlen=keep) if keep > 0 else None
        self.finished_by_reason = {}
        self.totals = {"prompt_tokens": 0, "generation_tokens": 0, "draft_tokens": 0, "accepted_tokens": 0,
                       "ttft_seconds": 0.0, "e2e_seconds": 0.0, "queue_seconds": 0.0, "requests": 0}
        self.last_acceptance_length = 0.0
        self.last_draft_overhead = 0.0

    def record_iteration(self, record):
        """Keep one iteration record (when ``enable_iter_perf_stats``) and update the spec gauges."""
        spec = record.get("specDecodingStats")
        with self._lock:
            if spec and spec["numRequestsWithDraftTokens"]:
                self.last_acceptance_length = spec["acceptanceLength"]
                self.last_draft_overhead = spec["draftOverhead"]
            if self.iteration_stats_enabled:
                self._iterations.append(record)

    def count_draft_tokens(self, drafted, accepted):
        """Cumulative speculative counters (always kept)."""
        with self._lock:
            self.totals["draft_tokens"] += drafted
            self.totals["accepted_tokens"] += accepted

    def drain_iterations(self):
        """GET /metrics: the stored iteration records, removed on read."""
        with self._lock:
            drained = list(self._iterations)
            self._iterations.clear()
        return drained

    def request_finished(self, request, reason):
        """Count a finished request and keep its perf metrics when enabled."""
        with self._lock:
            self.finished_by_reason[reason] = self.finished_by_reason.get(reason, 0) + 1
            self.totals["requests"] += 1
            self.totals["prompt_tokens"] += request.prompt_tokens
            self.totals["generation_tokens"] += request.emitted
            self.totals["ttft_seconds"] += request.first_token_at - request.arrival
            self.totals["e2e_seconds"] += request.finished_at - request.arrival
            self.totals["queue_seconds"] += request.admitted_at - request.arrival
            if self._perf is not None:
                self._perf.append(perf_metrics_record(request))

    def drain_perf_metrics(self):
        """GET /perf_metrics: per-request records, removed on read."""
        with self._lock:
            if self._perf is None:
                return []
            drained = list(self._perf)
            self._perf.clear()
        return drained

    def prometheus_text(self, model_name, speculative):
        """GET /prometheus/metrics in the Prometheus text format."""
        with self._lock:
            totals, finished = dict(self.totals), dict(self.finished_by_reason)
            acceptance, overhead = self.last_acceptance_length, self.last_draft_overhead
        labels = f'model_name="{_escape(model_name)}",engine_type="trtllm"'
        lines = ["# HELP trtllm_request_success_total Count of successfully processed requests.",
                 "# TYPE trtllm_request_success_total counter"]
        for reason in sorted(finished) or ["length"]:
            lines.append(f'trtllm_request_success_total{{{labels},finished_reason="{reason}"}} '
                         f"{float(finished.get(reason, 0))}")
        lines += _counter("trtllm_prompt_tokens_total", "Prompt tokens processed.", labels, totals["prompt_tokens"])
        lines += _counter("trtllm_generation_tokens_total", "Tokens generated.", labels, totals["generation_tokens"])
        lines += _summary("trtllm_time_to_first_token_seconds", labels, totals["ttft_seconds"], totals["requests"])
        lines += _summary("trtllm_e2e_request_latency_seconds", labels, totals["e2e_seconds"], totals["requests"])
        lines += _summary("trtllm_request_queue_time_seconds", labels, totals["queue_seconds"], totals["requests"])
        if speculative:
            lines += _counter("trtllm_spec_decode_num_draft_tokens_total", "Draft tokens proposed.", labels,
                              totals["draft_tokens"])
            lines += _counter("trtllm_spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", labels,
                              totals["accepted_tokens"])
            lines += _gauge("trtllm_spec_decode_acceptance_length", labels, acceptance)
            lines += _gauge("trtllm_spec_decode_draft_overhead", labels, overhead)
            info = (f'{labels},spec_enabled="true",spec_method="{speculative.decoding_type}",'
                    f'spec_num_tokens="{speculative.max_draft_len}",'
                    f'spec_draft_model="{_escape(speculative.draft_model or "")}"')
            lines += _gauge("trtllm_speculative_config_info", info, 1)
        return "\n".join(lines) + "\n"


def _escape(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _counter(name, text, labels, value):
    return [f"# HELP {name} {text}", f"# TYPE {name} counter", f"{name}{{{labels}}} {float(value)}"]


def _gauge(name, labels, value):
    return [f"# TYPE {name} gauge", f"{name}{{{labels}}} {float(value)}"]


def _summary(name, labels, total, count):
    return [f"# TYPE {name} summary", f"{name}_sum{{{labels}}} {float(total)}",
            f"{name}_count{{{labels}}} {float(count)}"]


def perf_metrics_record(request):
    """One /perf_metrics item (times in seconds on the server's monotonic clock)."""
    record = {
        "request_id": request.request_id,
        "perf_metrics": {
            "timing_metrics": {
                "arrival_time": request.arrival, "first_scheduled_time": request.admitted_at,
                "first_token_time": request.first_token_at, "last_token_time": request.finished_at,
                "server_arrival_time": request.arrival, "server_first_token_time": request.first_token_at},
            "kv_cache_metrics": {"num_total_allocated_blocks": 0, "num_new_allocated_blocks": 0,
                                 "num_reused_blocks": 0, "num_missed_blocks": 0},
        },
    }
    if request.draft_total:
        record["perf_metrics"]["speculative_decoding"] = {
            "acceptance_rate": request.accepted_total / request.draft_total,
            "total_accepted_draft_tokens": request.accepted_total,
            "total_draft_tokens": request.draft_total}
    return record


def kv_cache_stats(config, active_requests, allocated_total, newly_allocated):
    """A kvCacheStats block computed from the tokens the active requests hold."""
    per_block = max(1, config.kv_tokens_per_block)
    capacity_tokens = config.kv_max_tokens or 65536
    used = sum(-(-(r.prompt_tokens + r.emitted) // per_block) for r in active_requests)
    maximum = max(capacity_tokens // per_block, used)
    return {"maxNumBlocks": maximum, "freeNumBlocks": maximum - used, "usedNumBlocks": used,
            "tokensPerBlock": per_block, "allocTotalBlocks": allocated_total, "allocNewBlocks": newly_allocated,
            "reusedBlocks": 0, "missedBlocks": newly_allocated, "cacheHitRate": 0.0}


def timestamp_text():
    """The iteration timestamp format TensorRT-LLM uses."""
    return time.strftime("%m-%d-%Y %H:%M:%S")
