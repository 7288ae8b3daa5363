"""train-draft's pure parts: the prompt file as hostile input, the held-back split, the generated answer read
typed, the training's progress lines, the container command, the draft checked against its target, the
node-side installer (run here on temporary folders), the evaluation's draft override."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fakenode import FakeNode, Reply, prefix

from sparkpair.draft import data, evaluate, export, train
from sparkpair.errors import UsageError
from sparkpair.inventory.load import parse_inventory
from sparkpair.jsonfields import ShapeError


def _prompts(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_bundled_prompts_split_into_training_and_held_back() -> None:
    split = data.split(data.read_prompts(None))
    assert split.held_back and split.train
    assert not any(m in split.train for m in split.held_back)
    assert len(split.train) + len(split.held_back) == len(data.read_prompts(None).messages)


def test_two_prompts_give_one_to_train_on_and_one_held_back(tmp_path: Path) -> None:
    split = data.split(data.read_prompts(_prompts(tmp_path, ['{"prompt": "a"}', '{"prompt": "b"}'])))
    assert len(split.train) == 1 and len(split.held_back) == 1


def test_a_prompt_file_past_the_cap_is_refused_before_it_is_read(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(data, "PROMPTS_CAP", 100)
    path = _prompts(tmp_path, ['{"prompt": "' + "x" * 200 + '"}'])
    with pytest.raises(UsageError, match="more than 100"):
        data.read_prompts(path)


def test_a_symlinked_prompt_file_is_refused(tmp_path: Path) -> None:
    real = _prompts(tmp_path, ['{"prompt": "a"}', '{"prompt": "b"}'])
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    with pytest.raises(UsageError, match="cannot open"):
        data.read_prompts(link)


def test_a_bad_line_is_named_with_its_number(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"prompts.jsonl:2"):
        data.read_prompts(_prompts(tmp_path, ['{"prompt": "a"}', '{"nope": 1}']))


def test_one_prompt_is_too_few(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="at least 2"):
        data.read_prompts(_prompts(tmp_path, ['{"prompt": "a"}']))


def test_an_answer_is_read_typed() -> None:
    answer = {"choices": [{"message": {"role": "assistant", "content": "spark pair"}}]}
    assert data.answer_text(json.dumps(answer).encode()) == "spark pair"
    for hostile in (b"[]", b'{"choices": "x"}', b'{"choices": [{"message": {"content": 5}}]}', b"\xff"):
        with pytest.raises(ShapeError):
            data.answer_text(hostile)


def test_a_conversation_line_cannot_break_into_two_records() -> None:
    line = data.conversation_line(0, [{"role": "user", "content": "a\nb"}], 'x"}\n{"conversation_id": 9')
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["conversations"][-1] == {"role": "assistant", "content": 'x"}\n{"conversation_id": 9'}


def test_only_whole_progress_lines_count_as_training_progress() -> None:
    step = train.progress_of("sparkpair-train step=3/5 loss=18.7139\n")
    assert step is not None and (step.step, step.total, step.loss, step.accuracy) == (3, 5, 18.7139, None)
    step = train.progress_of("sparkpair-train step=3/5 loss=18.7139 acc=0.421")
    assert step is not None and step.accuracy == 0.421
    for forged in ("x sparkpair-train step=3/5 loss=1", "sparkpair-train step=3/5 loss=1 extra",
                   "sparkpair-train step=99999999999/5 loss=1", "sparkpair-train step=3/5 loss=" + "1" * 500,
                   "sparkpair-train step=3/5 loss=1 acc=0.5 step=9/9 loss=0"):
        assert train.progress_of(forged) is None


def test_the_training_container_gets_no_network_and_the_cache_read_only() -> None:
    command = train.train_command(image="img:1", hf_cache="/home/u/.cache/huggingface", work="/home/u/w x",
                                  target="Qwen/Q", recipe=train.Recipe(steps=5), user="1000:1000").text
    assert "--network none" in command and "/home/u/.cache/huggingface:/sparkpair/hf:ro" in command
    assert "'/home/u/w x:/work'" in command and "--user 1000:1000" in command and "--steps 5" in command
    assert "--gpus" not in command and "--device cpu" in command and "--mode online" in command


def _config(**fields: object) -> bytes:
    return json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 256, "vocab_size": 1024,
                       **fields}).encode()


def test_a_draft_that_fits_its_target_has_no_problems() -> None:
    assert export.draft_problems(_config(), _config(architectures=["Qwen3MoeForCausalLM"])) == []


def test_a_draft_of_another_size_or_architecture_is_named_field_by_field() -> None:
    problems = export.draft_problems(_config(hidden_size=512, architectures=["LlamaForCausalLM"]), _config())
    assert any("hidden_size 512" in p and "256" in p for p in problems)
    assert any("architectures" in p for p in problems)
    assert export.draft_problems(b"not json", _config())


def test_the_training_json_keeps_only_typed_fields() -> None:
    raw = json.dumps({"modelopt_version": "0.47.0" + "x" * 500, "losses": [1.0, "evil", 2], "steps": "5",
                      "world_size": 2}).encode()
    kept = export.parse_training(raw)
    assert kept["modelopt_version"].startswith("0.47.0") and len(kept["modelopt_version"]) == 64
    assert kept["losses"] == [1.0, 2.0] and "steps" not in kept and kept["world_size"] == 2
    assert export.parse_training(b"[1]") == {} and export.parse_training(b"\xff") == {}


def _install(staging: Path, hub: Path, folder: str = "models--local--d") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-", str(staging), str(hub), folder], input=export.installer_text(),
                          capture_output=True, text=True, timeout=60)


def test_the_installer_puts_the_draft_in_the_cache_layout(tmp_path: Path) -> None:
    staging, hub = tmp_path / "draft", tmp_path / "hub"
    staging.mkdir()
    (staging / "config.json").write_text("{}")
    (staging / "model.safetensors").write_bytes(b"\0" * 100)
    done = _install(staging, hub)
    assert done.returncode == 0, done.stderr
    commit, files = export.parse_installed(done.stdout)
    repo = hub / "models--local--d"
    assert (repo / "refs" / "main").read_text() == commit
    for name, (sha, size) in files.items():
        link = repo / "snapshots" / commit / name
        assert os.readlink(link) == f"../../blobs/{sha}" and link.stat().st_size == size
    again = _install(staging, hub)  # idempotent: same content, same revision
    assert export.parse_installed(again.stdout)[0] == commit


@pytest.mark.parametrize("hostile", ["symlink", "dotfile", "subdir"])
def test_the_installer_refuses_what_is_not_a_plain_checkpoint_file(tmp_path: Path, hostile: str) -> None:
    staging, hub = tmp_path / "draft", tmp_path / "hub"
    staging.mkdir()
    (staging / "config.json").write_text("{}")
    secret = tmp_path / "secret"
    secret.write_text("token")
    if hostile == "symlink":
        (staging / "model.safetensors").symlink_to(secret)
    elif hostile == "dotfile":
        (staging / ".hidden").write_text("x")
    else:
        (staging / "sub").mkdir()
    done = _install(staging, hub)
    assert done.returncode == 1 and done.stderr.startswith("draft-install: ")
    assert not any((hub / "models--local--d" / "blobs").glob("*")) if (hub / "models--local--d").exists() else True


def test_the_installer_refuses_a_folder_outside_the_cache(tmp_path: Path) -> None:
    staging = tmp_path / "draft"
    staging.mkdir()
    (staging / "config.json").write_text("{}")
    assert _install(staging, tmp_path / "hub", "models--../../etc").returncode == 1


INVENTORY = """
cluster: {name: p, user: u, ssh_key: /k, known_hosts: /h}
nodes:
  - {name: a, host: 198.18.0.11, links: {enp1s0f1np1: 198.19.1.11/24}}
  - {name: b, host: 198.18.0.12, links: {enp1s0f1np1: 198.19.1.12/24}}
