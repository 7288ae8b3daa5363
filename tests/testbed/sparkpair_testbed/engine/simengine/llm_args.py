"""``--extra_llm_api_options`` / ``--config``: load the YAML, reject what TorchLlmArgs rejects.

The rules are TensorRT-LLM 1.3.0rc12's, read from NVIDIA's files by ``nvidia_schema`` (see
``allowlist.load_allowlist``): unknown keys at any level fail with pydantic's ``extra_forbidden``,
values of the wrong type with its type errors, an unknown ``decoding_type`` with
``union_tag_invalid``, and the validators 1.3.0rc12 runs (draft length, draft model, CUDA graph
sizes) with ``value_error``. Types follow NVIDIA's JSON Schema (no lax coercion of strings).
"""

import yaml

from .pydantic_errors import ConfigValidationError, FieldError, value_error


class ConfigFileError(Exception):
    """The YAML file could not be read or is not a mapping; the text is what gets printed."""


def load_yaml_file(path):
    """Read the options file like trtllm-serve (``yaml.safe_load``); it must be a non-empty mapping."""
    try:
        with open(path) as handle:
            data = yaml.safe_load(handle)
    except FileNotFoundError:
        raise ConfigFileError(f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'")
    except yaml.YAMLError as error:
        raise ConfigFileError(f"{type(error).__module__}.{type(error).__name__}: {error}")
    if data is None:
        raise ConfigFileError("TypeError: argument of type 'NoneType' is not iterable "
                              f"(the options file {path} is empty; it must be a YAML mapping)")
    if not isinstance(data, dict):
        raise ConfigFileError(f"TypeError: the options file {path} must be a YAML mapping, "
                              f"got {type(data).__name__}")
    return data


def validate_extra_options(data, allow):
    """Check the YAML mapping; raise ConfigValidationError listing every problem found."""
    errors = [FieldError(problem.loc, problem.message, problem.kind, problem.value) for problem in allow.validate(data)]
    if errors:
        raise ConfigValidationError("TorchLlmArgs", errors)


def backend_errors(data, backend):
    """Eagle3 is PyTorch-only; the TensorRT backend refuses it (TrtLlmArgs validator)."""
    spec = data.get("speculative_config") or {}
    if backend == "tensorrt" and spec.get("decoding_type") == "Eagle3":
        raise ConfigValidationError("TrtLlmArgs", [value_error(
            ("speculative_config",), spec, "Eagle3 speculative decoding is only supported on the PyTorch backend")])
