"""What TensorRT-LLM 1.3.0rc12 accepts in ``--extra_llm_api_options``, read from NVIDIA's own files.

No derived data: the check interprets NVIDIA's files as they are published, kept next to this
module (the engine README, "What `--extra_llm_api_options` may hold", gives their origin):

- ``trtllm-serve-config.schema.json``: NVIDIA's JSON Schema for ``trtllm-serve --config``
  (TensorRT-LLM 1.4.0rc0, ``tensorrt_llm/schemas/trtllm-serve-config.schema.json@20e20312``), read
  with the small JSON Schema subset below ($ref, anyOf/oneOf, discriminator, type, const, enum,
  bounds, items, properties with additionalProperties false).
- ``trtllm-1.3.0rc12-searchindex.extract.json``: the 1.3.0rc12 documentation's object index
  (``gh-pages:1.3.0rc12/searchindex.js@a4349b2c``): which fields and validators each class has in
  1.3.0rc12, and the ``trtllm-serve serve`` options.

The schema is narrowed to 1.3.0rc12: a class the 1.3.0rc12 index documents accepts its 1.3.0rc12
fields (plus the aliases the schema lists under a field's title), each checked with the schema's
rule when the schema has one and taking any value otherwise; a class the schema writes out in place
(MoeLoadBalancerConfig) takes the keys written there; a mapping of a class the index does not
document is taken as it comes; union members 1.3.0rc12 does not export are gone. On top, what the engine does
beyond the schema: the playbooks' ``DraftTarget`` spelling, and the validators the index lists.
"""

import json
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA_FILE = HERE / "trtllm-serve-config.schema.json"
INDEX_FILE = HERE / "trtllm-1.3.0rc12-searchindex.extract.json"
LLMAPI = "tensorrt_llm.llmapi."
TOP = "TorchLlmArgs"
CLASS, ATTRIBUTE, FIELD, VALIDATOR = 10, 11, 15, 16
# The schema's classes that 1.3.0rc12 knows under another name.
OLD_NAMES = {"DecodeCudaGraphConfig": "CudaGraphConfig"}
# decoding_type spellings TensorRT-LLM 1.3 maps onto a class literal (the DGX Spark playbooks write DraftTarget).
TAG_ALIASES = {"DraftTarget": "Draft_Target"}
DRAFT_MODEL = ("speculative_model", "speculative_model_dir")   # AliasChoices of DecodingBaseConfig


class Problem:
    """One refusal: the key path (keys only), pydantic's loc, error type, message and input."""

    def __init__(self, path, kind, message, value, loc=None):
        self.path = tuple(path)
        self.loc = tuple(path if loc is None else loc)
        self.kind = kind
        self.message = message
        self.value = value

    @property
    def key_path(self):
        """The dotted key path, list indices left out: ``cuda_graph_config.batch_sizes``."""
        return ".".join(str(part) for part in self.path if not isinstance(part, int))

    def __repr__(self):
        return f"Problem({self.key_path!r}, {self.kind!r}, {self.message!r})"


