"""Loading the TensorRT-LLM allow-list (sparkpair/data/trtllm_allowlist.json).

The engine reads it from ``$SIM_ALLOWLIST``, else from ``trtllm_allowlist.json`` next to
the installed package (install.sh copies it there), else from the repository copy when
run from a checkout.
"""

import json
import os
from functools import lru_cache
from pathlib import Path

PACKAGE_PARENT = Path(__file__).resolve().parent.parent
INSTALLED_COPY = PACKAGE_PARENT / "trtllm_allowlist.json"
CHECKOUT_COPY = PACKAGE_PARENT.parent.parent.parent / "sparkpair" / "data" / "trtllm_allowlist.json"


def allowlist_path(env=None):
    """Which allow-list file the engine uses."""
    env = os.environ if env is None else env
    if env.get("SIM_ALLOWLIST"):
        return Path(env["SIM_ALLOWLIST"])
    return INSTALLED_COPY if INSTALLED_COPY.exists() else CHECKOUT_COPY


@lru_cache(maxsize=4)
def _load(path_text):
    with open(path_text) as handle:
        return json.load(handle)


def load_allowlist(env=None):
    """The parsed allow-list JSON."""
    return _load(str(allowlist_path(env)))


def speculative_section_name(allow, decoding_type):
    """The allow-list section that lists a decoding type's keys (``Draft_Target`` -> ``DraftTarget``)."""
    spec = allow["speculative_config"]
    if decoding_type in spec and isinstance(spec[decoding_type], dict):
        return decoding_type
    for name, section in spec.items():
        if isinstance(section, dict) and section.get("decoding_type_literal") == decoding_type:
            return name
    return None
