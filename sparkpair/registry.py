"""The registry of runtimes: every engine sparkpair can run, one line each, and the only list of their names.

A runtime is one module of `sparkpair.runtimes` (everything its engine needs that the others do not, behind
the `Runtime` protocol). This registry sits at the bottom of the layers so that whatever accepts a runtime's
name agrees without importing any engine: the CLI's `--runtime` choices (read when they are shown or parsed,
so `--help` imports no runtime), the inventory (a profile's `runtime`, the keys of its `variants` and of
`engines:`, the top-level `runtime`) and `runtimes.runtime_named`, which imports the module a line names.

A line also holds what the inventory fills in for the runtime when `engines.<name>` leaves it out: the image
and the container name it runs (None: the `container:` section's, as the first runtime's always were).
Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Registered:
    """One runtime: its name (the inventory's and the CLI's word), the module holding its `RUNTIME`
    (`sparkpair.runtimes.<name>`), and its default image and container name (None: `container.image` and
    `container.name`)."""

    name: str
    module: str
    image: str | None = None
    container: str | None = None


RUNTIMES: tuple[Registered, ...] = (
    Registered("trtllm", "sparkpair.runtimes.trtllm"),
    Registered("vllm", "sparkpair.runtimes.vllm", image="nvcr.io/nvidia/vllm:26.05-py3", container="vllm-multinode"),
    Registered("triton", "sparkpair.runtimes.triton", image="nvcr.io/nvidia/tritonserver:26.11-vllm-python-py3",
               container="triton-multinode"),
    Registered("sglang", "sparkpair.runtimes.sglang", image="lmsysorg/sglang:latest-cu130", container="sglang-multinode"),
)
NAMES: tuple[str, ...] = tuple(line.name for line in RUNTIMES)
DEFAULT = NAMES[0]   # a profile's runtime unless it names one; the runtime of a launch state that names none


def registered(name: str) -> Registered:
    """The registry's line for name; KeyError (naming the known ones) for a name it does not hold."""
    for line in RUNTIMES:
        if line.name == name:
            return line
    raise KeyError(f"no runtime {name!r}; known: {', '.join(NAMES)}")

