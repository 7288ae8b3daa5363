#!/usr/bin/env python3
"""Derive SGLang's own definitions as data from the real `sglang` package: what `python3 -m
sglang.launch_server` (`sglang serve`) accepts, and the metric names its `/metrics` publishes.

Run it with a Python that imports `sglang.srt.server_args` (the simulated pair's SGLang image, or a
throwaway venv holding the pinned wheel, see below); it asks SGLang itself, never a list of ours:
- the server options, from the parser SGLang builds for the server
  (`sglang/srt/server_args.py: prepare_server_args`, which calls `ServerArgs.add_cli_args`, itself
  `add_cli_args_from_dataclass` of `sglang/srt/arg_groups/arg_utils.py` over the fields declared in
  `sglang/srt/arg_groups/fields/*.py`, plus the options it registers by hand: dynamic choices,
  deprecated flags, `--config`): every long name, its dest, whether it takes a value, its type,
  choices, default and whether it is required;
- the fields of `ServerArgs` (a msgspec Struct assembled from those namespaces): name, annotation,
  default, namespace, the flags that set it (none for fields without a CLI surface);
- the Prometheus metrics, from `sglang/srt/observability/metrics_collector.py` read as source (its
  collectors are built only inside a running scheduler): every `Gauge`/`Counter`/`Histogram`/
  `Summary` whose `name=` is an `sglang:` literal, with its kind, documentation and the extra
  labels it names beside the collector's common ones (`model_name`, `engine_type`, and on the
  scheduler's `tp_rank`, `pp_rank`, `moe_ep_rank`).

`derive.py` writes sparkpair/data/sglang_server_args.json and sparkpair/data/sglang_metrics.json;
`--check` exits 1 when a committed file is not what this SGLang gives; `--out-dir DIR` writes
elsewhere.

Importing `sglang.srt.server_args` needs torch (sglang/__init__ -> sglang/srt/utils/common.py
imports torch and triton at module level) and a few light packages; nothing of CUDA runs. What
worked here (Python 3.11, pip's own configuration, 2026-11):
    python3 -m venv V && V/bin/pip install --no-deps sglang==0.5.23
    V/bin/pip install torch==2.13.0+cpu numpy orjson psutil pybase64 requests packaging pillow \
        starlette msgspec pydantic aiohttp pyzmq tqdm IPython
triton (the GPU kernel compiler, about 1 GB) is only imported by that module, never used by the
parser: when it is missing this script puts an empty module in its place (`triton_placeholder`).
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
# In a checkout: sparkpair/data/; a copy run elsewhere (inside an image) names --out-dir.
DATA = HERE.parents[2] / "sparkpair" / "data" if len(HERE.parents) > 2 else Path(".")
ARGS_FILE = "sglang_server_args.json"
METRICS_FILE = "sglang_metrics.json"
METRIC_KINDS = ("Gauge", "Counter", "Histogram", "Summary")
COLLECTOR_SOURCE = "sglang/srt/observability/metrics_collector.py"


def triton_placeholder() -> bool:
    """Put an empty `triton` module in sys.modules when triton is not installed; True when it did."""
    try:
        import triton  # noqa: F401
    except ImportError:
        sys.modules["triton"] = types.ModuleType("triton")
        return True
    return False


def plain(value: Any) -> Any:
    """VALUE as JSON holds it: JSON types as they are, sets sorted, anything else by its repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted(plain(item) for item in value)
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    return repr(value)


def type_name(kind: Any) -> str | None:
    """The name of an argparse `type=` callable (int, float, str, loads, SGLang's own parsers)."""
    return None if kind is None else getattr(kind, "__name__", repr(kind))


def server_options() -> dict[str, dict[str, Any]]:
    """Long option -> what SGLang's own parser says of it."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")  # as prepare_server_args builds it
    ServerArgs.add_cli_args(parser)
    options: dict[str, dict[str, Any]] = {}
    for action in parser._actions:  # noqa: SLF001 (argparse keeps its actions here; no public accessor)
        longs = [flag for flag in action.option_strings if flag.startswith("--") and flag != "--help"]
        for flag in longs:
            options[flag] = {
                "dest": action.dest,
                "aliases": [other for other in longs if other != flag],
                "value": action.nargs != 0,
                "nargs": action.nargs if action.nargs not in (None, 0) else None,
                "action": type(action).__name__,
                "type": type_name(action.type),
                "choices": sorted(str(c) for c in action.choices) if action.choices else None,
                "default": plain(action.default),
                "required": bool(action.required),
            }
    return dict(sorted(options.items()))


def annotation_text(annotation: Any) -> str:
    """A field's type without SGLang's CLI metadata: the inner type of `Annotated[T, Arg(...)]`, with
    classes by qualified name (no memory addresses, so the text is the same on every run)."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if isinstance(annotation, type):
        return annotation.__qualname__
    return re.sub(r"\b(?:typing|[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+)\.", "", str(annotation))


