"""The wheel carries every subpackage, the templates and the data files."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_contains_every_module_template_and_data_file(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                             "--disable-pip-version-check", "-q",
                             "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    names = set(zipfile.ZipFile(next(tmp_path.glob("sparkpair-*.whl"))).namelist())
    expected = {f"sparkpair/{p.relative_to(ROOT / 'sparkpair')}" for p in (ROOT / "sparkpair").rglob("*.py")}
    expected |= {f"sparkpair/templates/{p.name}" for p in (ROOT / "templates").glob("*.j2")}
    expected |= {f"sparkpair/data/{p.name}" for p in (ROOT / "sparkpair" / "data").iterdir()
                 if p.suffix in (".json", ".jsonl", ".py")}
    assert expected - names == set()
