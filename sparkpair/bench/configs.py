"""The engine configurations a benchmark measures: the profile as launched, and its variants.

A variant is the same inventory with one more profile in `models:`, named after the original
(`qwen3-235b.draft4`, `qwen3-235b.nodraft`) and holding the original's resolved settings with
the draft length changed or the draft removed. Launching a variant therefore changes only the
engine's LLM-API config: containers and cached models are reused, and `sparkpair status` shows
honestly which variant runs while the benchmark is on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkpair.errors import UsageError
from sparkpair.inventory import Inventory, json_data, parse_inventory
from sparkpair.inventory.profiles import Profile, deep_merge, profile_sources
from sparkpair.runtimes import runtime_of

MAX_PROFILE_NAME = 48
NO_DRAFT = {"draft": None, "decoding_type": None, "max_draft_len": None, "draft_gib": 0.0}


@dataclass(frozen=True)
class EngineConfig:
    """One engine configuration to measure, and whether the engine must be relaunched for it."""

    label: str
    profile: str
    inventory: Inventory
    max_draft_len: int | None  # None: no speculative decoding
    relaunch: bool

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "profile": self.profile, "max_draft_len": self.max_draft_len,
                "relaunched": self.relaunch}


def launched_draft_len(profile: Profile) -> int | None:
    """The draft length the engine runs profile with (None without a draft), as its runtime keeps it:
    TensorRT-LLM's max_draft_len, vLLM's num_speculative_tokens."""
    return runtime_of(profile).draft_len(profile)


def variant_name(profile_name: str, suffix: str) -> str:
    """profile_name.suffix, shortened to fit the 48 characters a profile name may have."""
    return f"{profile_name[:MAX_PROFILE_NAME - len(suffix) - 1]}.{suffix}"


def variant_inventory(inventory: Inventory, profile_name: str, name: str, changes: dict[str, Any]) -> Inventory:
    """inventory plus a profile `name`: profile_name's resolved settings with changes merged in.

    Without a draft, any speculative_config an override put into engine_config goes too.
    """
    spec = deep_merge(profile_sources(inventory.models)[profile_name], changes)
    for runtime, variant in (spec.get("variants") or {}).items():  # the variant runs too: it changes the same way
        spec["variants"][runtime] = {**variant, **changes}
    if not spec.get("draft"):
        spec["engine_config"] = {k: v for k, v in (spec.get("engine_config") or {}).items() if k != "speculative_config"}
    data = json_data(inventory)
    data["models"] = {**data["models"], name: spec}
    return parse_inventory(data, f"bench variant {name} of {profile_name}")


def plan_configs(inventory: Inventory, profile_name: str, draft_lengths: list[int],
                 compare_baseline: bool) -> list[EngineConfig]:
    """The launched profile first, then each other draft length (ascending), then the baseline."""
    profile = inventory.profile(profile_name)
    launched = launched_draft_len(profile)
    if launched is None and (draft_lengths or compare_baseline):
        option = "--draft-len" if draft_lengths else "--compare-baseline"
        raise UsageError(f"{option}: profile {profile_name} has no draft model, so it has nothing to compare")
    label = f"draft {launched} (launched)" if launched is not None else "no draft (launched)"
    configs = [EngineConfig(label, profile_name, inventory, launched, relaunch=False)]
    for length in sorted(set(draft_lengths) - {launched}):
        if length > 16:
            raise UsageError(f"--draft-len: got {length}; a profile's max_draft_len goes up to 16")
        name = variant_name(profile_name, f"draft{length}")
        configs.append(EngineConfig(f"draft {length}", name, variant_inventory(
            inventory, profile_name, name, {"max_draft_len": length}), length, relaunch=True))
    if compare_baseline:
        name = variant_name(profile_name, "nodraft")
        changes = {**NO_DRAFT, "description": f"{profile.description} without its draft (sparkpair bench baseline)"}
        configs.append(EngineConfig("no draft", name, variant_inventory(inventory, profile_name, name, changes),
                                    None, relaunch=True))
    return configs