def server_fields(options: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """ServerArgs field -> annotation, default, namespace and the flags that set it."""
    import msgspec
    from sglang.srt.server_args import ServerArgs

    flags: dict[str, list[str]] = {}
    for flag, option in options.items():
        flags.setdefault(option["dest"], []).append(flag)
    namespaces = getattr(ServerArgs, "_NS_BY_FIELD", {})
    fields: dict[str, dict[str, Any]] = {}
    for field in msgspec.structs.fields(ServerArgs):
        default = field.default if field.default is not msgspec.NODEFAULT else None
        if field.default_factory is not msgspec.NODEFAULT:
            default = field.default_factory()
        namespace = namespaces.get(field.name)
        fields[field.name] = {
            "type": annotation_text(field.type),
            "default": plain(default),
            "required": field.required,
            "namespace": getattr(namespace, "__name__", None if namespace is None else str(namespace)),
            "flags": sorted(flags.get(field.name, [])),
        }
    return dict(sorted(fields.items()))


def metric_call(node: ast.Call) -> tuple[str, dict[str, Any]] | None:
    """(name, description) of a `Gauge(name="sglang:...", ...)`-like call, None for any other call."""
    kind = node.func.id if isinstance(node.func, ast.Name) else None
    if kind not in METRIC_KINDS:
        return None
    keywords = {kw.arg: kw.value for kw in node.keywords if kw.arg}
    name = keywords.get("name")
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value.startswith("sglang:")):
        return None
    documentation = keywords.get("documentation")
    labels = keywords.get("labelnames")
    extra = sorted({elt.value for elt in ast.walk(labels) if isinstance(elt, ast.Constant)
                    and isinstance(elt.value, str)}) if labels is not None else []
    return name.value, {"kind": kind.lower(),
                        "documentation": documentation.value if isinstance(documentation, ast.Constant) else None,
                        "common_labels": labels is not None and "labels" in ast.unparse(labels),
                        "extra_labels": extra, "line": node.lineno}


def metrics() -> dict[str, dict[str, Any]]:
    """Every sglang: metric the collector source declares (the first declaration of a name wins)."""
    import sglang

    source = Path(sglang.__file__).parent.parent / COLLECTOR_SOURCE
    found: dict[str, dict[str, Any]] = {}
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Call) and (hit := metric_call(node)):
            found.setdefault(hit[0], hit[1])
    return dict(sorted(found.items(), key=lambda item: item[1]["line"]))


def source(definitions: list[str]) -> dict[str, Any]:
    """Where the data comes from (triton: the installed distribution's version, or the placeholder's note)."""
    try:
        triton = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:  # this script's placeholder, or the SGLang image's
        triton = "empty placeholder module (not installed; only imported)"
    return {"package": "sglang", "version": importlib.metadata.version("sglang"),
            "definitions": definitions, "derived_by": "scripts/sglang_schema/derive.py", "triton": triton}


def derive() -> dict[str, str]:
    """File name -> the JSON text this SGLang gives."""
    triton_placeholder()
    options = server_options()
    args = {"source": source(["sglang/srt/server_args.py: prepare_server_args, ServerArgs.add_cli_args",
                              "sglang/srt/arg_groups/arg_utils.py: add_cli_args_from_dataclass",
                              "sglang/srt/arg_groups/fields/*.py: the ServerArgs namespaces"]),
            "prog": "sglang serve", "options": options, "fields": server_fields(options)}
    counters = metrics()
    for metric in counters.values():
        metric.pop("line")
    described = {"source": source([COLLECTOR_SOURCE + ": SchedulerMetricsCollector, TokenizerMetricsCollector "
                                   "and the other collectors (Gauge/Counter/Histogram/Summary name= literals)"]),
                 "exposition": "prometheus_client: a counter is exposed with the _total suffix (added when its "
                               "name lacks it), a histogram as _bucket/_sum/_count; published by /metrics only "
                               "with --enable-metrics",
                 "common_labels": ["model_name", "engine_type"],
                 "scheduler_labels": ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"],
                 "metrics": counters}
    return {ARGS_FILE: json.dumps(args, indent=1) + "\n", METRICS_FILE: json.dumps(described, indent=1) + "\n"}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a committed file differs")
    parser.add_argument("--out-dir", type=Path, default=DATA)
    args = parser.parse_args()
    texts = derive()
    stale = []
    for name, text in texts.items():
        path = args.out_dir / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"{', '.join(stale)}: not what this SGLang gives; run scripts/sglang_schema/derive.py", file=sys.stderr)
        return 1
    if args.check:
        version = json.loads(texts[ARGS_FILE])["source"]["version"]
        print(f"{', '.join(texts)}: match SGLang {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