def json_kind(value):
    """JSON Schema's type of a YAML value (an integral float is an integer)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object", type(None): "null"}.get(type(value), "?")


def _type_ok(value, types):
    types = [types] if isinstance(types, str) else types
    kind = json_kind(value)
    return kind in types or (kind == "integer" and "number" in types)


class Rc12Schema:
    """NVIDIA's schema narrowed to TensorRT-LLM 1.3.0rc12."""

    def __init__(self, schema, index):
        self.schema = schema
        self.defs = schema["$defs"]
        self.fields, self.validators = {}, {}
        self.exported = {e[4] for e in index["objects"]["tensorrt_llm.llmapi"] if e[1] == CLASS}
        for name, entries in index["objects"].items():
            if not name.startswith(LLMAPI):
                continue
            cls = name[len(LLMAPI):]
            # fields; on TorchLlmArgs also its own deprecated attributes (the anchored ones are shared helpers)
            self.fields[cls] = {e[4] for e in entries if e[1] == FIELD or (e[1] == ATTRIBUTE and not e[3])}
            self.validators[cls] = [e[4] for e in entries if e[1] == VALIDATOR]
        self.flags = {e[4] for e in index["objects"]["trtllm-serve-serve"] if e[4].startswith("--")}

    def validate(self, data):
        """Every problem of a ``--extra_llm_api_options`` mapping."""
        return self._model(data, TOP, self.schema, ())

    def rc12_class(self, schema_class):
        """The 1.3.0rc12 class whose fields the index lists for a schema class, or None."""
        name = OLD_NAMES.get(schema_class, schema_class)
        return name if name in self.fields else None

    def exists(self, schema_class):
        """False for a class tensorrt_llm.llmapi does not export in 1.3.0rc12 (a newer union member)."""
        return OLD_NAMES.get(schema_class, schema_class) in self.exported

    def decoding_tags(self):
        """The decoding_type values 1.3.0rc12 takes (class literals, then the aliases)."""
        mapping = self.schema["properties"]["speculative_config"]["anyOf"][0]["discriminator"]["mapping"]
        tags = sorted(tag for tag, ref in mapping.items() if self.exists(ref.rsplit("/", 1)[1]))
        return tags + sorted(alias for alias, tag in TAG_ALIASES.items() if tag in tags)

    # ---- the JSON Schema subset -----------------------------------------------------------

    def _check(self, value, node, path, loc):
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[1]
            target = self.defs[name]
            if "properties" in target:
                return self._model(value, name, target, path, loc)
            return self._check(value, target, path, loc)
        if "discriminator" in node:
            return self._tagged(value, node["discriminator"], path, loc)
        if "properties" in node and node.get("additionalProperties") is False:   # a class written out in place
            return self._model(value, node.get("title", "model"), node, path, loc, written_out=True)
        for key in ("anyOf", "oneOf"):
            if key in node:
                return self._any_of(value, node[key], path, loc)
        if "type" in node and not _type_ok(value, node["type"]):
            kind, message = _type_error(node["type"], value)
            return [Problem(path, kind, message, value, loc)]
        if "const" in node and value != node["const"]:
            return [Problem(path, "literal_error", f"Input should be {node['const']!r}", value, loc)]
        if "enum" in node and value not in node["enum"]:
            listed = ", ".join(repr(choice) for choice in node["enum"])
            return [Problem(path, "enum", f"Input should be one of {listed}", value, loc)]
        if json_kind(value) in ("integer", "number"):
            return self._bounds(value, node, path, loc)
        if isinstance(value, list) and isinstance(node.get("items"), dict):
            return [p for i, item in enumerate(value) for p in self._check(item, node["items"], path + (i,), loc + (i,))]
        return []

    def _target(self, node):
        return self.defs[node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else {}

    def _bounds(self, value, node, path, loc):
        tests = (("minimum", "greater_than_equal", ">=", lambda v, b: v >= b),
                 ("exclusiveMinimum", "greater_than", ">", lambda v, b: v > b),
                 ("maximum", "less_than_equal", "<=", lambda v, b: v <= b),
                 ("exclusiveMaximum", "less_than", "<", lambda v, b: v < b))
        for key, kind, sign, test in tests:
            if key in node and not test(value, node[key]):
                return [Problem(path, kind, f"Input should be {sign} {node[key]}", value, loc)]
        return []

    def _any_of(self, value, options, path, loc):
        classes = [o["$ref"].rsplit("/", 1)[1] for o in options if "properties" in self._target(o)]
        if any(self.exists(name) for name in classes):   # a newer sibling of a 1.3.0rc12 class is not there yet
            options = [o for o in options if "properties" not in self._target(o) or self.exists(o["$ref"].rsplit("/", 1)[1])]
        results = [self._check(value, option, path, loc) for option in options]
        if any(not problems for problems in results):
            return []
        relevant = [r for r in results if not (len(r) == 1 and r[0].kind in TYPE_ERRORS and r[0].path == path)]
        if relevant:
            return relevant[0]
        return next((r for r in results if r[0].kind != "none_required"), results[0])   # None is the fallback

    def _tagged(self, value, discriminator, path, loc):
        by = discriminator["propertyName"]
        if not isinstance(value, dict):
            return [Problem(path, "model_attributes_type", "Input should be a valid dictionary", value, loc)]
        tag = value.get(by)
        if tag is None:
            return [Problem(path + (by,), "union_tag_not_found",
                            f"Unable to extract tag using discriminator '{by}'", value, loc)]
        literal = TAG_ALIASES.get(tag, tag) if isinstance(tag, str) else tag
        members = {t: ref.rsplit("/", 1)[1] for t, ref in discriminator["mapping"].items()
                   if self.exists(ref.rsplit("/", 1)[1])}
        if literal not in members:
            expected = ", ".join(repr(t) for t in sorted(members))
            return [Problem(path + (by,), "union_tag_invalid", f"Input tag {tag!r} found using '{by}' does not "
                            f"match any of the expected tags: {expected}", value, loc)]
        member = self.defs[members[literal]]
        return self._model(dict(value, **{by: literal}), members[literal], member, path, loc)

    def _model(self, value, schema_class, node, path, loc=None, written_out=False):
        loc = path if loc is None else loc
        cls = schema_class if written_out else self.rc12_class(schema_class)
        if not isinstance(value, dict):
            return [Problem(path, "model_type", f"Input should be a valid dictionary or instance of "
                            f"{cls or schema_class}", value, loc)]
        if cls is None:
            return []   # 1.3.0rc12's docs list no fields for it: taken as it comes
        props = node["properties"]
        allowed = set(props) if written_out else self.fields[cls]   # written out: the schema's own list
        titles = {props[f].get("title") for f in allowed if f in props} - {None}
        problems = []
        for key, item in value.items():
            prop = props.get(key)
            if key not in allowed and not (prop is not None and prop.get("title") in titles):
                problems.append(Problem(path + (key,), "extra_forbidden", "Extra inputs are not permitted", item,
                                        loc + (key,)))
                continue
            prop = prop if prop is not None else props.get("_" + key)   # mpi_session is the schema's _mpi_session
            if prop is not None:
                problems += self._check(item, prop, path + (key,), loc + (key,))
        if problems:
            return problems   # pydantic runs a model's validators only once its fields are valid
        for validator in self.validators.get(cls, []):   # the index's order (llm_args.py's, for these)
            for field, message in VALIDATORS.get(validator, _none)(value):
                return [Problem(path + (field,), "value_error", f"Value error, {message}", value, loc)]
        return []

    # ---- the rest ---------------------------------------------------------------------------

    def serve_flags(self):
        """The ``trtllm-serve serve`` flags of 1.3.0rc12."""
        return set(self.flags)


TYPE_ERRORS = {"int_type", "int_parsing", "int_from_float", "float_type", "float_parsing", "bool_type", "bool_parsing",
               "string_type", "none_required", "list_type", "dict_type"}


def _type_error(types, value):
    """pydantic's error type and message for a value of the wrong JSON type."""
    wanted = (types if isinstance(types, list) else [types])[0]
    text = isinstance(value, str)
    if wanted == "integer":
        if isinstance(value, float) and not value.is_integer():
            return "int_from_float", "Input should be a valid integer, got a number with a fractional part"
        return ("int_parsing", "Input should be a valid integer, unable to parse string as an integer") if text else (
            "int_type", "Input should be a valid integer")
    if wanted == "number":
        return ("float_parsing", "Input should be a valid number, unable to parse string as a number") if text else (
            "float_type", "Input should be a valid number")
    if wanted == "boolean":
        return ("bool_parsing", "Input should be a valid boolean, unable to interpret input") if text else (
            "bool_type", "Input should be a valid boolean")
    return {"string": ("string_type", "Input should be a valid string"), "null": ("none_required", "Input should be None"),
            "array": ("list_type", "Input should be a valid list"),
            "object": ("dict_type", "Input should be a valid dictionary")}.get(wanted, ("type_error", f"Input should be {wanted}"))


def _none(_data):
    return []


def _positive(data, what):
    value = data.get("max_draft_len")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return []
    return [("max_draft_len", f"max_draft_len must be > 0 for {what}")]


def _draft_model(data, message):
    return [] if any(data.get(name) is not None for name in DRAFT_MODEL) else [("speculative_model", message)]


def _cuda_graph(data):
    sizes, maximum = data.get("batch_sizes"), data.get("max_batch_size")
    if isinstance(sizes, list) and sizes and maximum and maximum != max(sizes):
        return [("max_batch_size", "CudaGraphConfig.max_batch_size is incompatible with CudaGraphConfig.batch_sizes. "
                                   "When both are provided, max_batch_size must equal max(batch_sizes).")]
    return []


# The llm_args.py validators 1.3.0rc12's index lists, as TensorRT-LLM words them.
VALIDATORS = {
    "validate_eagle_config": lambda d: _positive(d, "Eagle"),
    "validate_speculative_model": lambda d: _draft_model(d, "Draft model must be provided for EAGLE"),
    "validate_draft_target_config": lambda d: _positive(d, "DraftTarget") or _draft_model(
        d, "speculative_model must be specified for DraftTarget"),
    "validate_ngram_config": lambda d: _positive(d, "NGram"),
    "validate_sa_config": lambda d: _positive(d, "SA"),
    "validate_cuda_graph_config": _cuda_graph,
}


@lru_cache(maxsize=1)
def load():
    """The 1.3.0rc12 view of NVIDIA's schema, read from the files next to this module."""
    with open(SCHEMA_FILE) as schema, open(INDEX_FILE) as index:
        return Rc12Schema(json.load(schema), json.load(index))
