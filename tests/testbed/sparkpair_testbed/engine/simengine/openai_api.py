"""OpenAI-compatible request validation and response objects, strict like TensorRT-LLM's.

Request bodies are pydantic models with extra fields forbidden in TensorRT-LLM, so an
unknown field is a 400. Responses follow OpenAI's shapes (``text_completion``,
``chat.completion``, ``chat.completion.chunk``) so the official client accepts them.
"""

import time
import uuid
from dataclasses import dataclass

from . import textgen
from .pydantic_errors import ConfigValidationError, FieldError, coerce, extra_forbidden

SAMPLING_FIELDS = {
    "model", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n", "presence_penalty", "seed",
    "stop", "stream", "stream_options", "temperature", "top_p", "user", "best_of", "use_beam_search", "top_k",
    "top_p_min", "min_p", "repetition_penalty", "length_penalty", "early_stopping", "stop_token_ids",
    "include_stop_str_in_output", "ignore_eos", "min_tokens", "skip_special_tokens",
    "spaces_between_special_tokens", "truncate_prompt_tokens", "add_special_tokens", "response_format",
    "lora_request", "disaggregated_params", "prompt_logprobs", "cache_salt", "echo",
}
COMPLETION_FIELDS = SAMPLING_FIELDS | {"prompt", "suffix", "return_context_logits", "detokenize"}
CHAT_FIELDS = SAMPLING_FIELDS | {
    "messages", "top_logprobs", "max_completion_tokens", "tools", "tool_choice", "parallel_tool_calls",
    "reasoning_effort", "add_generation_prompt", "documents", "chat_template", "chat_template_kwargs"}
MESSAGE_FIELDS = {"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content"}
MESSAGE_ROLES = ("system", "developer", "user", "assistant", "tool")
STREAM_OPTION_FIELDS = {"include_usage", "continuous_usage_stats"}
KINDS = {"max_tokens": "int?", "max_completion_tokens": "int?", "n": "int?", "stream": "bool",
         "temperature": "float?", "top_p": "float?", "seed": "int?", "model": "str", "top_k": "int?"}


class ApiError(Exception):
    """An HTTP error with TensorRT-LLM's ErrorResponse body."""

    def __init__(self, status, message, kind="BadRequestError"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind

    def body(self):
        """The JSON error object."""
        return {"object": "error", "message": self.message, "type": self.kind, "param": None, "code": self.status}


@dataclass
class ParsedRequest:
    """What the executor needs from a validated completion or chat request."""

    kind: str  # "completion" | "chat"
    model: str
    prompt_tokens: int
    seed_text: str
    max_tokens: int
    stream: bool
    include_usage: bool


def _validate_fields(body, allowed):
    errors = [extra_forbidden((key,), value) for key, value in body.items() if key not in allowed]
    for key, kind in KINDS.items():
        if key in body and key in allowed:
            _value, error = coerce(kind, (key,), body[key])
            if error:
                errors.append(error)
    options = body.get("stream_options")
    if isinstance(options, dict):
        errors += [extra_forbidden(("stream_options", k), v) for k, v in options.items()
                   if k not in STREAM_OPTION_FIELDS]
    return errors


def _validate_messages(messages):
    if not isinstance(messages, list) or not messages:
        return [FieldError(("messages",), "Input should be a non-empty list", "list_type", messages)]
    errors = []
    for index, message in enumerate(messages):
        loc = ("messages", index)
        if not isinstance(message, dict):
            errors.append(FieldError(loc, "Input should be a valid dictionary", "dict_type", message))
            continue
        errors += [extra_forbidden(loc + (k,), v) for k, v in message.items() if k not in MESSAGE_FIELDS]
        if message.get("role") not in MESSAGE_ROLES:
            errors.append(FieldError(loc + ("role",), f"Input should be one of {', '.join(MESSAGE_ROLES)}",
                                     "literal_error", message.get("role")))
    return errors


def _prompt_text(prompt):
    """The text of a single prompt: a string, [string], [token ids] or [[token ids]]."""
    if isinstance(prompt, str):
        return prompt, textgen.count_prompt_tokens(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0], textgen.count_prompt_tokens(prompt[0])
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return " ".join(map(str, prompt)), len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list) and prompt[0]:
        return " ".join(map(str, prompt[0])), len(prompt[0])
    raise ApiError(400, "the simulator serves exactly one prompt per request (a string or a list of token ids)")


