"""Which ``--extra_llm_api_options`` keys and values the engine accepts: TensorRT-LLM 1.3.0rc12's.

``load_allowlist`` is the one place that says where from: NVIDIA's own files, read as published by
``nvidia_schema`` (the JSON Schema of ``trtllm-serve --config`` narrowed to what the 1.3.0rc12
documentation lists). Nothing of sparkpair's is read.
"""

from . import nvidia_schema


def load_allowlist(env=None):
    """The checker of TensorRT-LLM 1.3.0rc12's LLM-API options (``validate(mapping)``, ``serve_flags()``).

    ENV is accepted for callers that pass the process environment; nothing in it changes the source.
    """
    del env
    return nvidia_schema.load()
