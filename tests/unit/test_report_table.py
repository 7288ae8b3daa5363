"""Doctor's findings tables: laid out without rich, folded to a terminal's width, one line per finding when piped."""

from __future__ import annotations

import pytest

from sparkpair import report
from sparkpair.checks import Finding, Status
from sparkpair.report import table

HEADERS = ("check", "status", "detail", "fix")
ROWS = [["reach.ssh", "OK", "nvidia@198.18.0.11:22, host key verified", ""],
        ["links.mtu", "FAIL", "enp1s0f1np1 mtu 1500 on spark-b, 9000 on spark-a: jumbo frames are lost on the way "
                              "and NCCL stalls", "sparkpair setup-network (sets both ends to 9000)"]]


def test_without_a_width_each_row_is_one_line_and_the_box_is_closed() -> None:
    lines = table.render("spark-a", HEADERS, ROWS)
    assert lines[0] == "spark-a"
    assert lines[1].startswith("┏") and lines[3].startswith("┡") and lines[-1].startswith("└")
    body = lines[4:-1]
    assert len(body) == len(ROWS)
    assert len({len(line) for line in lines[1:]}) == 1, "every line of the box is as wide as the others"
    for row, line in zip(ROWS, body, strict=True):
        assert [cell.strip() for cell in line.strip("│").split("│")] == row


@pytest.mark.parametrize("width", [60, 80, 120])
def test_with_a_width_the_wrapped_columns_fold_and_nothing_is_lost(width: int) -> None:
    lines = table.render("spark-a", HEADERS, ROWS, width=width, wrapped=(False, False, True, True))
    assert all(len(line) <= width for line in lines), [len(line) for line in lines]
    cells: list[list[str]] = [[], []]
    for line in lines[4:-1]:
        parts = [part.strip() for part in line.strip("│").split("│")]
        if parts[0]:
            cells[len([c for c in cells if c])] = parts
        else:
            row = cells[1] if cells[1] else cells[0]
            row[2:] = [f"{row[2]} {parts[2]}".strip(), f"{row[3]} {parts[3]}".strip()]
    assert [row[:2] for row in cells] == [row[:2] for row in ROWS]
    assert ["".join(row[2].split()) for row in cells] == ["".join(row[2].split()) for row in ROWS]
    assert "reach.ssh" in lines[4] and "FAIL" in "".join(lines)


def test_a_cell_cannot_move_the_cursor() -> None:
    lines = table.render("", HEADERS, [["a", "OK", "over\rwritten\x08", "\x07"]])
    assert not any(ch in "".join(lines) for ch in "\r\x08\x07")


def test_painting_leaves_the_layout_alone() -> None:
    def paint(text: str, style: str) -> str:
        return f"<{style}>{text}</>" if style else text

    plain = table.render("t", HEADERS, ROWS)
    painted = table.render("t", HEADERS, ROWS, paint=paint, cell_style=lambda column, cell: "red" if column == 1 else "")
    assert painted[0] == "<title>t</>" and "<header>check</>" in painted[2]
    assert [line.replace("<red>", "").replace("<header>", "").replace("</>", "") for line in painted[1:]] == plain[1:]


def test_findings_piped_print_one_line_per_finding_and_the_summary(capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    items = [Finding("reach.ssh", "spark-a", Status.OK, "ok " * 80), Finding("links.mtu", "spark-b", Status.FAIL, "bad", "fix it"),
             Finding("clock.skew", "pair", Status.WARN, "0.8 s")]
    report.findings(items, 0.52)
    out = capsys.readouterr().out
    assert "\x1b[" not in out, "no colour into a pipe"
    lines = out.splitlines()
    assert [line for line in lines if not line.startswith(("┏", "┃", "┡", "└", "│"))] == [
        "spark-a", "spark-b", "pair", "1 FAIL, 1 WARN, 1 OK, 0 SKIP in 0.5 s"]
    assert sum(line.startswith("│") for line in lines) == 3


def test_forced_colour_paints_the_status(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    report.findings([Finding("links.mtu", "spark-b", Status.FAIL, "bad", "fix it")])
    assert "\x1b[1;31mFAIL\x1b[0m" in capsys.readouterr().out


def test_a_cell_of_several_lines_keeps_the_box_closed() -> None:
    lines = table.render("", HEADERS, [["a", "FAIL", "first line\nsecond, longer line", ""]])
    assert len({len(line) for line in lines}) == 1
    assert [line.split("│")[3].strip() for line in lines[3:-1]] == ["first line", "second, longer line"]