def parse_request(kind, body, served_model):
    """Validate a /v1/completions or /v1/chat/completions body; raise ApiError on problems."""
    if not isinstance(body, dict):
        raise ApiError(400, "Request body must be a JSON object")
    title = "CompletionRequest" if kind == "completion" else "ChatCompletionRequest"
    required = "prompt" if kind == "completion" else "messages"
    errors = _validate_fields(body, COMPLETION_FIELDS if kind == "completion" else CHAT_FIELDS)
    for field_name in ("model", required):
        if field_name not in body:
            errors.append(FieldError((field_name,), "Field required", "missing", body))
    if kind == "chat" and "messages" in body:
        errors += _validate_messages(body["messages"])
    if errors:
        raise ApiError(400, str(ConfigValidationError(title, errors)))
    if body["model"] != served_model:
        raise ApiError(404, f"The model `{body['model']}` does not exist.", "NotFoundError")
    if (body.get("n") or 1) != 1 or (body.get("best_of") or 1) != 1:
        raise ApiError(400, "the simulator supports n=1 and best_of=1 only")
    if kind == "completion":
        seed_text, prompt_tokens = _prompt_text(body["prompt"])
    else:
        seed_text, prompt_tokens = textgen.chat_seed_text(body["messages"]), textgen.count_chat_tokens(body["messages"])
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    if max_tokens is not None and int(max_tokens) < 1:
        raise ApiError(400, f"max_tokens must be at least 1, got {max_tokens}")
    options = body.get("stream_options") or {}
    stream = bool(coerce("bool", ("stream",), body.get("stream", False))[0])
    return ParsedRequest(kind, body["model"], prompt_tokens, seed_text, int(max_tokens) if max_tokens else None,
                         stream, bool(options.get("include_usage")) and stream)


def new_id(kind):
    """``cmpl-...`` or ``chatcmpl-...``."""
    return f"{'cmpl' if kind == 'completion' else 'chatcmpl'}-{uuid.uuid4().hex}"


def usage(prompt_tokens, completion_tokens):
    """OpenAI's usage object."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def full_response(parsed, response_id, text, finish_reason, completion_tokens):
    """A non-streaming completion or chat completion."""
    common = {"id": response_id, "created": int(time.time()), "model": parsed.model,
              "usage": usage(parsed.prompt_tokens, completion_tokens)}
    if parsed.kind == "completion":
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}
        return {**common, "object": "text_completion", "choices": [choice]}
    message = {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": []}
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}
    return {**common, "object": "chat.completion", "choices": [choice]}


def stream_chunk(parsed, response_id, created, text=None, finish_reason=None, role=False):
    """One SSE chunk: a piece of text, the assistant role announcement, or the finish marker."""
    base = {"id": response_id, "created": created, "model": parsed.model}
    if parsed.include_usage:
        base["usage"] = None
    if parsed.kind == "completion":
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason,
                  "stop_reason": None}
        return {**base, "object": "text_completion", "choices": [choice]}
    delta = {"role": "assistant", "content": ""} if role else ({"content": text} if text is not None else {})
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return {**base, "object": "chat.completion.chunk", "choices": [choice]}


def usage_chunk(parsed, response_id, created, completion_tokens):
    """The final chunk carrying usage when ``stream_options.include_usage`` is set."""
    kind = "text_completion" if parsed.kind == "completion" else "chat.completion.chunk"
    return {"id": response_id, "object": kind, "created": created, "model": parsed.model, "choices": [],
            "usage": usage(parsed.prompt_tokens, completion_tokens)}


def model_list(served_model, created):
    """GET /v1/models."""
    return {"object": "list", "data": [{"id": served_model, "object": "model", "created": created,
                                        "owned_by": "tensorrt_llm"}]}
