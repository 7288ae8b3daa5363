"""Node rank 0's HTTP server of the stand-in SGLang: SGLang's routes on simengine's server and executor.

Routes (sglang/srt/entrypoints/http_server.py of 0.5.23): `/health`, `/health_generate`,
`/get_model_info` and `/model_info`, `/get_server_info` and `/server_info` (SGLang's own ServerArgs
with the version), `/v1/models` (owned_by sglang), `/v1/completions` and `/v1/chat/completions`
(simengine's OpenAI shapes and streaming; like SGLang, fields it does not know and the `model` name
are not held against a request), `/generate` (SGLang's native API, streamed as cumulative `data:`
events), `/metrics` only with `--enable-metrics`, in prometheus_client's text format with SGLang's
names and labels (sglang/srt/observability/metrics_collector.py): the scheduler's gauges (running,
queued, token usage, throughput and, with a draft, `sglang:spec_accept_length`,
`sglang:spec_accept_rate`, `sglang:spec_num_steps`, `sglang:spec_num_draft_tokens`), its counter
`sglang:spec_verify_calls_total`, the tokenizer's counters and latency histograms. Acceptance
figures are cumulative since the start (SGLang's gauges hold the last logging interval's).
Access lines: uvicorn's, through SGLang's log format.
"""

import json
import time

from . import openai_api, sglang_log, textgen
from .engine import EngineDead
from .http_server import RequestHandler, ServingApp, SimHTTPServer
from .stats import EngineStats

SGLANG_VERSION = "0.5.23"
DECODE_LOG_INTERVAL = 40
WARMUP_TIMEOUT_SECONDS = 60.0


class SglangStats(EngineStats):
    """simengine's counters plus what SGLang's /metrics and decode log lines need."""

    def __init__(self, config, target):
        super().__init__(config)
        self.sim_config, self.target = config, target
        self.verify_calls = 0
        self.iterations = 0
        self.engine = None

    def record_iteration(self, record):
        """Count verify calls; every DECODE_LOG_INTERVAL iterations print SGLang's `Decode batch` line."""
        super().record_iteration(record)
        spec = record.get("specDecodingStats")
        with self._lock:
            self.verify_calls += spec["numRequestsWithDraftTokens"] if spec else 0
            self.iterations += 1
            due = self.iterations % DECODE_LOG_INTERVAL == 0
        if due:
            active = record["numActiveRequests"]
            rate = (record["inflightBatchingStats"]["avgNumDecodedTokensPerIter"] * active * 1000.0
                    / max(record["iterLatencyMS"], 1e-6))
            sglang_log.decode(0, active, 0, 0.0, rate, record["numQueuedRequests"],
                              self.acceptance() if self.sim_config.speculative else None)

    def acceptance(self):
        """(mean accept length, accept rate) since the start."""
        totals = self.totals
        calls = self.verify_calls
        length = (totals["accepted_tokens"] + calls) / calls if calls else 0.0
        rate = totals["accepted_tokens"] / totals["draft_tokens"] if totals["draft_tokens"] else 0.0
        return length, rate

    def sglang_text(self, model_name):
        """GET /metrics."""
        engine = self.engine
        with self._lock:
            totals, calls = dict(self.totals), self.verify_calls
        labels = f'model_name="{_escape(model_name)}",engine_type="unified"'
        scheduler = f'{labels},tp_rank="0",pp_rank="0",moe_ep_rank="0"'
        running = len(engine.prefilling) + len(engine.decoding) if engine else 0
        lines = []
        lines += _metric("sglang:num_running_reqs", "gauge", "The number of running requests.", scheduler, running)
        lines += _metric("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", scheduler,
                         len(engine.waiting) if engine else 0)
        lines += _metric("sglang:token_usage", "gauge", "The token usage.", scheduler, 0.0)
        lines += _metric("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", scheduler, 0.0)
        lines += _metric("sglang:max_total_num_tokens", "gauge", "Maximum total number of tokens in the KV cache pool.",
                         scheduler, self.sim_config.kv_max_tokens)
        spec = self.sim_config.speculative
        if spec:
            length, rate = self.acceptance()
            lines += _metric("sglang:spec_accept_length", "gauge", "Mean acceptance length of speculative decoding "
                             "(accepted drafts + bonus token per forward).", scheduler, length)
            lines += _metric("sglang:spec_accept_rate", "gauge", "Speculative acceptance rate (`accepted drafts / "
                             "proposed drafts` in batch).", scheduler, rate)
            lines += _metric("sglang:spec_num_steps", "gauge", "Currently active speculative_num_steps.", scheduler,
                             spec.max_draft_len)
            lines += _metric("sglang:spec_num_draft_tokens", "gauge", "Currently active speculative_num_draft_tokens "
                             "(decouples from steps under topk>1).", scheduler, spec.num_draft_tokens)
            lines += _metric("sglang:spec_verify_calls", "counter", "Number of speculative decoding verification "
                             "calls.", scheduler, calls)
        streaming = f'{labels},is_streaming="false"'
        lines += _metric("sglang:prompt_tokens", "counter", "Number of prefill tokens processed.", streaming,
                         totals["prompt_tokens"])
        lines += _metric("sglang:generation_tokens", "counter", "Number of generation tokens processed.", streaming,
                         totals["generation_tokens"])
        lines += _metric("sglang:num_requests", "counter", "Number of requests processed.", streaming,
                         totals["requests"])
        lines += _histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                            streaming, totals["ttft_seconds"], totals["requests"])
        lines += _histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                            streaming, totals["e2e_seconds"], totals["requests"])
        return "\n".join(lines) + "\n"


