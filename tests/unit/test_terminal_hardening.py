"""No text from a node reaches the terminal able to act on it (issue 33, item 6; the bidi marks of the last round).

A hostile engine image's stderr reached the terminal through a bundle probe's "not collected" line as
`ESC]0;owned ... ESC[2J ESC[31mFAKE: all checks passed`: report's tables dropped BEL, BS, VT, FF and CR but not
ESC, and the styled paths (rich) dropped nothing. Every output path now passes its text through one sanitizer
(`sparkpair.safetext.visible`: C0 and C1 controls, DEL, line separators and bidi marks written as escapes), and
`probes.printable` (bundle member names, netplan names, versions) refuses the bidi marks U+200E, U+200F and
U+061C too. Each output path below is fed such text; the output holds no ESC, no C1 control and no bidi mark.
"""

from __future__ import annotations

import io
import sys
from collections import Counter
from pathlib import Path

import pytest

from sparkpair import report
from sparkpair.checks import Finding, Status
from sparkpair.cli import main
from sparkpair.engine import bundle
from sparkpair.engine.bundle import BundleResult
from sparkpair.engine.diagnose import Diagnosis, Examination
from sparkpair.engine.lifecycle import RankLog
from sparkpair.engine.lifecycle import Status as EngineStatus
from sparkpair.lockfile.compare import Difference
from sparkpair.probes import printable
from sparkpair.progress import Event
from sparkpair.report import diagnose as diagnose_report
from sparkpair.report import lock as lock_report

HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b[31mFAKE: all checks passed\x9b31m\u202eevil\u200f\u061c\u200e\r\x08"
ACTING = ["\x1b", "\x9b", "\x07", "\x08", "\r", "\u202e", "\u200f", "\u061c", "\u200e"]


def _assert_inert(text: str) -> None:
    found = [repr(char) for char in ACTING if char in text]
    assert not found, f"{found} in {text!r}"
    assert "FAKE:allcheckspassed" in "".join(text.split())  # shown, as text (a table may fold it)


def _finding() -> Finding:
    return Finding(f"docker.image{HOSTILE}", f"spark-b{HOSTILE}", Status.FAIL, f"detail {HOSTILE}\nsecond {HOSTILE}",
                   f"fix {HOSTILE}")


OUTPUTS = {
    "doctor's tables": lambda: report.findings([_finding()]),
    "a line": lambda: report.line(HOSTILE),
    "a note": lambda: report.note(HOSTILE),
    "an error": lambda: report.error_lines([HOSTILE]),
    "a warning": lambda: report.warning(HOSTILE),
    "the bundle's not collected": lambda: report.bundle_result(
        BundleResult("out.tar.gz", [("a", 1, "x", Counter())], [f"spark-b/engine/x.txt: versions: {HOSTILE}"])),
    "status": lambda: report.status(EngineStatus(state="degraded", profile=HOSTILE, nodes={
        f"spark-b{HOSTILE}": {"container": HOSTILE, "ranks_alive": False}}, health=HOSTILE, reason=HOSTILE,
        model=HOSTILE)),
    "logs": lambda: report.rank_logs([RankLog(f"spark-b{HOSTILE}", 1, f"{HOSTILE}\n{HOSTILE}")]),
    "diagnose": lambda: diagnose_report.examination(Examination([Diagnosis(HOSTILE, HOSTILE, HOSTILE, [HOSTILE], HOSTILE)],
                                                                 False)),
    "a failed launch's tails and causes": lambda: (report.log_tails({HOSTILE: HOSTILE}),
                                                   report.causes([Diagnosis(HOSTILE, HOSTILE, HOSTILE, [HOSTILE])])),
    "progress": lambda: [report.event(Event(HOSTILE, HOSTILE, level)) for level in ("info", "result", "warning", "error")]
    + [report.event(Event("spark-b", HOSTILE, key="k", done=1, total=2))],
    "a diff": lambda: report.diff(f"--- a\n+++ b\n+{HOSTILE}\n-{HOSTILE}\n {HOSTILE}"),
    "the lock's differences": lambda: lock_report.lock_differences(
        [Difference(HOSTILE, "kernel", HOSTILE, HOSTILE, HOSTILE)], Path("sparkpair.lock")),
    "bench": lambda: report.bench_results(["config", "x"], [[HOSTILE, HOSTILE]]),
    "text": lambda: report.emit_text(HOSTILE),
}


@pytest.mark.parametrize("path", sorted(OUTPUTS))
def test_every_output_path_shows_node_text_inert(path: str, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    OUTPUTS[path]()
    out, err = capsys.readouterr()
    _assert_inert(out + err)


def test_in_colour_the_only_escapes_are_reports_own_colours(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stdout", stream)
    report.findings([_finding()])
    text = stream.getvalue()
    for code in report.table._ANSI.values():
        text = text.replace(f"\x1b[{code}m", "")
    _assert_inert(text.replace("\x1b[0m", ""))


def test_diagnose_of_a_hostile_log_prints_it_inert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "rank0.log"
    log.write_text(f"[TRT-LLM] [E] {HOSTILE} CUDA out of memory {HOSTILE}\n")
    main(["diagnose", str(log)])
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "\u202e" not in out + err


def test_the_bundles_manifest_names_node_text_inert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = BundleResult(str(tmp_path / "b.tar.gz"), [], [f"spark-b/x: {HOSTILE}"])
    monkeypatch.setattr(bundle.hftoken, "find_token", lambda: None)
    bundle._write(result, [bundle.Collected("spark-b/engine/x.txt", "raw evidence stays raw \x1b[0m", HOSTILE)],
                  tmp_path / "b.tar.gz", "c")
    import tarfile

    with tarfile.open(tmp_path / "b.tar.gz") as archive:
        manifest = archive.extractfile("b/MANIFEST.txt").read().decode()  # type: ignore[union-attr]
    _assert_inert(manifest.replace("FAKE", "").replace("\n", " ") + "FAKE: all checks passed")


@pytest.mark.parametrize("mark", ["\u200e", "\u200f", "\u061c", "\u202e", "\u2066", "\x1b", "\x9b", "\u2028"])
def test_a_name_holding_a_bidi_mark_or_a_control_is_not_printable(mark: str) -> None:
    assert not printable(f"rank{mark}0.log")
    assert bundle.member_path(f"spark-b/logs/rank{mark}0.log") is None


def test_ordinary_text_is_left_as_it_is() -> None:
    from sparkpair.safetext import visible

    text = "rank 0: model.safetensors 100%\tdone\nnext line: naïve ✓ 日本語"
    assert visible(text) == text and printable("model-00001-of-00005.safetensors")


