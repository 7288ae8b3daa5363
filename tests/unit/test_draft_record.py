"""train-draft's record: names refused before they reach a path, resume only from the same inputs, a hostile
record read as none."""

from __future__ import annotations

import json

import pytest

from sparkpair.draft.record import STEPS, DraftRecord, digest, name_problem, slug


@pytest.mark.parametrize("name", ["local/eagle3", "nvidia/Qwen3-235B-A22B-Eagle3.mine", "a/b_c-d.1"])
def test_names_a_repo_can_have_are_accepted(name: str) -> None:
    assert name_problem(name) is None
    assert "/" not in slug(name)


@pytest.mark.parametrize("name", ["../etc", "local/..", "local/../x", "/abs/path", "local/a/b", "noslash",
                                  "local/.hidden", "local/-dash", "local/a\nb", "local/a\x00", "local/" + "x" * 97,
                                  "local/a b", ""])
def test_names_that_could_leave_the_cache_or_forge_a_line_are_refused(name: str) -> None:
    problem = name_problem(name)
    assert problem is not None and "--name" in problem and "\n" not in problem


def test_a_step_is_done_only_from_the_same_inputs() -> None:
    record = DraftRecord("local/d", "p")
    record.finish("data", digest("data", 1), 1.0, {"sha256": "x"})
    assert record.done("data", digest("data", 1)) is not None
    assert record.done("data", digest("data", 2)) is None
    assert record.done("train", digest("train", 1)) is None


def test_finishing_a_step_again_forgets_the_steps_made_from_its_old_output() -> None:
    record = DraftRecord("local/d", "p")
    for step in STEPS:
        record.finish(step, step, 1.0, {})
    record.finish("train", "new", 2.0, {})
    assert list(record.steps) == ["data", "hidden", "train"]
    record.finish("data", "new", 3.0, {})
    assert list(record.steps) == ["data"]


def test_an_online_record_has_no_hidden_step_and_is_trusted_without_it() -> None:
    record = DraftRecord("local/d", "p")
    for step in ("data", "train", "export"):
        record.finish(step, step, 1.0, {})
    again = DraftRecord.from_json(record.to_json(), "local/d", "p")
    assert list(again.steps) == ["data", "train", "export"]


def test_the_record_round_trips() -> None:
    record = DraftRecord("local/d", "p")
    record.finish("data", "i1", 1.0, {"sha256": "abc"})
    record.finish("train", "i2", 2.0, {"trained": {"steps": 5}})
    again = DraftRecord.from_json(record.to_json(), "local/d", "p")
    assert again.steps == record.steps


@pytest.mark.parametrize("raw", [b"", b"not json", b"[]", b'{"name": "local/other", "profile": "p", "steps": {}}',
                                 b'{"name": "local/d", "profile": "p", "steps": []}',
                                 b'{"name": "local/d", "profile": "p", "steps": {"data": {"inputs": 5}}}'])
def test_a_record_that_is_not_ours_reads_as_none(raw: bytes) -> None:
    assert DraftRecord.from_json(raw, "local/d", "p").steps == {}


def test_a_later_step_without_the_earlier_ones_is_not_trusted() -> None:
    raw = json.dumps({"name": "local/d", "profile": "p",
                      "steps": {"train": {"inputs": "x", "finished": 1.0, "outputs": {}}}})
    assert DraftRecord.from_json(raw, "local/d", "p").steps == {}


@pytest.mark.parametrize("name", ["../../etc/x", "local/..", "local/a\x1b[2Jb", "/abs/x"])
def test_the_cli_refuses_a_bad_name_before_any_node_is_asked(name: str, example_inventory_path, capsys,
                                                             monkeypatch) -> None:
    from sparkpair.cli import main
    from sparkpair.transport import Pair

    def no_connection(*args: object, **kwargs: object) -> None:
        raise AssertionError("a node was asked")

    monkeypatch.setattr(Pair, "connect", no_connection)
    code = main(["-i", str(example_inventory_path), "train-draft", "qwen3-235b", "--name", name])
    err = capsys.readouterr().err
    assert code == 2 and "--name" in err and len(err.strip().splitlines()) <= 2 and "Traceback" not in err
    assert "\x1b" not in err  # the hostile name is shown escaped, never as a terminal control sequence
