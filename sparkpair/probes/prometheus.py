"""Parse the Prometheus text format (trtllm-serve's /prometheus/metrics) into summed values."""

from __future__ import annotations

import re

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)")


def parse(text: str) -> dict[str, float]:
    """Metric name -> the sum of its samples over all label sets (comments skipped).

    Sample: trtllm_request_success_total{model_name="m"} 12.0
    """
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = SAMPLE.match(line.strip())
        if match:
            try:
                values[match.group(1)] = values.get(match.group(1), 0.0) + float(match.group(3))
            except ValueError:
                continue
    return values
