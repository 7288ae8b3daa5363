"""The inventory: the one file that describes the pair, its schema, its loading and its profiles.

Holds `schema` (the records of the file), `validation` (what each field accepts, every problem
found, JSON data and JSON Schema), `load` (safe YAML, then validation), `messages` (one-line
errors), `topology` (how the nodes are cabled: the expected links, and what is wrong with them),
`profiles` (NVIDIA's recipes and the inventory's overrides) and `hftoken` (where the
operator's Hugging Face token comes from). May import: only the layers below its own in pyproject.toml's `[tool.importlinter]`
(`errors` and the other leaf modules): everything else builds on it, it builds on nothing.
"""

from sparkpair.inventory.load import (
           DEFAULT_PATH,
           ENV_VAR,
           load_yaml_mapping,
           parse_inventory,
           read_inventory,
)
from sparkpair.inventory.profiles import Profile
from sparkpair.inventory.schema import Cluster, Container, Inventory, Node, Server
from sparkpair.inventory.validation import json_data, record_schema

__all__ = ["DEFAULT_PATH", "ENV_VAR", "Cluster", "Container", "Inventory", "Node", "Profile", "Server",
           "json_data", "load_yaml_mapping", "parse_inventory", "read_inventory", "record_schema"]
