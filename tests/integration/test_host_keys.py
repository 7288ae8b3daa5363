"""Host keys beyond tests/integration/test_setup_network.py: no code path turns checking off, every
command (not only setup-network) refuses a changed key, and --accept-new-host-keys accepts only
unknown hosts, never a changed key."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import ROOT, run_sparkpair, with_forged_host_key

# Ways to switch host-key checking off, in Python (paramiko, fabric, docker-py) and in ssh options.
DISABLING = re.compile(r"AutoAddPolicy|WarningPolicy|StrictHostKeyChecking\s*=?\s*(no|off|accept-new)"
                       r"|UserKnownHostsFile\s*=?\s*/dev/null|CheckHostIP\s*=?\s*no|use_ssh_client\s*=\s*True"
                       r"|known_hosts.*/dev/null", re.IGNORECASE)


def test_no_source_file_or_template_turns_host_key_checking_off() -> None:
    offenders = []
    for path in [*(ROOT / "sparkpair").rglob("*.py"), *(ROOT / "templates").rglob("*")]:
        if path.is_file():
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if DISABLING.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []
    agent = (ROOT / "templates" / "mpi-rsh-agent.sh.j2").read_text()
    assert agent.count("-o StrictHostKeyChecking=yes") == agent.count("exec ssh ") == 2


def _forged(bed, tmp_path: Path) -> Path:
    """The pair's inventory with another key for the head, spark-a (which every command reaches;
    logs and unlock never need the worker)."""
    return with_forged_host_key(bed, tmp_path, "198.18.0.11")


def test_every_command_refuses_a_changed_host_key(networked, tmp_path: Path) -> None:
    inventory = _forged(networked, tmp_path)
    for args in (["status"], ["stop"], ["logs"], ["launch", "--dry-run"], ["unlock"]):
        run = run_sparkpair(inventory, *args)
        assert run.code == 1, (args, run.text)
        assert "spark-a: host key of 198.18.0.11 CHANGED" in run.err and run.err.count("SHA256:") == 2, \
            (args, run.text)
    doctor = run_sparkpair(inventory, "doctor", "--only", "reach", "--json")
    assert doctor.code == 1, doctor.text
    details = [f["detail"] for f in json.loads(doctor.out)["findings"] if f["status"] == "FAIL"]
    assert any("host key of 198.18.0.11 CHANGED" in d and d.count("SHA256:") == 2 for d in details), details


def test_accept_new_host_keys_never_accepts_a_changed_key(networked, tmp_path: Path) -> None:
    inventory = _forged(networked, tmp_path)
    before = (tmp_path / "known_hosts").read_text()
    run = run_sparkpair(inventory, "setup-network", "--dry-run", "--accept-new-host-keys")
    assert run.code == 1 and "spark-a: host key of 198.18.0.11 CHANGED" in run.err, run.text
    assert (tmp_path / "known_hosts").read_text() == before  # nothing was recorded over the known key