"""


def test_the_evaluation_serves_the_trained_draft_on_the_runtime_asked_for() -> None:
    inventory = parse_inventory(yaml.safe_load(INVENTORY))
    changed = evaluate.with_draft(inventory, "qwen3-235b", "vllm", "local/mine")
    assert changed.profile("qwen3-235b", "vllm").draft == "local/mine"
    assert inventory.profile("qwen3-235b", "vllm").draft != "local/mine"
    assert evaluate.with_draft(inventory, "qwen3-235b", "vllm", None) is inventory


def test_data_parallel_training_uses_torchrun_on_the_qsfp_twin() -> None:
    rendezvous = train.Rendezvous(2, 1, "198.19.1.11", "enp1s0f1np1")
    command = train.train_command(image="img:1", hf_cache="/h", work="/w", target="Qwen/Q",
                                  recipe=train.Recipe(steps=5), user="1000:1000", rendezvous=rendezvous).text
    assert "--network host" in command and "GLOO_SOCKET_IFNAME=enp1s0f1np1" in command
    assert "torchrun --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 198.19.1.11" in command
    assert "--network none" not in command


def _training_node(name: str, lines: list[str], code: int = 0, interrupt: bool = False) -> FakeNode:
    """The shared fake node whose training run prints lines and exits code (or is interrupted: Ctrl-C), and
    that removes the training container when asked."""
    node = FakeNode(name).on(prefix("docker rm -f"), "")
    return node.on(lambda text: True, KeyboardInterrupt() if interrupt else Reply("\n".join(lines), "", code))


def test_the_head_reports_progress_and_the_first_failure_wins() -> None:
    from sparkpair.transport import Shell

    head = _training_node("a", ["sparkpair-train step=1/2 loss=1.0 acc=0.5", "noise"])
    worker = _training_node("b", ["Traceback", "RuntimeError: gloo"], code=1)
    seen: list[str] = []
    code, tails = train.run_training([head, worker], [Shell("x"), Shell("y")], seen.append, 10.0)
    assert code == 1 and tails["b"][-1] == "RuntimeError: gloo" and tails["a"] == ["noise"]
    assert seen[0].startswith("sparkpair-train step=1/2")


def test_ctrl_c_removes_the_training_container_on_every_node() -> None:
    from sparkpair.transport import Shell

    head, worker = _training_node("a", [], interrupt=True), _training_node("b", [])
    with pytest.raises(KeyboardInterrupt):
        train.run_training([head, worker], [Shell("x"), Shell("y")], lambda line: None, 10.0)
    assert all(f"docker rm -f {train.CONTAINER} >/dev/null 2>&1 || true" in node.commands for node in (head, worker))


@pytest.mark.parametrize(("content", "revision"), [(b"a" * 40, "a" * 40), (b"a" * 40 + b"\n", "a" * 40),
                                                   (None, ""), (b"../../etc", ""), (b"A" * 40, ""),
                                                   (b"a" * 39 + b"\x1b", ""), (b"a" * 4000, "")])
def test_the_target_revision_is_read_capped_and_checked(content: bytes | None, revision: str) -> None:
    from sparkpair.draft.flow import target_revision

    inventory = parse_inventory(yaml.safe_load(INVENTORY))
    refs = "/home/u/.cache/huggingface/hub/models--Qwen--Q/refs/main"
    head = FakeNode("a", home="/home/u", files={} if content is None else {refs: content})
    assert target_revision(head, inventory, "Qwen/Q") == revision


# --- data parallel over N nodes (issue 28) ---------------------------------------------------------------------------

def test_each_training_node_meets_the_head_on_its_own_link_as_the_runtimes_choose_it() -> None:
    from cluster_nodes import RING, SWITCH

    from sparkpair.render.recipe import ports_toward_head

    pair = parse_inventory(yaml.safe_load(INVENTORY))  # a pair: the head's first address, each node's first twin
    assert [train.rendezvous_of(pair, 2, rank) for rank in (0, 1)] == [
        train.Rendezvous(2, 0, "198.19.1.11", "enp1s0f1np1"), train.Rendezvous(2, 1, "198.19.1.11", "enp1s0f1np1")]
    for inventory in (RING, SWITCH):
        for rank, node in enumerate(inventory.nodes):
            head_port, own_port = ports_toward_head(inventory, node)
            found = train.rendezvous_of(inventory, len(inventory.nodes), rank)
            assert found == train.Rendezvous(len(inventory.nodes), rank, str(inventory.head.links[head_port].ip),
                                             own_port)
            assert found.interface in node.links
            if rank:  # the head's address on the link this worker shares with it: the same subnet as its own end
                assert node.links[own_port].network == inventory.head.links[head_port].network
    workers = [train.rendezvous_of(RING, 3, rank).master_addr for rank in (1, 2)]
    assert workers[0] != workers[1]  # in a ring each worker reaches the head on its own cable


def _trainee(name: str) -> FakeNode:
    """A node that has the training image, makes the draft's folders and runs the training when asked."""
    return (FakeNode(name, home="/home/nvidia")
            .on(prefix("docker image inspect"), "sha256:feed\n")
            .on(prefix("mkdir -p"), "")
            .on(prefix("printf '%s:%s'"), "1000:1000"))


