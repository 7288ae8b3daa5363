"""STAND-IN for the vLLM backend's src/utils/metrics.py (triton-inference-server/vllm_backend), part of
the stand-in model.py beside it (not NVIDIA's file; see ../NOTES.md).

With `REPORT_CUSTOM_METRICS` "true" in config.pbtxt and `disable_log_stats` not true in model.json, the
real backend hands vLLM a stat logger that mirrors these families onto Triton's metrics port, labelled
{model, version}: vllm:prompt_tokens_total and vllm:generation_tokens_total (counters),
vllm:time_to_first_token_seconds, vllm:time_per_output_token_seconds, vllm:e2e_request_latency_seconds,
vllm:request_prompt_tokens, vllm:request_generation_tokens, vllm:request_params_n (histograms). The real
backend reports no speculative-decoding counters: neither does this one (vLLM's own log lines
"SpecDecoding metrics: ..." still reach Triton's log).
"""
from __future__ import annotations

import queue
import threading

import triton_python_backend_utils as pb_utils
from vllm.v1.metrics.buckets import build_1_2_5_buckets
from vllm.v1.metrics.loggers import StatLoggerBase

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
TPOT_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]
E2E_BUCKETS = [1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0]
COUNTERS = {"prompt_tokens": ("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
            "generation_tokens": ("vllm:generation_tokens_total", "Number of generation tokens processed.")}
HISTOGRAMS = {"ttft": ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
              "tpot": ("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds."),
              "e2e": ("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds."),
              "request_prompt": ("vllm:request_prompt_tokens", "Number of prefill tokens processed."),
              "request_generation": ("vllm:request_generation_tokens", "Number of generation tokens processed."),
              "n": ("vllm:request_params_n", "Histogram of the n request parameter.")}


class TritonStatLoggerFactory:
    """What vLLM calls once per engine (vllm_config, engine_index) for a stat logger; finalize() stops them."""

    def __init__(self, labels: dict, log):
        self.labels = labels
        self.log = log
        self.loggers: list[TritonStatLogger] = []

    def __call__(self, vllm_config, engine_index: int = 0):
        made = TritonStatLogger(self.labels, self.log, vllm_config, engine_index)
        self.loggers.append(made)
        return made

    def finalize(self) -> None:
        for made in self.loggers:
            made.finalize()


class TritonStatLogger(StatLoggerBase):
    """vLLM's per-iteration stats into Triton custom metrics, through a queue drained by its own thread."""

    def __init__(self, labels: dict, log, vllm_config, engine_index: int = 0):
        self.log = log
        max_len = vllm_config.model_config.max_model_len
        buckets = {"ttft": TTFT_BUCKETS, "tpot": TPOT_BUCKETS, "e2e": E2E_BUCKETS, "n": [1, 2, 5, 10, 20],
                   "request_prompt": build_1_2_5_buckets(max_len), "request_generation": build_1_2_5_buckets(max_len)}
        self.families = {}
        self.counters = {}
        for key, (name, description) in COUNTERS.items():
            self.families[key] = pb_utils.MetricFamily(name=name, description=description,
                                                       kind=pb_utils.MetricFamily.COUNTER)
            self.counters[key] = self.families[key].Metric(labels=labels)
        self.histograms = {}
        for key, (name, description) in HISTOGRAMS.items():
            self.families[key] = pb_utils.MetricFamily(name=name, description=description,
                                                       kind=pb_utils.MetricFamily.HISTOGRAM)
            self.histograms[key] = self.families[key].Metric(labels=labels, buckets=buckets[key])
        self.pending: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._drain)
        self.thread.start()

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0) -> None:
        if iteration_stats is None:
            return
        for key, value in (("prompt_tokens", iteration_stats.num_prompt_tokens),
                           ("generation_tokens", iteration_stats.num_generation_tokens)):
            if value:
                self.pending.put_nowait((self.counters[key], "increment", value))
        finished = iteration_stats.finished_requests
        observed = {"ttft": iteration_stats.time_to_first_tokens_iter,
                    "tpot": iteration_stats.inter_token_latencies_iter,
                    "e2e": [request.e2e_latency for request in finished],
                    "request_prompt": [request.num_prompt_tokens for request in finished],
                    "request_generation": [request.num_generation_tokens for request in finished],
                    "n": iteration_stats.n_params_iter}
        for key, values in observed.items():
            for value in values:
                self.pending.put_nowait((self.histograms[key], "observe", value))

    def log_engine_initialized(self) -> None:
        pass

    def _drain(self) -> None:
        while (item := self.pending.get()) is not None:
            metric, verb, value = item
            if verb == "increment":
                metric.increment(value)
            else:
                metric.observe(value)

    def finalize(self) -> None:
        self.pending.put(None)
        self.thread.join()
