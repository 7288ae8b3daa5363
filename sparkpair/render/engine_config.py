"""Check an --extra_llm_api_options mapping and the trtllm-serve flags against TensorRT-LLM.

TensorRT-LLM refuses any unknown key at any level (pydantic extra="forbid"), a value of the wrong
type and a decoding_type it has no class for; the checks below refuse the same before a single
container starts, from sparkpair/data/trtllm_schema.json (NVIDIA's schema, see engine_schema). On
top: keys that hold live Python objects cannot come from YAML, and a key that a trtllm-serve flag
also sets is refused (in 1.3.x the YAML value silently wins over the flag). Every problem line
starts with the key path and names the version it was judged against.
"""

from __future__ import annotations

from typing import Any

from sparkpair.render.engine_schema import Judged, accepts, describe, judged_version, pinned, versions_with

__all__ = ["Judged", "flag_problems", "judged_version", "option_problems", "refusals"]


def option_problems(options: dict[str, Any], passed_flags: set[str], judged: Judged | None = None) -> list[str]:
    """One `key.path: problem` line per refused key or value, then per key a passed flag also sets
    (judged against the pinned version by default)."""
    judged = judged or pinned()
    return refusals(options, judged) + _flag_collisions(options, judged, passed_flags)


def refusals(options: dict[str, Any], judged: Judged | None = None) -> list[str]:
    """What TensorRT-LLM itself refuses in the mapping, one `key.path: problem` line each."""
    walk = _Walk(judged or pinned())
    walk.section(options, walk.rules["top"], "", top=True)
    return walk.problems


def flag_problems(flags: set[str], judged: Judged | None = None) -> list[str]:
    """The flags this version's trtllm-serve does not have."""
    judged = judged or pinned()
    known = set(judged.rules["serve_flags"])
    return [f"{flag}: not a trtllm-serve flag of {judged.label}" for flag in sorted(flags - known)]


class _Walk:
    """One pass over a mapping, collecting problem lines."""

    def __init__(self, judged: Judged) -> None:
        self.judged = judged
        self.rules = judged.rules
        self.problems: list[str] = []

    def add(self, path: str, text: str) -> None:
        self.problems.append(f"{path}: {text}")

    def section(self, mapping: dict[str, Any], cls: str, prefix: str, *, top: bool = False, skip: str = "") -> None:
        fields = self.rules["classes"].get(cls)
        if fields is None:
            return   # a union member whose keys the sources do not list: only its tag is checked
        label = self.judged.label
        before = len(self.problems)
        for key, value in mapping.items():
            path = prefix + str(key)
            if key == skip:
                continue
            if top and key in self.rules["yaml_forbidden"] and value is not None:
                self.add(path, f"cannot be set in YAML: a live Python object in {label}")
            elif key not in fields:
                elsewhere = versions_with(cls, str(key), self.judged.version)
                hint = f"; it exists in TensorRT-LLM {', '.join(elsewhere)}" if elsewhere else ""
                self.add(path, f"not an option of {label}, which refuses it (Extra inputs are not permitted){hint}")
            elif not accepts(fields[key], value):
                self.add(path, f"{value!r} is not accepted by {label} (expected {describe(fields[key])})")
            else:
                self.nested(fields[key], value, path)
        if len(self.problems) == before:   # pydantic runs a model's validators only once its fields are valid
            self.validators(mapping, cls, prefix)

    def nested(self, spec: dict[str, Any], value: Any, path: str) -> None:
        if not isinstance(value, dict):
            return
        if "section" in spec:
            self.section(value, spec["section"], path + ".")
        elif "union" in spec:
            self.union(value, spec["union"], path)

    def union(self, value: dict[str, Any], union: dict[str, Any], path: str) -> None:
        by, choices = union["by"], union["choices"]
        tag = value.get(by)
        expected = f"expected one of {', '.join(sorted(choices))}"
        if tag is None and union["absent"] is None:
            self.add(f"{path}.{by}", f"missing; {self.judged.label} needs it ({expected})")
        elif tag is not None and (not isinstance(tag, str) or tag not in choices):
            self.add(f"{path}.{by}", f"{tag!r} is not accepted by {self.judged.label} ({expected})")
        else:
            self.section(value, choices[tag] if tag is not None else union["absent"], path + ".", skip=by)

    def validators(self, mapping: dict[str, Any], cls: str, prefix: str) -> None:
        """The llm_args.py validators the schema cannot say (draft length, draft model, CUDA graph sizes).

        The first one that fails stops the model, as a raising pydantic validator does.
        """
        label = self.judged.label
        for rule in self.rules["rules"].get(cls, []):
            field = rule.get("field") or rule["fields"][0]
            value = mapping.get(field)
            why = f"TensorRT-LLM's {rule['validator']} refuses"
            if rule["rule"] == "positive" and not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
                got = "no value" if value is None else repr(value)
                self.add(prefix + field, f"{label} needs an integer >= 1 for {cls} ({why} {got})")
                return
            if rule["rule"] == "required" and all(mapping.get(name) is None for name in rule["fields"]):
                names = " or ".join(rule["fields"])
                self.add(prefix + field, f"{label} needs the draft model ({names}) for {cls} ({why} none)")
                return
            sizes = mapping.get(rule.get("list", ""))
            if rule["rule"] == "max_of" and isinstance(sizes, list) and sizes and value and value != max(sizes):
                self.add(prefix + field, f"{value!r} is not accepted by {label}: it must equal "
                                         f"max({rule['list']}) = {max(sizes)} ({why} it)")
                return


def _flag_collisions(options: dict[str, Any], judged: Judged, passed: set[str]) -> list[str]:
    problems = []
    wins = " (in TensorRT-LLM 1.3.x the YAML value silently wins)" if judged.version.startswith("1.3.") else ""
    for key_path, flags in judged.rules["cli_overlap"].items():
        section, _, key = key_path.rpartition(".")
        holder = options.get(section) if section else options
        both = [flag for flag in flags if flag in passed or flag == "MODEL"]   # sparkpair always passes MODEL
        if isinstance(holder, dict) and key in holder and both:
            flag = "the MODEL argument" if both[0] == "MODEL" else both[0]
            problems.append(f"{key_path}: also passed as {flag}; set it in one place only{wins}")
    return problems
