# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the firewall role's probe (roles/firewall/files/probe.sh) found on a box, from its sections
(the sparkfleet.serving.probe_sections filter), and whether a block that ansible.builtin.blockinfile
manages is already as it would leave it."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

# The systemd drop-in that starts Docker after ufw at boot (firewall_plan.DOCKER_ORDER_UNIT) is one of the files.
DOCKER_ORDER_PATH = "/etc/systemd/system/docker.service.d/sparkfleet-firewall.conf"
FILES = ("/etc/ufw/after.rules", "/etc/ufw/after6.rules", "/etc/default/ufw", DOCKER_ORDER_PATH)
SECTIONS = ("ssh_connection", "sshd", *(f"file {path}" for path in FILES), "ufw")
# `ufw show added` ends each rule that has one with its comment.
COMMENT = re.compile(r" comment '(.*)'$")


def _decode(section: dict[str, Any], path: str) -> str:
    """A file the probe printed as base64; '' when it is not there (rc 1)."""
    if section.get("rc") != 0:
        return ""
    try:
        return base64.b64decode(section.get("output") or "", validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} as the probe read it is not base64 of UTF-8 text: {exc}") from exc


def read_probe(sections: dict[str, Any], errors: list[str]) -> dict[str, Any]:
    """The probe's sections -> ssh_connection, sshd_output (`sshd -T` when it succeeded), sshd_error
    (its message when it did not), files (path -> text, '' when absent), ufw_installed, status
    (`ufw status verbose`) and added (`ufw show added`). A ufw that cannot answer is an error."""
    missing = [name for name in SECTIONS if name not in sections]
    if missing:
        raise ValueError(f"the probe's output lacks the sections {missing}: it did not run to the end")
    sshd, ufw = sections["sshd"], sections["ufw"]
    state = {
        "ssh_connection": next(iter(sections["ssh_connection"].get("lines") or []), ""),
        "sshd_output": sshd.get("output", "") if sshd.get("rc") == 0 else "",
        "sshd_error": "" if sshd.get("rc") == 0 else f"exit {sshd.get('rc')}: {sshd.get('output', '').strip()}",
        "files": {path: _decode(sections[f"file {path}"], path) for path in FILES},
        "ufw_installed": ufw.get("rc") != 127,
        "status": ufw.get("output", "").strip() if ufw.get("rc") == 0 else "",
        "added": (sections.get("added") or {}).get("output", "").strip(),
    }
    for name, command in (("ufw", "ufw status verbose"), ("added", "ufw show added")):
        rc = (sections.get(name) or {"rc": 0})["rc"]
        if state["ufw_installed"] and rc != 0:
            errors.append(f"`{command}` failed (exit {rc}): {sections[name].get('output', '').strip()}. "
                          "ufw must answer before the role changes its rules: repair it (`ufw status` as root).")
    return state


def rule_comments(added: str) -> list[str]:
    """The comment of every rule in `ufw show added` that has one."""
    return [m.group(1) for m in map(COMMENT.search, added.splitlines()) if m]


def block_in_place(text: str, name: str, block: str, wanted: bool) -> bool:
    """Whether blockinfile (marker "# {mark} NAME") would leave `text` as it is: one begin and
    one end marker around exactly `block`; or, when the block is not wanted or empty (what
    blockinfile removes), no marker at all."""
    begin, end = f"# BEGIN {name}", f"# END {name}"
    if wanted and block:
        return text.count(begin) == 1 and text.count(end) == 1 and "\n".join((begin, block, end, "")) in text
    return begin not in text and end not in text


def line_in_place(text: str, regexp: str, line: str) -> bool:
    """Whether ansible.builtin.lineinfile (regexp, line) would leave `text` as it is: the last
    line that matches is the line already."""
    matching = [candidate for candidate in text.splitlines() if re.search(regexp, candidate)]
    return bool(matching) and matching[-1] == line
