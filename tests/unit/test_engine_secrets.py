"""An engine's secret options never reach argv, and a profile cannot set what sparkpair sets (issue 33, item 5).

Before: `serve_args: {api_key: ...}` in a vLLM profile landed in the rendered launch.sh, every node's `vllm serve`
command line (`ps`), the "starting: ..." output, launch.json and the bundle (redaction missed `--api-key VALUE` and
vLLM's `non-default args: {... 'api_key': [...]}`); and `--spec-model`, `--spec-tokens`, `--config` or
`--data-parallel-size` in serve_args slipped past sparkpair's own settings. Now a runtime names its secret options
and the environment variable its engine reads each from (`Runtime.secret_options`: vLLM's `--api-key` is
`VLLM_API_KEY`): the value goes to every rank node as a 0600 file beside the HF token, the serve command exports it
from there, sparkpair's own requests to the endpoint send it as a bearer credential, and the bundle redacts it by
value and by option name. The options sparkpair owns are every flag of every serve line it builds, plus what vLLM
sets the same by other names.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from fakenode import FakeNode, fake_pair

from sparkpair.engine import bundle, credentials, launch, lifecycle, readiness
from sparkpair.inventory.load import parse_inventory
from sparkpair.render import recipe
from sparkpair.runtimes import render_profile, runtime_of, vllm
from sparkpair.transport.httpio import Reply

CANARY = "sk-canary-4f1d9a7e2b"
NODES = [{"name": "spark-a", "host": "198.18.0.11",
          "links": {"enp1s0f1np1": "198.19.1.11/24", "enP2p1s0f1np1": "198.19.2.11/24"}},
         {"name": "spark-b", "host": "198.18.0.12",
          "links": {"enp1s0f1np1": "198.19.1.12/24", "enP2p1s0f1np1": "198.19.2.12/24"}}]


def _inventory(serve_args: dict, multinode: str = "native"):  # type: ignore[no-untyped-def]
    return parse_inventory({"nodes": NODES, "vllm": {"multinode": multinode},
                            "models": {"qwen3-235b": {"variants": {"vllm": {"serve_args": serve_args}}}}}, "test.yaml")


def _profile(serve_args: dict, multinode: str = "native"):  # type: ignore[no-untyped-def]
    inventory = _inventory(serve_args, multinode)
    return inventory.for_runtime("vllm"), inventory.profile("qwen3-235b", "vllm")


@pytest.mark.parametrize("multinode", ["native", "ray"])
def test_an_api_key_is_in_no_command_line_and_every_serve_command_reads_it_from_its_file(multinode: str) -> None:
    inventory, profile = _profile({"api_key": CANARY, "max_model_len": 8192}, multinode)
    assert runtime_of(profile).problems(inventory, profile) == []
    starts = runtime_of(profile).starts(inventory, profile, ["spark-a", "spark-b"])
    assert all(CANARY not in " ".join(start.argv) and "--api-key" not in start.argv for start in starts)
    serving = [start for start in starts if start.argv[:2] == ["vllm", "serve"]]
    assert serving and all(start.secret_env == ("VLLM_API_KEY",) for start in serving)
    assert all(start.secret_env == () for start in starts if start.argv[:2] != ["vllm", "serve"])
    assert CANARY not in launch.command_line(starts)
    wrapper = " ".join(lifecycle.serve_wrapper(serving[0].argv, "serve", serving[0].secret_env))
    assert CANARY not in wrapper and f'VLLM_API_KEY="$(cat {recipe.SECRETS_DIR}/VLLM_API_KEY)"' in wrapper


def test_the_rendered_files_hold_no_api_key_and_launch_sh_says_where_it_comes_from() -> None:
    inventory = _inventory({"api_key": CANARY})
    files = render_profile(inventory, inventory.profile("qwen3-235b", "vllm"))
    assert not [item.path for item in files if CANARY in item.content]
    script = next(item.content for item in files if item.path.endswith("launch.sh"))
    assert f'VLLM_API_KEY="$(cat {recipe.SECRETS_DIR}/VLLM_API_KEY)"' in script


def test_the_key_goes_to_every_rank_node_as_a_private_file_and_sparkpair_sends_it_as_a_bearer() -> None:
    inventory, profile = _profile({"api_key": CANARY})
    runtime = runtime_of(profile)
    assert credentials.values(runtime, profile) == {"VLLM_API_KEY": CANARY}
    nodes = [FakeNode("spark-a"), FakeNode("spark-b", host="198.18.0.12")]
    credentials.place(fake_pair(*nodes), ["spark-a", "spark-b"], credentials.values(runtime, profile))
    for node in nodes:
        assert node.puts == [(f"{node.home}/.sparkpair/secrets/VLLM_API_KEY", f"{CANARY}\n".encode(), 0o600, False)]
        assert all(CANARY not in call.text for call in node.calls)
    head = FakeNode("spark-a")
    head.http_replies = {(8355, "GET", "/health"): Reply(200, "OK", b""), (8355, "GET", "/v1/models"): None}
    readiness.probe_stage(head, 8355, profile.target, credentials.api_headers(runtime, profile))
    assert head.http_headers[-1] == ("/v1/models", {"Authorization": f"Bearer {CANARY}"})
    assert credentials.api_headers(runtime_of(_profile({})[1]), _profile({})[1]) == {}


def test_the_bundle_redacts_the_key_by_value_and_by_option_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inventory = _inventory({"api_key": CANARY})
    monkeypatch.setattr(bundle.hftoken, "find_token", lambda: None)
    result = bundle.BundleResult(str(tmp_path / "b.tar.gz"))
    texts = [f"vllm serve m --api-key {CANARY}", "vllm serve m --api-key other-key-9f8e7d", f"plain {CANARY}",
             "non-default args: {'api_key': ['sk-some-other-key']}"]
    bundle._write(result, [bundle.Collected(f"x/{i}.txt", text, "x") for i, text in enumerate(texts)],
                  tmp_path / "b.tar.gz", "c", credentials.known(inventory))
    import tarfile

    with tarfile.open(tmp_path / "b.tar.gz") as archive:
        body = "".join(archive.extractfile(member).read().decode() for member in archive.getmembers()  # type: ignore[union-attr]
                       if member.name.endswith(".txt") and "MANIFEST" not in member.name)
    assert CANARY not in body and "other-key-9f8e7d" not in body and "sk-some-other-key" not in body


@pytest.mark.parametrize("option", ["spec_model", "spec_tokens", "spec_method", "config", "data_parallel_size",
                                    "data_parallel_size_local", "prefill_context_parallel_size", "model", "hf_token",
                                    "tensor_parallel_size", "nnodes", "headless", "master_addr", "port"])
def test_a_profile_cannot_set_what_sparkpair_sets_by_any_name(option: str) -> None:
    inventory, profile = _profile({option: "2" if option != "headless" else True})
    problems = runtime_of(profile).problems(inventory, profile)
    assert problems and f"serve_args.{option}:" in problems[0] and "set by sparkpair" in problems[0], problems


def test_what_sparkpair_owns_is_every_flag_of_the_serve_lines_it_builds() -> None:
    inventory, profile = _profile({})
    owned = vllm.RUNTIME.owned_flags(inventory, profile)
    built = set()
    for mode in ("native", "ray"):
        view, bare = _profile({}, mode)
        for start in vllm.RUNTIME.starts(view, dataclasses.replace(bare, serve_args={}), ["spark-a", "spark-b"]):
            built |= {arg for arg in start.argv if arg.startswith("--") and start.argv[:2] == ["vllm", "serve"]}
    assert built <= owned and {"--pipeline-parallel-size", "--speculative-config", "--headless"} <= owned
    assert "--max-model-len" not in owned and "--api-key" not in owned


@pytest.mark.parametrize("as_json", [False, True])
def test_inventory_show_masks_the_key(tmp_path: Path, example_inventory_path: Path, as_json: bool,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from sparkpair.cli import main

    data = yaml.safe_load(example_inventory_path.read_text())
    data["models"] = {"qwen3-235b": {"variants": {"vllm": {"serve_args": {"api_key": CANARY}}}}}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["-i", str(path), "inventory", "show", *(["--json"] if as_json else [])]) == 0
    out = capsys.readouterr().out
    assert CANARY not in out and "[REDACTED]" in out
