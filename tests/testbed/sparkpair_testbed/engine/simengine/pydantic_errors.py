"""Pydantic-v2-style validation errors and the lax type coercions pydantic applies.

TensorRT-LLM validates ``--extra_llm_api_options`` with pydantic models whose extra keys
are forbidden; on failure the process dies with a traceback ending in, e.g.::

    pydantic_core._pydantic_core.ValidationError: 1 validation error for TorchLlmArgs
    kv_cache_config.foo
      Extra inputs are not permitted [type=extra_forbidden, input_value=1, input_type=int]
        For further information visit https://errors.pydantic.dev/2.11/v/extra_forbidden
"""

from dataclasses import dataclass

DOCS_URL = "https://errors.pydantic.dev/2.11/v/"
BOOL_STRINGS = {"0": False, "off": False, "f": False, "false": False, "n": False, "no": False,
                "1": True, "on": True, "t": True, "true": True, "y": True, "yes": True}


@dataclass
class FieldError:
    """One line-item of a ValidationError."""

    loc: tuple
    msg: str
    type: str
    input: object


class ConfigValidationError(Exception):
    """All errors found for one model (TorchLlmArgs), rendered the way pydantic renders them."""

    def __init__(self, title, errors):
        super().__init__(title)
        self.title = title
        self.errors = list(errors)

    def __str__(self):
        count = len(self.errors)
        lines = [f"{count} validation error{'s' if count != 1 else ''} for {self.title}"]
        for error in self.errors:
            lines.append(".".join(str(part) for part in error.loc))
            lines.append(f"  {error.msg} [type={error.type}, input_value={short_repr(error.input)}, "
                         f"input_type={type(error.input).__name__}]")
            lines.append(f"    For further information visit {DOCS_URL}{error.type}")
        return "\n".join(lines)

    def render(self):
        """The last line(s) of the traceback, as printed on stderr."""
        return f"pydantic_core._pydantic_core.ValidationError: {self}"


def short_repr(value, limit=50):
    """repr() shortened in the middle like pydantic does for long inputs."""
    text = repr(value)
    if len(text) <= limit:
        return text
    half = (limit - 3) // 2
    return f"{text[:half]}...{text[-half:]}"


def extra_forbidden(loc, value):
    """The error for a key the model does not declare."""
    return FieldError(tuple(loc), "Extra inputs are not permitted", "extra_forbidden", value)


def value_error(loc, value, message):
    """The error a model validator raises (``ValueError`` inside pydantic)."""
    return FieldError(tuple(loc), f"Value error, {message}", "value_error", value)


def coerce_int(loc, value, optional=False):
    """Lax int parsing; returns (value, error)."""
    if value is None:
        return (None, None) if optional else (None, FieldError(loc, "Input should be a valid integer", "int_type", value))
    if isinstance(value, bool) or isinstance(value, int):
        return int(value), None
    if isinstance(value, float):
        if value.is_integer():
            return int(value), None
        return None, FieldError(loc, "Input should be a valid integer, got a number with a fractional part",
                                "int_from_float", value)
    if isinstance(value, str):
        try:
            return int(value.strip()), None
        except ValueError:
            return None, FieldError(loc, "Input should be a valid integer, unable to parse string as an integer",
                                    "int_parsing", value)
    return None, FieldError(loc, "Input should be a valid integer", "int_type", value)


def coerce_float(loc, value, optional=False):
    """Lax float parsing; returns (value, error)."""
    if value is None:
        return (None, None) if optional else (None, FieldError(loc, "Input should be a valid number", "float_type", value))
    if isinstance(value, (int, float)):
        return float(value), None
    if isinstance(value, str):
        try:
            return float(value.strip()), None
        except ValueError:
            return None, FieldError(loc, "Input should be a valid number, unable to parse string as a number",
                                    "float_parsing", value)
    return None, FieldError(loc, "Input should be a valid number", "float_type", value)


def coerce_bool(loc, value, optional=False):
    """Lax bool parsing; returns (value, error)."""
    if value is None and optional:
        return None, None
    if isinstance(value, bool):
        return value, None
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value), None
    if isinstance(value, str) and value.strip().lower() in BOOL_STRINGS:
        return BOOL_STRINGS[value.strip().lower()], None
    if isinstance(value, str):
        return None, FieldError(loc, "Input should be a valid boolean, unable to interpret input", "bool_parsing", value)
    return None, FieldError(loc, "Input should be a valid boolean", "bool_type", value)


def coerce_str(loc, value, optional=False):
    """Strings (and paths) only; returns (value, error)."""
    if value is None and optional:
        return None, None
    if isinstance(value, str):
        return value, None
    return None, FieldError(loc, "Input should be a valid string", "string_type", value)


def coerce_literal(loc, value, choices):
    """A value from a fixed set; returns (value, error)."""
    if value in choices:
        return value, None
    listed = ", ".join(repr(choice) for choice in choices[:-1]) + f" or {choices[-1]!r}"
    return None, FieldError(loc, f"Input should be {listed}", "literal_error", value)


def mapping_error(loc, value, class_name):
    """The error for a section that is not a mapping."""
    return FieldError(tuple(loc), f"Input should be a valid dictionary or instance of {class_name}",
                      "model_type", value)


COERCERS = {"int": coerce_int, "float": coerce_float, "bool": coerce_bool, "str": coerce_str}


def coerce(kind, loc, value):
    """Coerce by kind name: ``int``, ``int?`` (optional), ``float``, ``bool``, ``str?`` ..."""
    optional = kind.endswith("?")
    return COERCERS[kind.rstrip("?")](tuple(loc), value, optional=optional)
