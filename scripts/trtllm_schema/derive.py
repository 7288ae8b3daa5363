#!/usr/bin/env python3
"""Derive sparkpair/data/trtllm_schema.json from NVIDIA's published TensorRT-LLM sources.

Runs offline from the copies in sources/ (SOURCES.md gives each file's public origin and commit);
standard library and pyyaml only. `derive.py` writes the data file, `derive.py --check` exits 1
when the committed file is not what the sources give, `derive.py --out PATH` writes elsewhere.

What comes from where:
- TensorRT-LLM 1.4.0rc0: keys, types and literals from NVIDIA's JSON Schema for `trtllm-serve
  --config` (the first release that ships one), flags from the trtllm-serve CLI reference.
- TensorRT-LLM 1.3.0rc12 (the recipe's pin): keys from the 1.3.0rc12 documentation's object index
  (the pydantic fields of TorchLlmArgs and of each config class) and flags from the same index
  (`trtllm-serve serve` options); types from the 1.4.0rc0 schema for the fields both carry (a field
  the schema lacks is checked by name only); the decoding_type spellings of NVIDIA's 1.3.0rc12
  playbooks.
- Both: the llm_args.py validators that the schema cannot express (VALIDATOR_RULES), applied to a
  class only when the 1.3.0rc12 index lists that validator for it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "sources"
REPO = HERE.parents[1]
OUTPUT = REPO / "sparkpair" / "data" / "trtllm_schema.json"

SCHEMA = "trtllm-serve-config.schema.json"
CLI = "trtllm_serve_cli.yaml"
REF_COMMITTED = "references_committed-llm.yaml"
REF_LLM = "references-llm.yaml"
EXTRACT = "trtllm-1.3.0rc12-searchindex.extract.json"
PLAYBOOKS = "playbooks"

ORIGINS = {
    SCHEMA: ("NVIDIA/TensorRT-LLM", "tensorrt_llm/schemas/trtllm-serve-config.schema.json",
             "20e20312aa34d5c26f9538c0df6abe1a1d393306", "1.4.0rc0"),
    CLI: ("NVIDIA/TensorRT-LLM", "tests/unittest/api_stability/references/trtllm_serve_cli.yaml",
          "029e223d527d2ff453062555f7aef86517a2847c", "main after 1.3.0rc12"),
    REF_COMMITTED: ("NVIDIA/TensorRT-LLM", "tests/unittest/api_stability/references_committed/llm.yaml",
                    "029c15cbff10692cf7e9df552d92450dd92a3125", "main"),
    REF_LLM: ("NVIDIA/TensorRT-LLM", "tests/unittest/api_stability/references/llm.yaml",
              "ea35fd6735a7f08fa93289e07b953a2d8a37a2cf", "main"),
    EXTRACT: ("NVIDIA/TensorRT-LLM", "1.3.0rc12/searchindex.js (branch gh-pages)",
              "a4349b2cd9a521af85335a517722f90fc14d4f15", "1.3.0rc12 (built from 61cef212a8c59e843521881f45eee262c8f0525d)"),
    PLAYBOOKS: ("NVIDIA/dgx-spark-playbooks", "nvidia/speculative-decoding/README.md",
                "2022e2b24bf08059f1dee38dbb637bf3f0300f16", "1.3.0rc12 (the image the playbook runs)"),
}

NEW, PINNED = "1.4.0rc0", "1.3.0rc12"
LLMAPI = "tensorrt_llm.llmapi."
TOP = "TorchLlmArgs"
# The nested sections checked key by key (every other mapping is checked as a value only).
SECTION_FIELDS = ("kv_cache_config", "cuda_graph_config", "moe_config", "speculative_config", "sa_config")
# 1.3.0rc12 class -> the 1.4.0rc0 schema class that carries its fields' types.
COUNTERPART = {"CudaGraphConfig": "DecodeCudaGraphConfig"}
LIVE_OBJECT = "Live objects require the Python LLM API."
# Validators of llm_args.py (names as the 1.3.0rc12 index lists them) and what they refuse.
VALIDATOR_RULES: dict[str, list[dict[str, Any]]] = {
    "validate_eagle_config": [{"rule": "positive", "field": "max_draft_len"}],
    "validate_draft_target_config": [{"rule": "positive", "field": "max_draft_len"},
                                     {"rule": "required", "fields": ["speculative_model", "speculative_model_dir"]}],
    "validate_ngram_config": [{"rule": "positive", "field": "max_draft_len"}],
    "validate_sa_config": [{"rule": "positive", "field": "max_draft_len"}],
    "validate_speculative_model": [{"rule": "required", "fields": ["speculative_model", "speculative_model_dir"]}],
    "validate_cuda_graph_config": [{"rule": "max_of", "field": "max_batch_size", "list": "batch_sizes"}],
}
MODEL_POSITIONAL = {"model": ["MODEL"]}   # trtllm-serve MODEL: sparkpair always passes it


def load_sources() -> dict[str, Any]:
    text = {name: (SOURCES / name).read_text("utf-8") for name in (SCHEMA, CLI, REF_COMMITTED, REF_LLM, EXTRACT)}
    playbooks = {path.name: yaml.safe_load(path.read_text("utf-8")) for path in sorted((SOURCES / PLAYBOOKS).glob("*.yml"))}
    return {"schema": json.loads(text[SCHEMA]), "cli": yaml.safe_load(text[CLI]),
            "committed": yaml.safe_load(text[REF_COMMITTED]), "llm": yaml.safe_load(text[REF_LLM]),
            "extract": json.loads(text[EXTRACT]), "playbooks": playbooks}


def source_list() -> list[dict[str, str]]:
    listed = []
    for name, (repo, path, commit, version) in ORIGINS.items():
        files = sorted((SOURCES / name).glob("*.yml")) if (SOURCES / name).is_dir() else [SOURCES / name]
        for file in files:
            listed.append({"file": str(file.relative_to(REPO)), "origin": f"{repo}:{path}@{commit}",
                           "url": f"https://github.com/{repo}/blob/{commit}/{path.split(' ')[0]}"
                           if not path.startswith("1.3.0rc12") else f"https://nvidia.github.io/TensorRT-LLM/{path.split(' ')[0]}",
                           "tensorrt_llm": version, "sha256": hashlib.sha256(file.read_bytes()).hexdigest()})
    return listed


# ---- JSON Schema -> flat field specs -------------------------------------------------------

def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    return {int: "integer", float: "number", str: "string", list: "array", dict: "object"}.get(type(value), "null")


def branches(node: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    """The alternatives of a schema node: anyOf/oneOf flattened, refs to enum-like defs inlined."""
    for key in ("anyOf", "oneOf"):
        if key in node:
            return [leaf for option in node[key] for leaf in branches(option, defs)]
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if "properties" in defs[name] or defs[name].get("type") == "object":
            return [{"$ref": name}]
        return branches(defs[name], defs)
    return [node]


def flatten(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """One field's accepted values: JSON types, allowed strings and integers, bounds, item types, refs."""
    types: set[str] = set()
    strings: set[str] = set()
    ints: set[int] = set()
    any_string = any_int = False
    spec: dict[str, Any] = {}
    refs = []
    for option in branches(node, defs):
        if "$ref" in option:
            types.add("object")
            refs.append(option["$ref"])
            continue
        if "properties" in option and option.get("additionalProperties") is False:
            types.add("object")
            spec["inline"] = option["title"]   # a class written out in place (MoeLoadBalancerConfig)
            continue
        values = [option["const"]] if "const" in option else option.get("enum")
        kinds = option.get("type", [])
        kinds = [kinds] if isinstance(kinds, str) else list(kinds) or sorted({json_type(v) for v in values or []})
        if not kinds:
            return {"types": None}
        for kind in kinds:
            types.add(kind)
            if kind == "string":
                any_string |= values is None
                strings |= {v for v in values or [] if isinstance(v, str)}
            if kind == "integer":
                any_int |= values is None
                ints |= {v for v in values or [] if isinstance(v, int) and not isinstance(v, bool)}
            if kind in ("integer", "number"):
                for key, short in (("minimum", "min"), ("maximum", "max"), ("exclusiveMinimum", "xmin"),
                                   ("exclusiveMaximum", "xmax")):
                    if key in option:
                        spec[short] = option[key]
            if kind == "array" and isinstance(option.get("items"), dict):
                spec["items"] = flatten(option["items"], defs)["types"]
    spec["types"] = sorted(types)
    if "string" in types and not any_string:
        spec["strings"] = sorted(strings)
    if "integer" in types and not any_int:
        spec["ints"] = sorted(ints)
    if refs:
        spec["refs"] = refs
    return spec


