"""A throwaway third runtime, `third`, written only against the seam (`sparkpair.runtimes.Runtime`) to prove it:
its own inventory options, profile settings checked by its own definitions, a server that is not OpenAI's
(Triton's KServe-style paths: /v2/health/ready, /v2/models/<m>/ready, /v2/models/<m>/generate), Prometheus on a
port of its own, a model repository among its config files, no draft counters, its own stages and stall limits,
its own failure lines, no playbook. tests/unit/test_seam_third_runtime.py registers it with one registry line."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sparkpair.inventory.schema import PORT
from sparkpair.inventory.validation import Choice, spec
from sparkpair.jsonfields import Field
from sparkpair.render import RenderedFile, recipe
from sparkpair.render.recipe import Start
from sparkpair.runtimes import FailureLine, Metrics, Request, ServingApi, StageSpec, Watch, engine_options

if TYPE_CHECKING:
    from sparkpair.inventory import Inventory, Node
    from sparkpair.inventory.profiles import Profile

KNOWN_FLAGS = ("max_batch", "log_verbose")     # its "own definitions"
KNOWN_CONFIG = ("instance_count",)


@dataclass(frozen=True, kw_only=True)
class ThirdOptions:
    """engines.third.options."""

    metrics_port: int = spec(PORT, 8002)
    backend: str = spec(Choice("vllm", "python"), "vllm")


class KServeApi:
    """Triton-like: readiness paths of its own, a generation with text_input/text_output."""

    base = "/v2"
    health = "/v2/health/ready"
    generation_words = "a generation"
    stream_end: str | None = None
    token_counts = "total"

    def models(self, model: str) -> str:
        return f"/v2/models/{model.replace('/', '--')}/ready"

    def served(self, body: bytes, model: str) -> list[str]:
        return [model]  # a 200 from the model's ready path

    def ready_request(self, model: str) -> Request:
        return Request(f"/v2/models/{model.replace('/', '--')}/generate",
                       {"text_input": "Reply with one word: ready", "parameters": {"max_tokens": 8}})

    def ready_text(self, body: bytes) -> str:
        return Field.parse(body, "generate").get("text_output").text(default="")

    def token_request(self, model: str) -> Request:
        return Request(f"/v2/models/{model.replace('/', '--')}/generate",
                       {"text_input": "ping", "parameters": {"max_tokens": 1}})

    def token_text(self, body: bytes) -> str:
        return Field.parse(body, "generate").get("text_output").text()

    def stream_request(self, model: str, messages: list[dict[str, str]], max_tokens: int) -> Request:
        return Request(f"/v2/models/{model.replace('/', '--')}/generate_stream",
                       {"text_input": messages[-1]["content"], "parameters": {"max_tokens": max_tokens}})

    def stream_text(self, event: Field) -> str:
        return event.get("text_output").text(default="")

    def stream_tokens(self, event: Field) -> int | None:
        return None


class Third:
    name = "third"
    title = "Third Engine"
    process_pattern = r"third-serve"
    metrics = Metrics("/metrics", requests="third_requests_total")   # no draft counters at all
    stages: tuple[StageSpec, ...] = (
        StageSpec("boot", "third-serve started", (r"\bthird-serve booting\b",), "boot", 45.0),
        StageSpec("model", "loading the model", (r"\bthird loading\b",), "model load", 77.0),
        StageSpec("serving", "ready", (r"\bthird ready\b",), "server start", 30.0),
    )
    watch = Watch(every_s=2.0, exit_every_s=1.0, first_s=0.5)
    api: ServingApi = KServeApi()
    options_record: type[Any] = ThirdOptions
    render_dir = "third"
    playbook: str | None = None
    playbook_fixes: Mapping[str, str] = {}
    cause_fixes: Mapping[str, str] = {"memory.oom": "lower instance_count under the profile's engine_config"}
    failure_lines: tuple[FailureLine, ...] = (   # lines only it prints (hand-made: a throwaway engine's)
        FailureLine("memory.kvcache", r"\bthird-serve: KV pool of \d+ blocks cannot hold max_batch\b"),
        FailureLine("engine.died", r"\bthird worker \d+ vanished\b", "hint"),
    )
    fabric_proof = False
    secret_options: Mapping[str, str] = {}

    def image(self, inventory: Inventory) -> str:
        return inventory.engine(self.name).image or inventory.container.image

    def container_name(self, inventory: Inventory) -> str:
        return inventory.engine(self.name).name or inventory.container.name

    def container_env(self, inventory: Inventory, node: Node, fabric: recipe.NodeFabric | None) -> dict[str, str]:
        return {"THIRD_NODE": node.name, **inventory.engine(self.name).env, **inventory.container.env}

    def container_spec(self, inventory: Inventory, node: Node, home: str, *, gpus: bool, infiniband: bool,
                       fabric: recipe.NodeFabric | None) -> recipe.ContainerSpec:
        spec_ = recipe.container_spec(inventory, node, home, gpus=gpus, infiniband=infiniband, fabric=fabric)
        return replace(spec_, image=self.image(inventory), name=self.container_name(inventory),
                       env=self.container_env(inventory, node, fabric))

    def config_files(self, inventory: Inventory, profile: Profile, node: Node,
                     fabric: recipe.NodeFabric | None) -> list[RenderedFile]:
        model = profile.target.replace("/", "--")
        return [RenderedFile("container.env", f"THIRD_NODE={node.name}\n"),
                RenderedFile(f"model_repository/{model}/config.pbtxt", f'backend: "{options(inventory).backend}"\n'),
                RenderedFile(f"model_repository/{model}/1/model.json", json.dumps({"model": profile.target}) + "\n")]

    def rendered(self, inventory: Inventory, profile: Profile) -> list[RenderedFile]:
        return self.config_files(inventory, profile, inventory.head, None)

    def starts(self, inventory: Inventory, profile: Profile, nodes: list[str]) -> list[Start]:
        port = str(options(inventory).metrics_port)
        return [Start(node, ["third-serve", "--rank", str(rank), "--metrics-port", port], serves=rank == 0)
                for rank, node in enumerate(nodes)]

    def problems(self, inventory: Inventory, profile: Profile) -> list[str]:
        return [f"serve_args.{key}: third-serve has no flag {key}" for key in profile.serve_args
                if key not in KNOWN_FLAGS] + \
               [f"engine_config.{key}: third has no setting {key}" for key in profile.engine_config
                if key not in KNOWN_CONFIG]

    def engine_settings(self, profile: Profile) -> dict[str, Any]:
        return dict(profile.engine_config)

    def draft_len(self, profile: Profile) -> int | None:
        return None

    def metrics_port(self, inventory: Inventory) -> int:
        port: int = options(inventory).metrics_port
        return port

    def other_ports(self, inventory: Inventory) -> dict[int, str]:
        return {}

    def rank_log_paths(self, rank: int | None) -> list[str]:
        return [f"{recipe.LOG_DIR}/serve.log"]

    def launcher_log(self, ranks: int) -> str | None:
        return None

    def image_needs(self, inventory: Inventory) -> tuple[str, ...]:
        return ("third-serve",)

    def image_needs_fix(self, inventory: Inventory, missing: list[str]) -> tuple[str, str]:
        return self.name, f"an image with third-serve ({inventory.setting(self.name, 'image')})"

    def cluster_script(self, inventory: Inventory) -> str | None:
        return None

    def stop_script(self) -> str:
        return "pkill -TERM -f '[t]hird-serve'; true"

    def kill_script(self) -> str:
        return "pkill -KILL -f '[t]hird-serve'; true"


def options(inventory: Inventory) -> ThirdOptions:
    found: ThirdOptions = engine_options(inventory, RUNTIME)
    return found


RUNTIME = Third()