def _escape(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _metric(name, kind, text, labels, value):
    """prometheus_client's lines: a counter's samples carry `_total` after its name."""
    sample = f"{name}_total" if kind == "counter" else name
    return [f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{sample}{{{labels}}} {float(value)}"]


def _histogram(name, text, labels, total, count):
    return [f"# HELP {name} {text}", f"# TYPE {name} histogram", f'{name}_bucket{{{labels},le="+Inf"}} {float(count)}',
            f"{name}_count{{{labels}}} {float(count)}", f"{name}_sum{{{labels}}} {float(total)}"]


class SglangApp(ServingApp):
    """What the routes share: the engine, stats, SGLang's ServerArgs and the target's config."""

    def __init__(self, config, server_args, engine, stats, target):
        super().__init__(config, engine, stats, config.context_length)
        self.server_args, self.target = server_args, target
        self.draft_steps = config.speculative.max_draft_len if config.speculative else 0

    def model_info(self):
        """GET /get_model_info."""
        return {"model_path": self.config.model, "served_model_name": self.served_model,
                "tokenizer_path": self.server_args.tokenizer_path or self.config.model, "is_generation": True,
                "preferred_sampling_params": None, "weight_version": "default", "load_format": "auto",
                "reasoning_parser": None, "tool_call_parser": None, "disaggregation_mode": "null",
                "has_image_understanding": False, "has_audio_understanding": False,
                "model_type": self.target.get("model_type"), "architectures": self.target.get("architectures")}

    def server_info(self):
        """GET /get_server_info: SGLang's own ServerArgs as given, and the version."""
        import msgspec  # present where SGLang is: its ServerArgs is a msgspec Struct

        fields = {key: value for key, value in msgspec.structs.asdict(self.server_args).items()
                  if isinstance(value, (str, int, float, bool, type(None), list, dict))}
        return {**fields, "version": SGLANG_VERSION, "internal_states": [{"avg_spec_accept_length":
                                                                          self.stats.acceptance()[0]}]}

    def warm_up(self):
        """SGLang's warm-up request once the server listens, then `The server is fired up and ready to roll!`."""
        request = self.engine.new_request(5, 8, False, "The capital city of France is")
        try:
            self.engine.submit(request)
            deadline = time.monotonic() + WARMUP_TIMEOUT_SECONDS
            while (event := request.events.get(timeout=max(0.1, deadline - time.monotonic())))[0] == "tokens":
                pass
        except Exception:  # noqa: BLE001 (the executor died or the warm-up timed out: never ready)
            return
        if event[0] == "finish":
            sglang_log.uvicorn(f'127.0.0.1:{self.config.port} - "POST /generate HTTP/1.1" 200 OK')
            sglang_log.fired_up()


class SglangHandler(RequestHandler):
    """SGLang's routes; simengine's handler does the generation, streaming and errors."""

    def _access_log(self, status):
        host, port = self.client_address[:2]
        phrase = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                  500: "Internal Server Error", 503: "Service Unavailable"}.get(status, "")
        sglang_log.uvicorn(f'{host}:{port} - "{self.command} {self.path} HTTP/1.1" {status} {phrase}')

    def do_GET(self):
        app = self.app
        routes = {"/health": self._health, "/health_generate": self._health_generate,
                  "/get_model_info": lambda: self._send_json(200, app.model_info()),
                  "/model_info": lambda: self._send_json(200, app.model_info()),
                  "/get_server_info": lambda: self._send_json(200, app.server_info()),
                  "/server_info": lambda: self._send_json(200, app.server_info()),
                  "/v1/models": self._models}
        if app.config.enable_metrics:
            routes["/metrics"] = lambda: self._send_bytes(200, app.stats.sglang_text(app.served_model).encode(),
                                                          "text/plain; version=0.0.4; charset=utf-8")
        self._dispatch(routes, {"/v1/completions", "/v1/chat/completions", "/generate"})

    def do_POST(self):
        routes = {"/v1/completions": lambda: self._openai("completion"),
                  "/v1/chat/completions": lambda: self._openai("chat"), "/generate": self._native}
        self._dispatch(routes, {"/health", "/v1/models", "/get_model_info", "/get_server_info", "/metrics"})

    def _models(self):
        card = {"id": self.app.served_model, "object": "model", "created": self.app.created, "owned_by": "sglang",
                "root": self.app.config.model, "max_model_len": self.app.max_seq_len}
        self._send_json(200, {"object": "list", "data": [card]})

    def _openai(self, kind):
        """SGLang's OpenAI routes take unknown fields and any model name: drop those, then simengine's route."""
        try:
            body = json.loads(self._read_body() or b"null")
        except ValueError as error:
            return self._send_error(openai_api.ApiError(400, f"Invalid JSON body: {error}"))
        if isinstance(body, dict):
            allowed = openai_api.COMPLETION_FIELDS if kind == "completion" else openai_api.CHAT_FIELDS
            body = {key: value for key, value in body.items() if key in allowed}
            body["model"] = self.app.served_model
        self._read_body = lambda: json.dumps(body).encode()
        return self._generate(kind)

    def _native(self):
        """POST /generate {"text": ..., "sampling_params": {"max_new_tokens": N}, "stream": bool}."""
        try:
            body = json.loads(self._read_body() or b"null")
            text = body["text"]
            params = body.get("sampling_params") or {}
            max_new = params.get("max_new_tokens")
            if not isinstance(text, str) or (max_new is not None and (not isinstance(max_new, int) or max_new < 1)):
                raise ValueError("text must be a string and max_new_tokens a positive integer")
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            return self._send_json(400, {"error": {"message": f"Invalid request: {error}"}})
        prompt = textgen.count_prompt_tokens(text)
        target, natural = (max_new, False) if max_new else (textgen.natural_length(text, self.app.engine.timing.seed),
                                                            True)
        request = self.app.engine.new_request(prompt, target, natural, text)
        try:
            self.app.engine.submit(request)
        except EngineDead as error:
            return self._send_json(500, {"error": {"message": str(error)}})
        rid = f"{request.request_id:032x}"
        if body.get("stream"):
            return self._native_stream(request, rid, prompt)
        pieces = []
        while (event := self._next_event(request))[0] == "tokens":
            pieces.append(textgen.join_words(event[1], event[2]))
        if event[0] != "finish":
            return self._send_json(500, {"error": {"message": f"Scheduler died: {event[1]}"}})
        self._send_json(200, {"text": "".join(pieces), "meta_info": _meta(rid, request, prompt, event[1], self.app.draft_steps)})

    def _native_stream(self, request, rid, prompt):
        self.send_response_only(200)
        for name, value in (("content-type", "text/event-stream; charset=utf-8"), ("transfer-encoding", "chunked")):
            self.send_header(name, value)
        self.end_headers()
        self._access_log(200)
        text = ""
        while (event := self._next_event(request))[0] == "tokens":
            text += textgen.join_words(event[1], event[2])
            self._write_event({"text": text, "meta_info": _meta(rid, request, prompt, None, self.app.draft_steps)})
        if event[0] == "finish":
            self._write_event({"text": text, "meta_info": _meta(rid, request, prompt, event[1], self.app.draft_steps)})
            self._write_chunk("data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.close_connection = True


def _meta(rid, request, prompt, reason, steps):
    """SGLang's meta_info of a /generate answer."""
    finish = None if reason is None else ({"type": "length", "length": request.emitted} if reason == "length"
                                          else {"type": "stop", "matched": None})
    meta = {"id": rid, "finish_reason": finish, "prompt_tokens": prompt, "completion_tokens": request.emitted,
            "cached_tokens": 0}
    if steps:
        verify = request.draft_total // steps
        meta.update(spec_verify_ct=verify, spec_accept_length=(request.accepted_total + verify) / verify if verify
                    else 0.0)
    return meta


def start_http(config, app):
    """Bind --host:--port, print uvicorn's lines, serve in a thread; a taken port ends the start as uvicorn does."""
    import os
    import socket
    import threading

    sglang_log.uvicorn(f"Started server process [{os.getpid()}]")
    sglang_log.uvicorn("Waiting for application startup.")
    sglang_log.uvicorn("Application startup complete.")
    try:
        sock = socket.create_server((config.host, config.port), backlog=128)
    except OSError as error:  # uvicorn's own order (tests/fixtures/logs/uvicorn_port_in_use__openui226.log)
        sglang_log.main(f"ERROR:    [Errno {error.errno}] error while attempting to bind on address "
                        f"('{config.host}', {config.port}): {error.strerror.lower()}")
        sglang_log.uvicorn("Waiting for application shutdown.")
        sglang_log.uvicorn("Application shutdown complete.")
        raise SystemExit(1) from error
    server = SimHTTPServer(sock, app)
    server.RequestHandlerClass = SglangHandler
    sglang_log.uvicorn(f"Uvicorn running on http://{config.host}:{config.port} (Press CTRL+C to quit)")
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
