# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the firewall role reads of a box (roles/firewall/files/probe.sh), and whether a block
that ansible.builtin.blockinfile manages is already as it would leave it."""

from __future__ import annotations

import base64
import binascii
from typing import Any

PROBE_MARK = "### sparkfleet.serving.firewall probe: "


def _sections(stdout: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.splitlines():
        if line.startswith(PROBE_MARK):
            current = sections.setdefault(line[len(PROBE_MARK):], [])
        elif current is not None:
            current.append(line)
    return sections


def _decode(lines: list[str], path: str) -> str:
    try:
        return base64.b64decode("".join(lines), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} as the probe read it is not base64 of UTF-8 text: {exc}") from exc


def parse_probe(stdout: str) -> dict[str, Any]:
    """probe.sh's output -> ssh_connection, sshd_output / sshd_rc / sshd_error (as a command
    result would give them), files (path -> text; '' when absent), ufw_installed, status
    (`ufw status verbose`) and added (`ufw show added`)."""
    sections = _sections(stdout)
    missing = {"ssh_connection", "sshd", "sshd_rc", "sshd_error", "ufw"} - set(sections)
    if missing:
        raise ValueError(f"the probe's output lacks the sections {sorted(missing)}: it did not run to the end")
    rc = "".join(sections["sshd_rc"]).strip()
    return {
        "ssh_connection": next(iter(sections["ssh_connection"]), ""),
        "sshd_output": "\n".join(sections["sshd"]),
        "sshd_rc": int(rc) if rc.isdigit() else -1,
        "sshd_error": "\n".join(sections["sshd_error"]).strip(),
        "files": {name[len("file "):]: _decode(lines, name[len("file "):])
                  for name, lines in sections.items() if name.startswith("file ")},
        "ufw_installed": bool(sections["ufw"]),
        "status": "\n".join(sections.get("status", [])).strip(),
        "added": "\n".join(sections.get("added", [])).strip(),
    }


def block_in_place(text: str, name: str, block: str, wanted: bool) -> bool:
    """Whether blockinfile (marker "# {mark} NAME") would leave `text` as it is: one begin and
    one end marker around exactly `block`; or, when the block is not wanted or empty (what
    blockinfile removes), no marker at all."""
    begin, end = f"# BEGIN {name}", f"# END {name}"
    if wanted and block:
        return text.count(begin) == 1 and text.count(end) == 1 and "\n".join((begin, block, end, "")) in text
    return begin not in text and end not in text