def _run(pair: object, inventory: object, nodes: int = 1, **plan: object) -> object:
    from sparkpair.draft import run as runs
    from sparkpair.draft.plan import Plan
    from sparkpair.draft.record import read_record
    from sparkpair.progress import silent

    options = runs.DraftOptions(profile="qwen3-235b", name="local/mine", nodes=nodes)
    head = pair.head  # type: ignore[attr-defined]
    return runs.Run(pair, inventory, options, silent, read_record(head, options.name, options.profile),  # type: ignore
                    "/home/nvidia/.sparkpair/drafts/local--mine", data.split(data.read_prompts(None)),
                    runs.DraftResult(options.name), Plan(**{"mode": "online", "device": "cpu", "precision": "float32",
                                                            "lines": [], **plan}))  # type: ignore[arg-type]


def test_nodes_k_trains_on_the_first_k_nodes_head_first_each_with_its_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    from cluster_nodes import SWITCH
    from fakenode import fake_pair

    from sparkpair.draft import training

    nodes = [_trainee(node.name) for node in SWITCH.nodes]
    pair = fake_pair(*nodes)
    run = _run(pair, SWITCH, nodes=3)
    synced: list[list[str]] = []
    ran: list[tuple[list[str], list[str]]] = []
    monkeypatch.setattr(training.lifecycle, "stop", lambda *args: None)
    monkeypatch.setattr(training.modelsync, "ensure_models",
                        lambda pair, inv, repos, names, *rest: synced.append(names))
    monkeypatch.setattr(training.train, "run_training", lambda connections, commands, seen, timeout: (
        ran.append(([c.name for c in connections], [c.text for c in commands])), (0, {}))[1])
    training.run_step(run, {"sha256": "d" * 64, "target": "Qwen/Q"}, {})  # type: ignore[arg-type]
    names, commands = ran[0]
    assert names == ["spark-a", "spark-b", "spark-c"] and synced == [names]
    for rank, (name, command) in enumerate(zip(names, commands, strict=True)):
        expected = train.rendezvous_of(SWITCH, 3, rank)
        assert f"torchrun --nnodes 3 --node-rank {rank} --nproc-per-node 1 --master-addr {expected.master_addr} " \
               in command and f"GLOO_SOCKET_IFNAME={expected.interface}" in command
        assert any(path.endswith("/data.jsonl") for path, *_ in pair.nodes[name].puts) == (rank > 0)
    assert nodes[3].calls == []  # the fourth node is not asked anything
    assert training.training_nodes(pair, SWITCH, 1) == [nodes[0]]


