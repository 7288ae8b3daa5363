"""Rank 0's HTTP front end: TensorRT-LLM's OpenAI server routes on a stdlib threading server.

Uses the socket trtllm-serve bound before loading (``listen()`` is called only when the
model is "loaded", as in 1.3.x). Streaming responses use chunked transfer encoding and are
flushed once per engine iteration; TCP_NODELAY keeps inter-token latency honest. Access
lines are printed to stdout in uvicorn's format.
"""

import json
import queue
import socket
import sys
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import TRTLLM_VERSION, openai_api, textgen
from .engine import EngineDead

EVENT_POLL_SECONDS = 1.0
HEALTH_GENERATE_TIMEOUT_SECONDS = 30.0


class ServingApp:
    """State the handlers share: the engine, stats and what the server reports about itself."""

    def __init__(self, config, engine, stats, max_seq_len):
        self.config, self.engine, self.stats = config, engine, stats
        self.served_model = config.served_model_name
        self.max_seq_len = max_seq_len
        self.created = int(time.time())

    def target_tokens(self, parsed):
        """How many tokens to generate and whether the end is a natural stop."""
        room = self.max_seq_len - parsed.prompt_tokens if self.max_seq_len else None
        if parsed.max_tokens is not None:
            if room is not None and parsed.max_tokens > room:
                raise openai_api.ApiError(400, (
                    f"The requested max_tokens ({parsed.max_tokens}) plus the prompt length "
                    f"({parsed.prompt_tokens}) exceeds max_seq_len ({self.max_seq_len})."))
            return parsed.max_tokens, False
        natural = textgen.natural_length(parsed.seed_text, self.engine.timing.seed)
        return (min(natural, room) if room else natural), True


class SimHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server on an already bound socket."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, bound_socket, app):
        super().__init__(bound_socket.getsockname()[:2], RequestHandler, bind_and_activate=False)
        self.socket.close()
        self.socket = bound_socket
        self.server_name, self.server_port = bound_socket.getsockname()[:2]
        self.app = app


