"""The test hold point (sparkpair.report.holdpoint) that tests/integration/test_interrupts.py lands its Ctrl-C on:
unset it returns at once; set, the first matching line holds its thread until the release file exists."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from sparkpair.report import holdpoint


@pytest.fixture
def hold(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    release = tmp_path / "release"
    monkeypatch.setitem(holdpoint._AT, "pattern", r"^spark-a: create ")
    monkeypatch.setitem(holdpoint._AT, "release", str(release))
    return release


def test_unset_it_returns_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(holdpoint._AT, "pattern", "")
    said: list[str] = []
    holdpoint.reached("spark-a: create /etc/netplan/40-sparkpair.yaml", said.append)
    assert said == []


def test_other_lines_pass(hold: Path) -> None:
    said: list[str] = []
    holdpoint.reached("spark-b: create /etc/netplan/40-sparkpair.yaml", said.append)
    assert said == []


def test_the_first_matching_line_holds_until_released_and_only_once(hold: Path) -> None:
    said: list[str] = []
    thread = threading.Thread(target=holdpoint.reached, args=("spark-a: create /etc/netplan/x.yaml", said.append))
    thread.start()
    deadline = time.monotonic() + 10
    while not said and time.monotonic() < deadline:
        time.sleep(0.01)
    assert said == ["sparkpair-test: held"]
    thread.join(timeout=0.2)
    assert thread.is_alive()                # held until the release file exists
    hold.touch()
    thread.join(timeout=10)
    assert not thread.is_alive()
    holdpoint.reached("spark-a: create /etc/netplan/y.yaml", said.append)
    assert said == ["sparkpair-test: held"]  # the first match only
