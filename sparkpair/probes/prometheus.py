"""Parse the Prometheus text format (trtllm-serve's /prometheus/metrics) into summed values."""

from __future__ import annotations

import math
import re

TEXT_CAP = 8 << 20   # bytes of /prometheus/metrics read (trtllm-serve's is tens of KiB)
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)")


def parse(text: str) -> dict[str, float]:
    """Metric name -> the sum of its finite samples over all label sets (comments, NaN and infinities skipped).

    Sample: trtllm_request_success_total{model_name="m"} 12.0
    """
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = SAMPLE.match(line.strip())
        if match:
            try:
                value = float(match.group(3))
            except ValueError:
                continue
            if math.isfinite(value):
                values[match.group(1)] = values.get(match.group(1), 0.0) + value
    return values
