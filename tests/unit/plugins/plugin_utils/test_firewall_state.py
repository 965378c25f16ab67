# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The firewall role's probe (roles/firewall/files/probe.sh), run here with a stand-in sshd and read
as the role reads it (probe_sections, then plugins/plugin_utils/firewall_state.py).

The Molecule scenarios reach their boxes through `docker exec`, which carries no SSH
connection; here the probe runs under a process that has SSH_CONNECTION while its own
environment lacks it, as under sudo.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.serving.plugins.plugin_utils.firewall_state import (
    FILES,
    block_in_place,
    line_in_place,
    read_probe,
)
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.probe import parse_sections

ROOT = Path(__file__).resolve().parents[4]
PROBE = ROOT / "roles" / "firewall" / "files" / "probe.sh"
CONNECTION = "192.0.2.5 50000 192.0.2.11 2222"


def run_probe(sshd: Path, outer_env: dict[str, str]) -> dict:
    """probe.sh as tasks/plan.yml runs it (sh -c SCRIPT probe.sh SSHD), two processes below one
    with `outer_env`, its own environment without SSH_CONNECTION (what sudo leaves)."""
    outer = 'env -u SSH_CONNECTION /bin/sh -c "$1" probe.sh "$2"; exit $?'
    result = subprocess.run(["/bin/sh", "-c", outer, "outer", PROBE.read_text(), str(sshd)],
                            env={"PATH": "/usr/bin:/bin", **outer_env}, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    errors: list[str] = []
    state = read_probe(parse_sections(result.stdout), errors)
    assert errors == []
    return state


def fake_sshd(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "sshd"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_the_connection_is_found_in_a_parent_and_sshds_ports_are_read(tmp_path):
    sshd = fake_sshd(tmp_path, 'echo "sshd: a warning" >&2; printf "port 22\\nport 2222\\n"')
    probe = run_probe(sshd, {"SSH_CONNECTION": CONNECTION})
    assert probe["ssh_connection"] == CONNECTION
    assert "port 22\nport 2222" in probe["sshd_output"]
    assert probe["sshd_error"] == ""


def test_without_a_connection_and_with_a_failing_sshd_the_reasons_are_kept(tmp_path):
    sshd = fake_sshd(tmp_path, 'echo "sshd: no hostkeys available -- exiting." >&2; exit 1')
    probe = run_probe(sshd, {})
    assert probe["ssh_connection"] == ""
    assert (probe["sshd_output"], probe["sshd_error"]) == ("", "exit 1: sshd: no hostkeys available -- exiting.")
    missing = run_probe(tmp_path / "no-such-sshd", {})
    assert missing["sshd_error"].startswith("exit 127: ") and "no-such-sshd" in missing["sshd_error"]


MARK = "### sparkfleet.serving probe: "


def probe_output(files: dict[str, str | None], ufw: bool) -> str:
    lines = [f"{MARK}ssh_connection rc=0", CONNECTION, f"{MARK}sshd rc=0", "port 22"]
    for path, text in files.items():
        lines.append(f"{MARK}file {path} rc={1 if text is None else 0}")
        if text is not None:
            lines.append(base64.b64encode(text.encode()).decode())
    if ufw:
        lines += [f"{MARK}ufw rc=0", "Status: active", "", f"{MARK}added rc=0", "Added user rules:", "ufw allow 22/tcp"]
    else:
        lines += [f"{MARK}ufw rc=127"]
    return "\n".join(lines)


ALL_FILES = dict.fromkeys(FILES)


def test_files_come_back_byte_for_byte_and_absent_ones_empty():
    text = "*filter\n:ufw-user-input - [0:0]\nCOMMIT\n\n"
    output = probe_output({**ALL_FILES, "/etc/ufw/after.rules": text}, True)
    probe = read_probe(parse_sections(output), [])
    assert probe["files"] == {**{path: "" for path in ALL_FILES}, "/etc/ufw/after.rules": text}
    assert probe["ufw_installed"] is True
    assert (probe["status"], probe["added"]) == ("Status: active", "Added user rules:\nufw allow 22/tcp")


def test_without_ufw_there_is_no_state():
    probe = read_probe(parse_sections(probe_output(ALL_FILES, False)), [])
    assert (probe["ufw_installed"], probe["status"], probe["added"]) == (False, "", "")


def test_a_probe_cut_short_or_a_garbled_file_is_refused():
    with pytest.raises(ValueError, match=r"lacks the sections \['ufw'\]"):
        read_probe(parse_sections(probe_output(ALL_FILES, False).split(f"{MARK}ufw", maxsplit=1)[0]), [])
    encoded = base64.b64encode(b"IPV6=yes\n").decode()
    garbled = probe_output({**ALL_FILES, "/etc/default/ufw": "IPV6=yes\n"}, False).replace(encoded, "%%%")
    with pytest.raises(ValueError, match="/etc/default/ufw as the probe read it is not base64"):
        read_probe(parse_sections(garbled), [])


def test_a_ufw_that_cannot_answer_is_an_error():
    output = probe_output(ALL_FILES, True).replace(f"{MARK}added rc=0", f"{MARK}added rc=1")
    errors: list[str] = []
    read_probe(parse_sections(output), errors)
    assert errors and "`ufw show added` failed (exit 1)" in errors[0]


NAME = "sparkfleet.serving.firewall DOCKER-USER"
BLOCK = "-A DOCKER-USER -j RETURN"
WRITTEN = f"*filter\n# BEGIN {NAME}\n{BLOCK}\n# END {NAME}\nCOMMIT\n"


@pytest.mark.parametrize(("text", "block", "wanted", "in_place"), [
    (WRITTEN, BLOCK, True, True),
    (WRITTEN, BLOCK + "\n-A DOCKER-USER -j DROP", True, False),  # the block changed
    (WRITTEN.replace(f"{BLOCK}\n", ""), BLOCK, True, False),  # a line deleted by hand
    (WRITTEN + f"# BEGIN {NAME}\n", BLOCK, True, False),  # a second begin marker
    ("*filter\nCOMMIT\n", BLOCK, True, False),  # not there yet
    ("*filter\nCOMMIT\n", BLOCK, False, True),  # not wanted, not there
    (WRITTEN, BLOCK, False, False),  # not wanted, still there
    (WRITTEN, "", True, False),  # empty: blockinfile removes it
])
def test_block_in_place_as_blockinfile_would_leave_it(text, block, wanted, in_place):
    assert block_in_place(text, NAME, block, wanted) is in_place


@pytest.mark.parametrize(("text", "in_place"), [
    ("IPV6=yes\n", True),
    ("IPV6=no\nIPV6=yes\n", True),  # lineinfile replaces the last match, which is already the line
    ("IPV6=yes\nIPV6=no\n", False),
    ("DEFAULT_INPUT_POLICY=DROP\n", False),  # no match: the line is added
    ("", False),
])
def test_line_in_place_as_lineinfile_would_leave_it(text, in_place):
    assert line_in_place(text, "^IPV6=", "IPV6=yes") is in_place
