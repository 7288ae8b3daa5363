"""Playbook drift: where the inventory or the profile departs from what NVIDIA's DGX Spark playbooks pin.

The playbooks' values are a sourced snapshot, `sparkpair/data/playbooks.json`: per runtime (under the key
its `Runtime.playbook` names; a runtime no playbook pins gets INFO rows saying so) the image and the
container environment, per recipe (a target model on a runtime) the model, the serve flags and the
engine's own configuration (`Runtime.engine_settings`), and Connect Two Sparks' addressing. The judge is
pure (the inventory and the profile in, findings out; no node is asked): it compares what sparkpair would
run, as the runtime renders it, with those values. A departure is INFO when its reason is recorded
(sparkpair's own, from the snapshot's `reasons`, the same text as docs/profiles.md; or the operator's,
from the inventory's `playbook_reasons`), and WARN naming both values and the fix when it is not.
sparkpair's own reason holds only while the value is sparkpair's default: an inventory override needs the
operator's reason.
With more than two nodes the rows about every node are `cluster` rows, and in a ring a rank node's
environment value that is only what the ring asks (every QSFP interface its links use, or its twin toward
the head) is explained by the ring's reasons, the same text as docs/cluster.md (`TOPOLOGY_GROUPS`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

from sparkpair import registry
from sparkpair.checks import Facts, Finding, info, ok, warn, whole
from sparkpair.inventory import Container, Inventory, Node
from sparkpair.inventory.profiles import BUILTIN_PROFILES, Profile, engine_config_key, profile_sources
from sparkpair.render import recipe
from sparkpair.runtimes import runtime_of

DATA = "playbooks.json"
GROUPS = {"runtimes": ("image", "env"), "recipes": ("model", "flags", "config"), "addressing": ("nodes", "mtu")}
SOURCE_FIELDS = ("repo", "path", "commit", "url")
NOT_SET = "(not set)"
NO_SECOND_TWIN = "<no second twin>"   # what a playbook's {twin1} reads on a node with one twin
REASONS_DOC = "docs/profiles.md"     # where sparkpair's own reasons are written, but the topologies'
# The reason groups of what a ring asks of a rank node's environment, and where they are written.
TOPOLOGY_GROUPS = {"ring": "docs/cluster.md", "ring-head": "docs/cluster.md", "ring-mpi": "docs/cluster.md"}
# Flags every runtime's engine gets from elsewhere than serve_args: how to give them the playbook's value (each
# runtime adds its own: Runtime.playbook_fixes).
SET_ELSEWHERE = {"flags.port": "set server.port: {value}", "flags.host": "sparkpair passes --host itself"}


@cache
def snapshot() -> dict[str, Any]:
    """The playbooks' values, their sources and sparkpair's reasons, as packaged."""
    data: dict[str, Any] = json.loads(resources.files("sparkpair.data").joinpath(DATA).read_text())
    return data


def snapshot_problems(data: Mapping[str, Any]) -> list[str]:
    """Every value group of data that does not name its source (a playbook in `sources` with repo, path,
    commit and URL, and the section it was copied from), and every reason without keys or text; [] when
    the snapshot is whole."""
    sources = data.get("sources", {})
    problems = [f"sources.{name}: no {field}" for name, source in sources.items() for field in SOURCE_FIELDS
                if not str(source.get(field, "")).strip()]
    problems += [f"sources.{name}: url {source['url']!r} is not https" for name, source in sources.items()
                 if not str(source.get("url", "")).startswith("https://")]
    for section, kinds in GROUPS.items():
        holders = data.get(section, {}) if section == "addressing" else None
        entries = {"": holders} if holders is not None else data.get(section, {})
        for name, entry in entries.items():
            for kind in kinds:
                where = ".".join(part for part in (section, name, kind) if part)
                group = entry.get(kind)
                if group is None:
                    continue
                if not isinstance(group, dict) or "value" not in group:
                    problems.append(f"{where}: a value group needs value, source and where")
                    continue
                if group.get("source") not in sources:
                    problems.append(f"{where}: source {group.get('source')!r} is none of sources ({', '.join(sources)})")
                if not str(group.get("where", "")).strip():
                    problems.append(f"{where}: no where (the section of the playbook it was copied from)")
    for group_name, rows in data.get("reasons", {}).items():
        for index, row in enumerate(rows):
            if not row.get("keys") or not str(row.get("why", "")).strip():
                problems.append(f"reasons.{group_name}[{index}]: needs keys and why")
    return problems


@dataclass(frozen=True)
class Departure:
    """One value sparkpair would run that is not the playbook's. `ours_by_default`: it is what sparkpair
    runs without any inventory override (so sparkpair's own reason may explain it)."""

    check: str
    node: str
    key: str
    ours: str
    theirs: str
    where: str
    ours_by_default: bool
    fix: str
    group: str = ""     # the reasons of the topology that explain it first (TOPOLOGY_GROUPS), when any


def shown(value: Any) -> str:
    """A value as the playbook writes it: true/false, numbers and strings as they are, NOT_SET for None."""
    if value is None:
        return NOT_SET
    return str(value).lower() if isinstance(value, bool) else str(value)


def flattened(tree: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested mapping as dotted keys: {"a": {"b": 1}} -> {"a.b": "1"}."""
    flat: dict[str, str] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat |= flattened(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = shown(value)
    return flat


def source_of(group: Mapping[str, Any]) -> str:
    """Where a value group was copied from: the playbook file at its commit and the section."""
    source = snapshot()["sources"][group["source"]]
    return f"{source['path']}@{source['commit'][:7]}, {group['where']}"


def baseline(inventory: Inventory, profile: Profile) -> tuple[Inventory, Profile | None]:
    """The inventory with no override sparkpair's defaults would replace (images, the container's and each
    engine's environment, models, serving port), and the built-in profile as sparkpair ships it (None for a
    profile the inventory defines, or a built-in without a variant for the runtime)."""
    engines = {name: replace(section, image=None, env={}) for name, section in inventory.engines.items()}
    base = replace(inventory, container=replace(inventory.container, image=Container().image, env={}),
                   engines=engines, models={}, server=replace(inventory.server, port=type(inventory.server)().port))
    base = base.for_runtime(profile.runtime)
    if profile.name not in BUILTIN_PROFILES:
        return base, None
    try:
        return base, base.profile(profile.name, profile.runtime)
    except KeyError:
        return base, None


def compared(check: str, node: str, ours: Mapping[str, str], default: Mapping[str, str] | None,
             theirs: Mapping[str, str], group: Mapping[str, Any], prefix: str, setting: str) -> list[Departure]:
    """The departures of ours from theirs, key by key (a key either lacks counts), as `prefix.key`; each
    fix says to set `setting.key` to the playbook's value (or to remove it)."""
    found = []
    for key in sorted(set(ours) | set(theirs)):
        mine, playbook = ours.get(key, NOT_SET), theirs.get(key, NOT_SET)
        if mine != playbook:
            fix = f"remove {setting}.{key}" if playbook == NOT_SET else f"set {setting}.{key}: {playbook}"
            found.append(Departure(check, node, f"{prefix}{key}", mine, playbook, source_of(group),
                                   default is not None and default.get(key, NOT_SET) == mine, fix))
    return found


def twin_values(template: str, inventory: Inventory, node: Node) -> str:
    """A playbook value with its placeholders filled from the inventory: the twins of the cabled port, the
    node's own and the head's address on the first twin."""
    twins = list(node.links) + [NO_SECOND_TWIN]
    filled = {"{twin0}": twins[0], "{twin1}": twins[1], "{own_twin0_ip}": str(next(iter(node.links.values())).ip),
              "{head_twin0_ip}": str(next(iter(inventory.head.links.values())).ip)}
    for placeholder, value in filled.items():
        template = template.replace(placeholder, value)
    return template


def env_departures(facts: Facts, base: Inventory) -> list[Departure]:
    """Each rank node's container environment against the runtime's playbook: the variables it pins, and
    any other variable of the families those belong to (NCCL_, UCX_, OMPI_, ...)."""
    runtime = runtime_of(facts.profile)
    group = snapshot()["runtimes"][str(runtime.playbook)]["env"]
    families = tuple(snapshot()["compare"]["env_families"])
    found = []
    nodes = {node.name: node for node in facts.inventory.nodes}
    base_nodes = {node.name: node for node in base.nodes}
    for name in facts.rank_nodes():
        node = nodes[name]

        def governed(env: Mapping[str, str]) -> dict[str, str]:
            return {key: value for key, value in env.items() if key in group["value"] or key.startswith(families)}

        ours = governed(runtime.container_env(facts.inventory, node, None))
        default = governed(runtime.container_env(base, base_nodes[name], None))
        theirs = {key: twin_values(value, facts.inventory, node) for key, value in group["value"].items()}
        found += [replace(d, group=topology_group(facts.inventory, node, d.ours))
                  for d in compared("playbook.env", name, ours, default, theirs, group, "env.",
                                    facts.inventory.setting(runtime.name, "env"))]
    both_twins = "give each node both twins of the cabled port in nodes[].links, as the playbook"
    found = [replace(d, fix=both_twins) if NO_SECOND_TWIN in d.theirs else d for d in found]
    return merged_across_nodes(found, len(facts.rank_nodes()), facts.whole)


def topology_group(inventory: Inventory, node: Node, ours: str) -> str:
    """The ring's reason group for a rank node's environment value that is only what a ring asks of it: every
    QSFP interface its links use (`ring`: both ports, each cabled to a neighbour), or its own twin toward the
    head or that twin's address (`ring-head`: a worker's first twin may be cabled to the other worker), or
    OpenMPI's TCP interfaces, one twin per port (`ring-mpi`, `recipe.mpi_tcp_interfaces`); "" for
    any other value and any other topology (two nodes as always)."""
    if inventory.topology != "ring":
        return ""
    if sorted(ours.split(",")) == sorted(node.links):
        return "ring"
    if ours == recipe.mpi_tcp_interfaces(inventory):
        return "ring-mpi"
    toward = recipe.ports_toward_head(inventory, node)[1]
    return "ring-head" if ours in (toward, str(node.links[toward].ip)) else ""


def merged_across_nodes(found: list[Departure], nodes: int, label: str = "pair") -> list[Departure]:
    """Departures the same on every rank node as one departure labelled label (`Facts.whole`); the others
    per node."""
    alike: dict[tuple[str, str, str], list[Departure]] = {}
    for departure in found:
        alike.setdefault((departure.key, departure.ours, departure.theirs), []).append(departure)
    merged = []
    for same in alike.values():
        merged += [replace(same[0], node=label)] if nodes > 1 and len(same) == nodes else same
    return merged


def serve_flags(inventory: Inventory, profile: Profile, nodes: list[str]) -> dict[str, str]:
    """The serving node's engine flags as the runtime starts it: every `--name [value]` after the model."""
    runtime = runtime_of(profile)
    argv = next(start.argv for start in runtime.starts(inventory, profile, nodes) if start.serves)
    models = {profile.target, recipe.model_link(profile.target)}
    tail = argv[next((i for i, arg in enumerate(argv) if arg in models), len(argv)) + 1:]
    ignored = snapshot()["compare"]["ignored_flags"].get(runtime.playbook, {})
    flags: dict[str, str] = {}
    for index, arg in enumerate(tail):
        if arg.startswith("--"):
            value = tail[index + 1] if index + 1 < len(tail) and not tail[index + 1].startswith("--") else "true"
            if arg[2:] not in ignored:
                flags[arg[2:]] = value
    return flags


def recipe_of(profile: Profile) -> tuple[str, dict[str, Any]] | None:
    """The playbook recipe the profile follows: the one serving its target on its runtime, else (a pair
    profile) the runtime's two-Spark recipe; None for a one-Spark profile no playbook serves."""
    recipes = snapshot()["recipes"]
    for name, candidate in recipes.items():
        if candidate["runtime"] == runtime_of(profile).playbook and candidate["model"]["value"]["target"] == profile.target:
            return name, candidate
    if profile.is_pair:
        name = snapshot()["runtimes"][runtime_of(profile).playbook]["pair_recipe"]
        return name, recipes[name]
    return None


def override_path(inventory: Inventory, profile: Profile) -> str:
    """Where the inventory sets the profile's engine settings on its runtime: models.NAME, or
    models.NAME.variants.RUNTIME when the profile runs on a runtime other than its own."""
    own = profile_sources(inventory.models).get(profile.name, {}).get("runtime", registry.DEFAULT)
    return f"models.{profile.name}" + (f".variants.{profile.runtime}" if profile.runtime != own else "")


def engine_config_path(inventory: Inventory, profile: Profile) -> str:
    """Where the inventory sets the profile's engine configuration: override_path's engine_config, or its former
    name llm_api when that is what the inventory writes there."""
    override: object = inventory.models.get(profile.name, {})
    if override_path(inventory, profile).endswith(f".variants.{profile.runtime}") and isinstance(override, dict):
        variants = override.get("variants")
        override = variants.get(profile.runtime, {}) if isinstance(variants, dict) else {}
    return f"{override_path(inventory, profile)}.{engine_config_key(override)}"


def recipe_departures(facts: Facts, base: Inventory, base_profile: Profile | None,
                      followed: dict[str, Any]) -> list[Departure]:
    """The profile's model, serve flags and engine configuration (TensorRT-LLM's YAML) against the recipe's."""
    profile, nodes = facts.profile, facts.rank_nodes()
    where = override_path(facts.inventory, profile)
    ours_model = {"target": shown(profile.target), "draft": shown(profile.draft)}
    default_model = {"target": shown(base_profile.target), "draft": shown(base_profile.draft)} if base_profile else None
    found = compared("playbook.model", facts.whole, ours_model, default_model, flattened(followed["model"]["value"]),
                     followed["model"], "model.", where)
    default_flags = serve_flags(base, base_profile, nodes) if base_profile else None
    found += compared("playbook.flags", facts.whole, serve_flags(facts.inventory, profile, nodes), default_flags,
                      followed["flags"]["value"], followed["flags"], "flags.", f"{where}.serve_args")
    if "config" in followed:
        ignored = snapshot()["compare"]["ignored_config"]

        def yaml_keys(of: Profile) -> dict[str, str]:
            return {k: v for k, v in flattened(runtime_of(of).engine_settings(of)).items() if k not in ignored}

        found += compared("playbook.flags", facts.whole, yaml_keys(profile), yaml_keys(base_profile) if base_profile else None,
                          flattened(followed["config"]["value"]), followed["config"], "config.",
                          engine_config_path(facts.inventory, profile))
    elsewhere = {**SET_ELSEWHERE, **runtime_of(profile).playbook_fixes}
    return [replace(d, fix=elsewhere[d.key].format(value=d.theirs, profile=where)) if d.key in elsewhere
            else d for d in found]


def addressing_departures(inventory: Inventory) -> list[Departure]:
    """The twins' addresses (by node and twin order) and the MTU against Connect Two Sparks'."""
    pinned = snapshot()["addressing"]
    theirs = "; ".join(", ".join(twins) for twins in pinned["nodes"]["value"])
    ours = "; ".join(", ".join(str(address) for address in node.links.values()) for node in inventory.nodes)
    example = "; ".join(f"{node.name}: " + ", ".join(f"{twin} {address}" for twin, address
                                                     in zip(node.links, twins, strict=False))
                        for node, twins in zip(inventory.nodes, pinned["nodes"]["value"], strict=False))
    found, label = [], whole(len(inventory.nodes))
    if ours != theirs:
        found.append(Departure("playbook.addressing", label, "addressing.addresses", ours, theirs,
                               source_of(pinned["nodes"]), False, f"nodes[].links as the playbook ({example})"))
    mtu = pinned["mtu"]
    if inventory.cluster.mtu != mtu["value"]:
        found.append(Departure("playbook.addressing", label, "addressing.mtu", str(inventory.cluster.mtu),
                               str(mtu["value"]), source_of(mtu), inventory.cluster.mtu == type(inventory.cluster)().mtu,
                               f"cluster.mtu: {mtu['value']}"))
    return found


def reasons_of(group: str) -> dict[str, str]:
    """sparkpair's own reasons of one table of docs/profiles.md (a runtime's, or `network`), by key."""
    return {key: row["why"] for row in snapshot()["reasons"].get(group, []) for key in row["keys"]}


def verdict(departure: Departure, ours_why: Mapping[str, str], operators_why: Mapping[str, str],
            doc: str = REASONS_DOC) -> Finding:
    """INFO with the recorded reason (sparkpair's, written in doc; or the operator's), or WARN naming both
    values and the fix."""
    said = (f"{departure.key}: {departure.ours} here; {departure.theirs} in {departure.where}")
    if departure.ours_by_default and departure.key in ours_why:
        return info(departure.check, departure.node, f"{said}. Why ({doc}): {ours_why[departure.key]}")
    if departure.key in operators_why:
        return info(departure.check, departure.node, f"{said}. Why (playbook_reasons): {operators_why[departure.key]}")
    return warn(departure.check, departure.node, f"{said}; no reason recorded",
                f"{departure.fix}; or record why in the inventory: playbook_reasons: {{{departure.key}: ...}}")


def judged(departures: list[Departure], facts: Facts, group: str) -> Iterator[Finding]:
    """Each departure's verdict by the reasons of group, or first by its topology's when they name its key."""
    operators = facts.inventory.playbook_reasons
    for departure in departures:
        topology = reasons_of(departure.group) if departure.group else {}
        if departure.key in topology:
            yield verdict(departure, topology, operators, TOPOLOGY_GROUPS[departure.group])
        else:
            yield verdict(departure, reasons_of(group), operators)


def check_playbook(facts: Facts) -> Iterable[Finding]:
    """The drift of the inventory and the profile from NVIDIA's playbooks: one row per departure (INFO
    with its reason, or WARN), one OK row per kind of value that departs nowhere."""
    inventory, profile = facts.inventory, facts.profile
    runtime = runtime_of(profile)
    key = runtime.playbook
    if key is None or key not in snapshot()["runtimes"]:
        for check in ("playbook.image", "playbook.env", "playbook.flags"):
            yield info(check, facts.whole, f"no NVIDIA playbook of {runtime.title} is recorded in sparkpair's "
                                           "snapshot (data/playbooks.json): nothing to compare")
        yield from _addressing(facts)
        return
    base, base_profile = baseline(inventory, profile)
    pinned = snapshot()["runtimes"][key]
    image = pinned["image"]
    if inventory.container.image == image["value"]:
        yield ok("playbook.image", facts.whole, f"{image['value']}, as {source_of(image)}")
    else:
        yield from judged([Departure("playbook.image", facts.whole, "image", inventory.container.image, image["value"],
                                     source_of(image), inventory.container.image == base.container.image,
                                     f"set {inventory.setting(runtime.name, 'image')}: {image['value']}")],
                           facts, key)
    if not profile.is_pair:
        yield ok("playbook.env", facts.whole, "the profile runs on one Spark: the playbooks pin the engine container's "
                                         "environment for two Sparks only")
    elif env := env_departures(facts, base):
        yield from judged(env, facts, key)
    else:
        yield ok("playbook.env", facts.whole, f"{', '.join(pinned['env']['value'])} as {source_of(pinned['env'])}")
    found = recipe_of(profile)
    if found is None:
        yield ok("playbook.flags", facts.whole, f"no playbook serves {profile.target} on {profile.runtime} on one Spark: "
                                           "the profile's engine settings are its own")
    else:
        name, followed = found
        engine = recipe_departures(facts, base, base_profile, followed)
        yield from judged(engine, facts, key)
        checked = {departure.check for departure in engine}
        if "playbook.model" not in checked:
            yield ok("playbook.model", facts.whole, f"{profile.target}, as {source_of(followed['model'])}")
        if "playbook.flags" not in checked:
            yield ok("playbook.flags", facts.whole, f"the flags and engine settings of {name}, as "
                                               f"{source_of(followed['flags'])}")
    yield from _addressing(facts)


def _addressing(facts: Facts) -> Iterator[Finding]:
    """The addressing rows: each departure from Connect Two Sparks, or one OK row."""
    addressing = addressing_departures(facts.inventory)
    yield from judged(addressing, facts, "network")
    if not addressing:
        yield ok("playbook.addressing", facts.whole, f"twins' addresses and MTU as {source_of(snapshot()['addressing']['nodes'])}")