def union_of(node: dict[str, Any], defs: dict[str, Any], refs: list[str]) -> dict[str, Any]:
    """How a field holding one of several config classes picks its class."""
    found = [option for option in [node] + node.get("anyOf", []) if "discriminator" in option]
    if found:
        disc = found[0]["discriminator"]
        return {"by": disc["propertyName"], "absent": None,
                "choices": {tag: ref.rsplit("/", 1)[-1] for tag, ref in sorted(disc["mapping"].items())}}
    shared = set.intersection(*(set(defs[ref]["properties"]) for ref in refs))
    by = next(p for p in sorted(shared) if all("const" in defs[ref]["properties"][p] for ref in refs))
    return {"by": by, "absent": refs[0], "choices": {defs[ref]["properties"][by]["const"]: ref for ref in refs}}


INLINE: dict[str, Any] = {}   # classes written out in place in the schema, by title


def properties_of(schema: dict[str, Any], name: str) -> dict[str, Any]:
    if name == TOP:
        return dict(schema["properties"])
    return dict(INLINE[name] if name in INLINE else schema["$defs"][name]["properties"])


def schema_classes(schema: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The 1.4.0rc0 classes sparkpair checks key by key, and every $def's flat fields (for types)."""
    defs = schema["$defs"]
    flat = {TOP: {k: flatten(v, defs) for k, v in schema["properties"].items()}}
    flat.update({name: {k: flatten(v, defs) for k, v in d.get("properties", {}).items()} for name, d in defs.items()})
    checked: dict[str, dict[str, Any]] = {}
    pending = [TOP]
    while pending:
        name = pending.pop()
        fields = {}
        for key, spec in flat[name].items():
            spec = dict(spec)
            refs = spec.pop("refs", [])
            source = properties_of(schema, name)[key]
            inline = spec.pop("inline", None)
            if inline and name != TOP:   # inside a checked section: its keys are checked too
                written = next(leaf for leaf in branches(source, defs) if leaf.get("title") == inline)
                flat[inline] = {k: flatten(v, defs) for k, v in written["properties"].items()}
                INLINE[inline] = written["properties"]
                spec["section"] = inline
                pending.append(inline)
            if key in SECTION_FIELDS and refs:
                if len(refs) == 1:
                    spec["section"] = refs[0]
                else:
                    spec["union"] = union_of(source, defs, refs)
                pending += [r for r in refs if r not in checked]
            elif len(refs) > 1 and any("discriminator" in o for o in [source] + source.get("anyOf", [])):
                spec["union"] = union_of(source, defs, refs)   # the tag is checked, the members' keys are not
            fields[key] = spec
        checked[name] = fields
    return checked, flat


# ---- the versions ---------------------------------------------------------------------------

def validator_rules(extract: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per 1.3.0rc12 class: the rules of the validators its index entry lists."""
    rules = {}
    for qualified, entries in extract["objects"].items():
        found = [dict(rule, validator=e[4]) for e in entries if e[1] == 16 for rule in VALIDATOR_RULES.get(e[4], [])]
        if found:
            rules[qualified.removeprefix(LLMAPI)] = found
    return rules


def overlap(options: dict[str, list[str]], top: set[str], kv: set[str]) -> dict[str, list[str]]:
    """LLM-API keys that a trtllm-serve option also sets (same name as the option or one of its flags)."""
    found = dict(MODEL_POSITIONAL)
    for param, flags in options.items():
        for name in [param] + [f.lstrip("-") for f in flags]:
            if name in top:
                found[name] = sorted(flags)
            elif name in kv:
                found[f"kv_cache_config.{name}"] = sorted(flags)
    return dict(sorted(found.items()))


def new_version(src: dict[str, Any], checked: dict[str, Any], rc12_rules: dict[str, Any]) -> dict[str, Any]:
    options = {name: opt["flags"] for name, opt in src["cli"]["commands"]["serve"]["options"].items()}
    # The schema carries no validators: a 1.4.0rc0 class gets the rules of its 1.3.0rc12 namesake (the
    # decode and encode CUDA-graph classes both derive from 1.3.0rc12's CudaGraphConfig).
    old_name = {"DecodeCudaGraphConfig": "CudaGraphConfig", "EncodeCudaGraphConfig": "CudaGraphConfig"}
    rules = {name: rc12_rules[old_name.get(name, name)] for name in checked if old_name.get(name, name) in rc12_rules}
    forbidden = sorted(k for k, v in src["schema"]["properties"].items() if v.get("description") == LIVE_OBJECT)
    return {"label": f"TensorRT-LLM {NEW}", "classes": checked, "top": TOP, "rules": rules, "yaml_forbidden": forbidden,
            "serve_flags": sorted({f for flags in options.values() for f in flags}),
            "cli_overlap": overlap(options, set(checked[TOP]), set(checked["KvCacheConfig"])),
            "keys_from": SCHEMA, "types_from": SCHEMA, "flags_from": CLI}


def rc12_version(src: dict[str, Any], checked: dict[str, Any], flat: dict[str, Any], rules: dict[str, Any]) -> dict[str, Any]:
    objects = src["extract"]["objects"]
    refs = {name for part in (src["committed"], src["llm"]) for name in part["methods"]["__init__"]["parameters"]}
    classes: dict[str, dict[str, Any]] = {}
    for qualified, entries in objects.items():
        if not qualified.startswith(LLMAPI):
            continue
        name = qualified.removeprefix(LLMAPI)
        keys = [e[4] for e in entries if e[1] == 15]
        if name == TOP:   # deprecated inputs the docs list as attributes: kept when NVIDIA names them as LLM arguments
            keys += [e[4] for e in entries if e[1] == 11 and (e[4] in refs or e[4] in flat[TOP])]
        classes[name] = {key: None for key in keys}
    exported = {e[4] for e in objects["tensorrt_llm.llmapi"] if e[1] == 10}   # the classes 1.3.0rc12 has

    def rc12_union(union: dict[str, Any]) -> dict[str, Any]:
        """A union's members that 1.3.0rc12 exports; classes without a schema literal (Medusa) drop out."""
        choices = {tag: cls for tag, cls in union["choices"].items() if cls in exported}
        return dict(union, choices=dict(sorted(choices.items())))

    union = rc12_union(checked[TOP]["speculative_config"]["union"])
    for playbook in src["playbooks"].values():   # the spellings NVIDIA's 1.3.0rc12 playbooks use
        tag = (playbook.get("speculative_config") or {}).get("decoding_type")
        if tag and tag not in union["choices"]:
            union["choices"][tag] = next(cls for t, cls in union["choices"].items() if t.replace("_", "") == tag)
    union["choices"] = dict(sorted(union["choices"].items()))

    def rc12_name(new_name: str) -> str:
        return next((old for old, n in COUNTERPART.items() if n == new_name), new_name)

    for name, keys in classes.items():
        new = COUNTERPART.get(name, name)
        types = flat.get(new, {})
        titles = {src_schema_title(src, new, k) for k in keys if k in types} - {None}
        for alias in types:   # pydantic aliases: the schema lists them under their field's title
            if alias not in keys and src_schema_title(src, new, alias) in titles:
                keys[alias] = None
        for key in keys:
            spec = dict(checked.get(new, {}).get(key) or types.get(key) or {"types": None})
            spec.pop("refs", None)
            if key == "speculative_config":
                spec["union"] = union
            elif "union" in spec and spec["union"]["absent"]:   # split into per-mode classes after 1.3.0rc12
                spec["section"] = rc12_name(spec.pop("union")["absent"])
            elif "union" in spec:
                spec["union"] = rc12_union(spec["union"])
            elif "section" in spec:
                spec["section"] = rc12_name(spec["section"])
            keys[key] = spec
    reached, pending = set(), [TOP, *union["choices"].values()]
    while pending:   # the classes a mapping can reach, and written-out 1.4.0rc0 classes 1.3.0rc12's index omits
        name = pending.pop()
        reached.add(name)
        if name not in classes:
            classes[name] = {key: spec for key, spec in checked[name].items()}
        pending += [spec["section"] for spec in classes[name].values() if spec.get("section") not in reached | {None}]
    classes = {name: fields for name, fields in classes.items() if name in reached}
    options: dict[str, list[str]] = {}
    for entry in objects["trtllm-serve-serve"]:
        if entry[4].startswith("--"):
            options.setdefault(entry[3].removeprefix("cmdoption-trtllm-serve-serve-"), []).append(entry[4])
    live = [k for k, v in src["schema"]["properties"].items() if v.get("description") == LIVE_OBJECT]
    forbidden = sorted({name for key in live for name in (key, key.lstrip("_"))   # `_mpi_session` is `mpi_session`
                        if key in classes[TOP] or key.lstrip("_") in classes[TOP]})
    return {"label": f"TensorRT-LLM {PINNED}", "classes": classes, "top": TOP,
            "rules": {c: r for c, r in rules.items() if c in classes}, "yaml_forbidden": forbidden,
            "serve_flags": sorted({f for flags in options.values() for f in flags}),
            "cli_overlap": overlap(options, set(classes[TOP]), set(classes["KvCacheConfig"])),
            "keys_from": EXTRACT, "types_from": f"{SCHEMA} (for the fields it shares; others by name only)",
            "flags_from": EXTRACT}


def src_schema_title(src: dict[str, Any], cls: str, key: str) -> str | None:
    props = src["schema"]["properties"] if cls == TOP else src["schema"]["$defs"].get(cls, {}).get("properties", {})
    return props.get(key, {}).get("title")


def consistency(src: dict[str, Any], versions: dict[str, Any]) -> None:
    """Fail loudly when the sources disagree with what is derived from them."""
    committed = set(src["committed"]["methods"]["__init__"]["parameters"]) - {"kwargs"}
    for label, version in versions.items():
        missing = committed - set(version["classes"][TOP])
        if missing:
            raise SystemExit(f"{label}: committed LLM API parameters missing: {sorted(missing)}")
    rc12 = versions[PINNED]
    for name, playbook in src["playbooks"].items():
        for key, value in playbook.items():
            section = rc12["classes"][TOP].get(key)
            if section is None:
                raise SystemExit(f"{name}: {key} is not a 1.3.0rc12 key")
            if isinstance(value, dict) and section.get("section"):
                unknown = set(value) - set(rc12["classes"][section["section"]])
                if unknown:
                    raise SystemExit(f"{name}: {key}.{sorted(unknown)} not 1.3.0rc12 keys")


def derive() -> dict[str, Any]:
    src = load_sources()
    checked, flat = schema_classes(src["schema"])
    rules = validator_rules(src["extract"])
    versions = {PINNED: rc12_version(src, checked, flat, rules), NEW: new_version(src, checked, rules)}
    consistency(src, versions)
    return {"_header": {"generated_by": "scripts/trtllm_schema/derive.py (do not edit by hand)",
                        "regenerate": ".venv/bin/python scripts/trtllm_schema/derive.py",
                        "sources": source_list()},
            "counterparts": COUNTERPART, "pinned": PINNED, "versions": versions}


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUTPUT, help="where to write (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the file differs from the derivation")
    args = parser.parse_args(argv)
    text = render(derive())
    if args.check:
        same = args.out.exists() and args.out.read_text("utf-8") == text
        print(f"{args.out}: {'up to date' if same else 'differs from the sources; run derive.py'}")
        return 0 if same else 1
    args.out.write_text(text, "utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
