"""The engine's own secrets: the value of each secret option a profile sets (vLLM's `api_key`), how it reaches the
engine and how sparkpair uses it.

A runtime names its secret options and the variable its engine reads each from (`Runtime.secret_options`); the
runtime leaves them out of every argv and marks its serve commands to export them (`recipe.Start.secret_env`).
Here: their values (`values`), placed on every rank node as 0600 files beside the HF token (`place`), the bearer
credential sparkpair's own requests to the endpoint carry (`api_headers`), and every such value an inventory holds,
for the bundle's redaction (`known`). Nothing here prints or traces a value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkpair import paths
from sparkpair.runtimes import every_runtime

if TYPE_CHECKING:
    from sparkpair.inventory import Inventory
    from sparkpair.inventory.profiles import Profile
    from sparkpair.runtimes import Runtime
    from sparkpair.transport import Node, Pair

API_KEY_OPTION = "--api-key"  # the OpenAI-compatible servers' option for the key every request must carry


def _option(name: str) -> str:
    """A serve_args key or an option as one spelling: api_key, api-key and --api-key are the same option."""
    return name.removeprefix("--").replace("-", "_")


def values(runtime: Runtime, profile: Profile) -> dict[str, str]:
    """Environment variable -> value of each of the runtime's secret options the profile's serve_args sets."""
    wanted = {_option(option): env for option, env in runtime.secret_options.items()}
    return {wanted[_option(name)]: str(value) for name, value in profile.serve_args.items()
            if _option(name) in wanted and not isinstance(value, bool)}


def api_headers(runtime: Runtime, profile: Profile) -> dict[str, str]:
    """The Authorization header for the engine's endpoint when the profile gives it an API key, else nothing."""
    env = runtime.secret_options.get(API_KEY_OPTION)
    key = values(runtime, profile).get(env) if env else None
    return {"Authorization": f"Bearer {key}"} if key else {}


def launched_headers(inventory: Inventory, runtime: Runtime, profile_name: str) -> dict[str, str]:
    """api_headers of the launched profile (by its name in the launch state); nothing when the inventory no longer
    has it on that runtime."""
    try:
        return api_headers(runtime, inventory.profile(profile_name, runtime.name))
    except (KeyError, ValueError):
        return {}


def place(pair: Pair, nodes: list[str], secrets: dict[str, str]) -> None:
    """Each secret as a 0600 file named after its variable in every rank node's ~/.sparkpair/secrets (a 0700
    directory, mounted read-only in the engine container), written atomically; never in argv or a trace."""
    if not secrets:
        return

    def put(connection: Node) -> None:
        for env, value in secrets.items():
            connection.put(value + "\n", f"{paths.under_home(paths.SECRETS_DIR, connection.home)}/{env}", mode=0o600)

    pair.each(put, names=nodes).raise_failures()


def known(inventory: Inventory) -> list[str]:
    """Every secret option's value the inventory's profiles hold, on every runtime (the bundle redacts each wherever
    it appears)."""
    found: list[str] = []
    for name in inventory.profiles:
        for runtime in every_runtime():
            try:
                found += values(runtime, inventory.profile(name, runtime.name)).values()
            except (KeyError, ValueError):
                continue
    return found


def secret_option_names() -> list[str]:
    """Every runtime's secret options (the bundle redacts their values by name, whatever the value)."""
    return sorted({option for runtime in every_runtime() for option in runtime.secret_options})


def masked(data: object, secrets: list[str]) -> object:
    """data (JSON-like) with every string that is one of secrets replaced by [REDACTED] (`inventory show`)."""
    if isinstance(data, dict):
        return {key: masked(value, secrets) for key, value in data.items()}
    if isinstance(data, list):
        return [masked(value, secrets) for value in data]
    return "[REDACTED]" if isinstance(data, str) and data in secrets else data
