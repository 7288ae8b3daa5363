"""The OpenAI-compatible HTTP server that trtllm-serve and `vllm serve` run: how readiness, status and bench ask
it whether it serves and have it generate (`runtimes.ServingApi`).

Readiness asks `/health`, then `/v1/models` for the model, then one chat completion; status asks the same list
and a one-token completion; bench streams chat completions (server-sent events ended by `[DONE]`, the
usage in the last ones). Every answer is read through `jsonfields.Field`: a wrong shape is one ShapeError
naming the path.
"""

from __future__ import annotations

from sparkpair.jsonfields import Field
from sparkpair.runtimes import Request

READY_PROMPT = "Reply with one word: ready"


class OpenAiServer:
    """The OpenAI-compatible server's paths and answers (see the module docstring)."""

    base = "/v1"
    health = "/health"
    generation_words = "a chat completion"
    stream_end: str | None = "[DONE]"
    token_counts = "total"

    def models(self, model: str) -> str:
        return "/v1/models"

    def served(self, body: bytes, model: str) -> list[str]:
        """The ids of `{"data": [{"id": ...}, ...]}`."""
        return [item.get("id").text() for item in Field.parse(body, self.models(model)).get("data").items()]

    def ready_request(self, model: str) -> Request:
        return Request("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": READY_PROMPT}],
                                                "max_tokens": 8, "temperature": 0})

    def ready_text(self, body: bytes) -> str:
        """The first choice's message content ("" when it is null)."""
        answer = Field.parse(body, "/v1/chat/completions")
        return answer.get("choices").at(0).get("message").get("content").text(default="")

    def token_request(self, model: str) -> Request:
        return Request("/v1/completions", {"model": model, "prompt": "ping", "max_tokens": 1, "temperature": 0})

    def token_text(self, body: bytes) -> str:
        """The first choice's text, which must be a string."""
        return Field.parse(body, "/v1/completions").get("choices").at(0).get("text").text()

    def stream_request(self, model: str, messages: list[dict[str, str]], max_tokens: int) -> Request:
        return Request("/v1/chat/completions", {"model": model, "messages": messages, "max_tokens": max_tokens,
                                                "temperature": 0.0, "stream": True,
                                                "stream_options": {"include_usage": True}})

    def stream_text(self, event: Field) -> str:
        """The delta's content and reasoning (both are output tokens); "" for an event without choices or delta."""
        choices = event.get("choices")
        if choices.null or not choices.items():
            return ""
        delta = choices.at(0).get("delta")
        if delta.null:
            return ""
        return delta.get("content").text(default="") + delta.get("reasoning_content").text(default="")

    def stream_tokens(self, event: Field) -> int | None:
        """usage.completion_tokens when the event carries a usage (0 counts as not said)."""
        usage = event.get("usage")
        return None if usage.null else usage.get("completion_tokens").count(default=0) or None


OPENAI = OpenAiServer()