@pytest.mark.parametrize(("nodes", "ok"), [(1, True), (3, True), (4, False), (0, False)])
def test_nodes_k_is_one_to_the_inventorys_nodes(nodes: int, ok: bool) -> None:
    from cluster_nodes import RING

    from sparkpair.draft import flow

    options = flow.DraftOptions(profile="qwen3-235b", name="local/mine", nodes=nodes)
    if ok:
        flow.check_options(RING, options)
        return
    with pytest.raises(UsageError, match=rf"^--nodes {nodes}: the inventory has 3 nodes$"):
        flow.check_options(RING, options)


def test_conversations_in_modelopts_format_are_prompts_up_to_the_first_answer(tmp_path: Path) -> None:
    lines = [json.dumps({"conversation_id": i, "conversations": [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": f"q{i}"},
        {"role": "assistant", "content": "an answer the target replaces"}, {"role": "user", "content": "later"}]})
        for i in range(3)]
    prompts = data.read_prompts(_prompts(tmp_path, lines))
    assert prompts.messages[1] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q1"}]
    with pytest.raises(UsageError, match=r"prompts.jsonl:1"):
        data.read_prompts(_prompts(tmp_path, [json.dumps({"conversations": [{"role": "assistant", "content": "x"}]}),
                                              '{"prompt": "b"}']))
