"""The reset spec (sparkpair_testbed.reset): what it accepts, refuses, and the script it runs on a node."""

import json
import subprocess
import sys

import pytest
from sparkpair_testbed.reset import DROP_KEYS_SCRIPT, ResetSpec, SpecError, load_spec, node_script, parse_spec

SPEC = {"containers": ["engine-1"], "paths": ["~/.tool", "/etc/netplan/60-x.yaml"],
        "authorized_key_comments": ["tool@*"], "interfaces": ["enp1s0f1np1"]}


def test_a_full_spec_becomes_one_script_for_every_node():
    script = node_script(parse_spec(SPEC))
    assert script.startswith("set -e\n"
                             "docker rm -f engine-1 >/dev/null 2>&1 || true\n"
                             "rm -rf -- /home/nvidia/.tool /etc/netplan/60-x.yaml\n"
                             "/usr/bin/python3 -c ")
    assert script.endswith(" /home/nvidia/.ssh/authorized_keys 'tool@*'\n"
                           "ip addr flush dev enp1s0f1np1\n"
                           "ip link set dev enp1s0f1np1 down mtu 1500\n")


def test_an_empty_spec_resets_nothing():
    spec = parse_spec({})
    assert spec == ResetSpec() and node_script(spec) == "set -e\n"
    assert spec.summary() == "nothing (empty spec)"
    assert parse_spec(SPEC).summary() == "containers (1), paths (2), authorized key comments (1), interfaces (1)"


@pytest.mark.parametrize("data, message", [
    ([], "a reset spec is a JSON object"),
    ({"volumes": []}, "unknown field(s) volumes"),
    ({"paths": ["/"]}, "not a plain path"),
    ({"paths": ["~/"]}, "not a plain path"),
    ({"paths": ["~/a/../../etc"]}, "not a plain path"),
    ({"paths": ["relative/path"]}, "neither absolute nor under ~/"),
    ({"paths": "/etc/x"}, "expected a list of non-empty strings"),
    ({"containers": ["a b"]}, "not a valid name"),
    ({"interfaces": ["a-name-longer-than-15"]}, "not a valid name"),
    ({"authorized_key_comments": [""]}, "expected a list of non-empty strings"),
])
def test_what_rm_rf_or_the_shell_must_never_get_is_refused(data, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_spec(data)


def test_the_spec_comes_from_a_file_or_from_text(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(SPEC))
    assert load_spec(str(path)) == load_spec(text=json.dumps(SPEC)) == parse_spec(SPEC)
    with pytest.raises(SpecError, match="not JSON"):
        load_spec(text="{oops")
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(str(tmp_path / "missing.json"))


def test_authorized_keys_lines_are_dropped_by_key_comment_only(tmp_path):
    keys = tmp_path / "authorized_keys"
    keys.write_text("ssh-ed25519 AAAA1 operator@testbed\n"
                    "ssh-ed25519 AAAA2 tool@spark-a\n"
                    'from="198.18.0.0/15" ssh-rsa AAAA3 tool@spark-b\n'
                    "ssh-ed25519 AAAA4 mentions tool@ in its comment\n")
    keys.chmod(0o600)
    subprocess.run([sys.executable, "-c", DROP_KEYS_SCRIPT, str(keys), "tool@*"], check=True)
    assert keys.read_text() == ("ssh-ed25519 AAAA1 operator@testbed\n"
                                "ssh-ed25519 AAAA4 mentions tool@ in its comment\n")
    assert keys.stat().st_mode & 0o777 == 0o600
