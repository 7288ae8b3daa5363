"""The inventory: the one file that describes the pair, its schema, its loading and its profiles.

Holds `schema` (the records of the file), `validation` (what each field accepts, every problem
found, JSON data and JSON Schema), `load` (safe YAML, then validation), `messages` (one-line
errors), `profiles` (NVIDIA's recipes and the inventory's overrides) and `hftoken` (where the
operator's Hugging Face token comes from). May import `sparkpair.errors` only: everything else
builds on it, it builds on nothing.
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
