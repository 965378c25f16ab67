"""The firewall role's one read of a box (roles/firewall/files/probe.sh) and its parsing
(plugins/plugin_utils/firewall_state.py), run here with a stand-in sshd.

The Molecule scenarios reach their boxes through `docker exec`, which carries no SSH
connection; here the probe runs under a process that has SSH_CONNECTION while its own
environment lacks it, as under sudo.
"""

from __future__ import annotations

import base64
import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "roles" / "firewall" / "files" / "probe.sh"
spec = importlib.util.spec_from_file_location("firewall_state", ROOT / "plugins" / "plugin_utils" / "firewall_state.py")
assert spec and spec.loader
firewall_state = importlib.util.module_from_spec(spec)
spec.loader.exec_module(firewall_state)

MARK = firewall_state.PROBE_MARK
CONNECTION = "192.0.2.5 50000 192.0.2.11 2222"


def run_probe(sshd: Path, outer_env: dict[str, str]) -> str:
    """probe.sh as tasks/plan.yml runs it (sh -c SCRIPT probe.sh SSHD), two processes below one
    with `outer_env`, its own environment without SSH_CONNECTION (what sudo leaves)."""
    outer = 'env -u SSH_CONNECTION /bin/sh -c "$1" probe.sh "$2"; exit $?'
    result = subprocess.run(["/bin/sh", "-c", outer, "outer", PROBE.read_text(), str(sshd)],
                            env={"PATH": "/usr/bin:/bin", **outer_env}, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def fake_sshd(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "sshd"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_the_connection_is_found_in_a_parent_and_sshd_output_and_error_are_apart(tmp_path):
    sshd = fake_sshd(tmp_path, 'echo "sshd: a warning" >&2; printf "port 22\\nport 2222\\n"')
    probe = firewall_state.parse_probe(run_probe(sshd, {"SSH_CONNECTION": CONNECTION}))
    assert probe["ssh_connection"] == CONNECTION
    assert probe["sshd_output"] == "port 22\nport 2222"
    assert (probe["sshd_rc"], probe["sshd_error"]) == (0, "sshd: a warning")


def test_without_a_connection_and_with_a_failing_sshd_the_reasons_are_kept(tmp_path):
    sshd = fake_sshd(tmp_path, 'echo "sshd: no hostkeys available -- exiting." >&2; exit 1')
    probe = firewall_state.parse_probe(run_probe(sshd, {}))
    assert probe["ssh_connection"] == ""
    assert (probe["sshd_output"], probe["sshd_rc"]) == ("", 1)
    assert probe["sshd_error"] == "sshd: no hostkeys available -- exiting."
    missing = firewall_state.parse_probe(run_probe(tmp_path / "no-such-sshd", {}))
    assert missing["sshd_rc"] == 127 and "no-such-sshd" in missing["sshd_error"]


def probe_output(files: dict[str, str | None], ufw: bool) -> str:
    lines = [f"{MARK}ssh_connection", CONNECTION, f"{MARK}sshd", "port 22",
             f"{MARK}sshd_rc", "0", f"{MARK}sshd_error", ""]
    for path, text in files.items():
        lines.append(f"{MARK}file {path}")
        if text is not None:
            lines.append(base64.b64encode(text.encode()).decode())
    lines.append(f"{MARK}ufw")
    if ufw:
        lines += ["/usr/sbin/ufw", f"{MARK}status", "Status: active", "",
                  f"{MARK}added", "Added user rules:", "ufw allow 22/tcp"]
    return "\n".join(lines)


def test_files_come_back_byte_for_byte_and_absent_ones_empty():
    text = "*filter\n:ufw-user-input - [0:0]\nCOMMIT\n\n"
    output = probe_output({"/etc/ufw/after.rules": text, "/etc/ufw/after6.rules": None}, True)
    probe = firewall_state.parse_probe(output)
    assert probe["files"] == {"/etc/ufw/after.rules": text, "/etc/ufw/after6.rules": ""}
    assert probe["ufw_installed"] is True
    assert (probe["status"], probe["added"]) == ("Status: active", "Added user rules:\nufw allow 22/tcp")


def test_without_ufw_there_is_no_state():
    probe = firewall_state.parse_probe(probe_output({}, False))
    assert (probe["ufw_installed"], probe["status"], probe["added"]) == (False, "", "")


def test_a_probe_cut_short_or_a_garbled_file_is_refused():
    with pytest.raises(ValueError, match=r"lacks the sections \['sshd_error', 'ufw'\]"):
        firewall_state.parse_probe(probe_output({}, False).split(f"{MARK}sshd_error", maxsplit=1)[0])
    encoded = base64.b64encode(b"IPV6=yes\n").decode()
    garbled = probe_output({"/etc/default/ufw": "IPV6=yes\n"}, False).replace(encoded, "%%%")
    with pytest.raises(ValueError, match="/etc/default/ufw as the probe read it is not base64"):
        firewall_state.parse_probe(garbled)


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
    assert firewall_state.block_in_place(text, NAME, block, wanted) is in_place
