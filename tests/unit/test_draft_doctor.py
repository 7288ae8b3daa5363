"""doctor knows a trained draft: its training record read as hostile input, an OK row saying what it was trained
from, a WARN when that is not the target the node holds; drafts from the hub get no row."""

from __future__ import annotations

import base64
import json

import test_checks
from test_checks import CACHE, PROFILE, REVISION, SIM, checked, healthy

from sparkpair.probes import drafts

DRAFT = SIM.profile(PROFILE).draft
TARGET = SIM.profile(PROFILE).target


def _record(**fields: object) -> drafts.TrainingRecord | None:
    data = {"base_model": TARGET, "base_revision": REVISION, "steps": 400, "modelopt_version": "0.47.0",
            "data_sha256": "ab" * 32, **fields}
    return drafts.parse_record(base64.b64encode(json.dumps(data).encode()).decode())


def _rows(record: drafts.TrainingRecord | None) -> list:
    facts = healthy()
    assert DRAFT is not None
    for node in facts.nodes:
        facts.nodes[node][drafts.training_record(CACHE, DRAFT)] = record
    return [f for f in checked(facts) if f.check == "models.draft-record"]


def test_a_draft_trained_for_this_target_says_what_it_was_trained_from() -> None:
    rows = _rows(_record())
    assert [r.status.name for r in rows] == ["OK", "OK"]
    assert "400 steps" in rows[0].detail and "ModelOpt 0.47.0" in rows[0].detail and REVISION[:12] in rows[0].detail


def test_a_draft_trained_for_another_revision_is_a_warning_with_the_fix() -> None:
    rows = _rows(_record(base_revision="0" * 40))
    assert {r.status.name for r in rows} == {"WARN"}
    assert "train-draft" in rows[0].fix and "0" * 12 in rows[0].detail


def test_a_draft_trained_for_another_model_is_a_warning() -> None:
    assert {r.status.name for r in _rows(_record(base_model="other/model"))} == {"WARN"}


def test_a_draft_from_the_hub_has_no_row() -> None:
    assert _rows(None) == []


def test_the_record_is_read_as_hostile_input() -> None:
    assert drafts.parse_record("none") is None and drafts.parse_record("") is None
    assert drafts.parse_record("not base64!") is None
    assert drafts.parse_record(base64.b64encode(b"[1, 2]").decode()) is None
    forged = _record(base_model="x\n[OK] forged", base_revision="../../etc", steps=True)
    assert forged is None or (forged.base_revision == "" and forged.steps == 0 and "\n" not in forged.base_model)
    assert _record(base_model="a\x1bb") is None


def test_healthy_facts_still_have_every_other_row() -> None:
    assert test_checks.checked(healthy())


def test_the_record_says_how_the_draft_was_trained() -> None:
    rows = _rows(_record(mode="offline", device="cuda", precision="bf16", vocab_size=151936, draft_vocab_size=32000))
    assert "offline on cuda in bf16" in rows[0].detail and "draft vocabulary 32000 of 151936" in rows[0].detail
    older = _rows(_record())  # a record from before train-draft said how: no claim
    assert " on " not in older[0].detail.split("steps")[1].split(",")[0]
    forged = _record(mode="offline\n[OK]", device="tpu", draft_vocab_size=-1)
    assert forged is not None and forged.mode == "" and forged.device == "" and forged.draft_vocab_size == 0


def _image_rows(found: object) -> list:
    from sparkpair.probes import training

    facts = healthy()
    facts.nodes[facts.inventory.head.name][training.image_packages(training.DEFAULT_IMAGE)] = found
    return [f for f in checked(facts) if f.check == "draft.image"]


def test_doctor_checks_the_training_image_on_the_head() -> None:
    from sparkpair.probes import training

    absent = _image_rows(training.parse_packages("sparkpair-image absent"))
    assert [r.status.name for r in absent] == ["INFO"] and "nvidia-modelopt[hf]" in absent[0].detail
    bare = _image_rows(training.parse_packages('sparkpair-image {"torch": "2.8.0", "transformers": "4.5"}'))
    assert [r.status.name for r in bare] == ["WARN"] and "nvidia-modelopt" in bare[0].detail
    assert 'pip install -U "nvidia-modelopt[hf]"' in bare[0].fix
    whole = _image_rows(training.parse_packages(
        'sparkpair-image {"nvidia-modelopt": "0.47.0", "transformers": "5.14.0", "accelerate": "1.1", '
        '"torch": "2.8.0", "safetensors": "0.8"}'))
    assert [r.status.name for r in whole] == ["OK"] and "ModelOpt 0.47.0" in whole[0].detail
    assert _image_rows(None) == []   # not asked: no row