class RequestHandler(BaseHTTPRequestHandler):
    """Routes of TensorRT-LLM's OpenAIServer that the simulator implements."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @property
    def app(self):
        return self.server.app

    def log_message(self, format, *args):  # noqa: A002 - silence the stdlib's own log
        return

    def _access_log(self, status):
        host, port = self.client_address[:2]
        phrase = HTTPStatus(status).phrase
        print(f'INFO:     {host}:{port} - "{self.command} {self.path} HTTP/1.1" {status} {phrase}',
              file=sys.stdout, flush=True)

    def _send_bytes(self, status, body, content_type):
        self.send_response_only(status)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self._access_log(status)

    def _send_json(self, status, obj):
        self._send_bytes(status, json.dumps(obj).encode(), "application/json")

    def _send_error(self, error):
        self._send_json(error.status, error.body())

    # ---- routing ---------------------------------------------------------------------------
    def do_GET(self):
        routes = {"/health": self._health, "/health_generate": self._health_generate,
                  "/version": lambda: self._send_json(200, {"version": TRTLLM_VERSION}),
                  "/v1/models": lambda: self._send_json(200, openai_api.model_list(self.app.served_model,
                                                                                    self.app.created)),
                  "/metrics": lambda: self._send_json(200, self.app.stats.drain_iterations()),
                  "/perf_metrics": lambda: self._send_json(200, self.app.stats.drain_perf_metrics()),
                  "/prometheus/metrics": self._prometheus}
        self._dispatch(routes, {"/v1/completions", "/v1/chat/completions"})

    def do_POST(self):
        routes = {"/v1/completions": lambda: self._generate("completion"),
                  "/v1/chat/completions": lambda: self._generate("chat")}
        self._dispatch(routes, {"/health", "/version", "/v1/models", "/metrics", "/health_generate",
                                "/perf_metrics", "/prometheus/metrics"})

    def _dispatch(self, routes, other_method_paths):
        path = self.path.split("?", 1)[0]
        if path in routes:
            routes[path]()
        elif path in other_method_paths:
            self._read_body()
            self._send_json(405, {"detail": "Method Not Allowed"})
        else:
            self._read_body()
            self._send_json(404, {"detail": "Not Found"})

    def _read_body(self):
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    # ---- simple routes ---------------------------------------------------------------------
    def _health(self):
        status = 503 if self.app.engine.dead_reason else 200
        self._send_bytes(status, b"", "text/plain; charset=utf-8")

    def _prometheus(self):
        text = self.app.stats.prometheus_text(self.app.served_model, self.app.config.speculative)
        self._send_bytes(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")

    def _health_generate(self):
        engine = self.app.engine
        request = engine.new_request(1, 1, False, "hi")
        try:
            engine.submit(request)
            event = request.events.get(timeout=HEALTH_GENERATE_TIMEOUT_SECONDS)
            while event[0] == "tokens":
                event = request.events.get(timeout=HEALTH_GENERATE_TIMEOUT_SECONDS)
            ok = event[0] == "finish"
        except (EngineDead, queue.Empty):
            ok = False
        if ok:
            self._send_bytes(200, b"Generation health check OK", "text/plain; charset=utf-8")
        else:
            self._send_bytes(500, b"Generation health check failed", "text/plain; charset=utf-8")

    # ---- generation ------------------------------------------------------------------------
    def _generate(self, kind):
        try:
            body = json.loads(self._read_body() or b"null")
        except ValueError as error:
            return self._send_error(openai_api.ApiError(400, f"Invalid JSON body: {error}"))
        try:
            parsed = openai_api.parse_request(kind, body, self.app.served_model)
            target, natural_stop = self.app.target_tokens(parsed)
            request = self.app.engine.new_request(parsed.prompt_tokens, target, natural_stop, parsed.seed_text)
            self.app.engine.submit(request)
        except openai_api.ApiError as error:
            return self._send_error(error)
        except EngineDead as error:
            return self._send_error(openai_api.ApiError(500, f"Executor is dead: {error}", "InternalServerError"))
        if parsed.stream:
            return self._stream(parsed, request)
        return self._respond_whole(parsed, request)

    def _next_event(self, request):
        while True:
            try:
                return request.events.get(timeout=EVENT_POLL_SECONDS)
            except queue.Empty:
                if self.app.engine.dead_reason:
                    return ("error", self.app.engine.dead_reason)

    def _respond_whole(self, parsed, request):
        pieces, count = [], 0
        while True:
            event = self._next_event(request)
            if event[0] == "tokens":
                pieces.append(textgen.join_words(event[1], event[2]))
                count += len(event[1])
            elif event[0] == "finish":
                response_id = openai_api.new_id(parsed.kind)
                return self._send_json(200, openai_api.full_response(parsed, response_id, "".join(pieces),
                                                                     event[1], count))
            else:
                return self._send_error(openai_api.ApiError(500, f"Executor is dead: {event[1]}",
                                                            "InternalServerError"))

    def _write_chunk(self, payload):
        data = payload.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _write_event(self, obj):
        self._write_chunk("data: " + json.dumps(obj) + "\n\n")

    def _stream(self, parsed, request):
        self.send_response_only(200)
        for name, value in (("date", self.date_time_string()), ("server", "uvicorn"),
                            ("content-type", "text/event-stream; charset=utf-8"),
                            ("transfer-encoding", "chunked"), ("cache-control", "no-cache")):
            self.send_header(name, value)
        self.end_headers()
        self._access_log(200)
        response_id, created = openai_api.new_id(parsed.kind), int(time.time())
        try:
            self._stream_events(parsed, request, response_id, created)
        except (BrokenPipeError, ConnectionResetError):
            request.cancelled = True
            self.close_connection = True

    def _stream_events(self, parsed, request, response_id, created):
        if parsed.kind == "chat":
            self._write_event(openai_api.stream_chunk(parsed, response_id, created, role=True))
        count = 0
        while True:
            event = self._next_event(request)
            if event[0] == "tokens":
                count += len(event[1])
                text = textgen.join_words(event[1], event[2])
                self._write_event(openai_api.stream_chunk(parsed, response_id, created, text=text))
            elif event[0] == "finish":
                self._write_event(openai_api.stream_chunk(parsed, response_id, created, finish_reason=event[1]))
                if parsed.include_usage:
                    self._write_event(openai_api.usage_chunk(parsed, response_id, created, count))
                self._write_chunk("data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                return
            else:
                error = openai_api.ApiError(500, f"Executor is dead: {event[1]}", "InternalServerError")
                self._write_event(error.body())
                self.close_connection = True  # no terminating chunk: the client sees a broken stream
                return
