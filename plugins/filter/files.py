# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter: whether files read by sparkfleet.serving.file_info are already as a role wants them."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

ATTRIBUTES = ("owner", "group")


def _mode(value: object) -> int:
    """'0644', '644' or 420 -> 420; anything else is a mistake in the role."""
    try:
        return int(str(value), 8) if isinstance(value, str) else int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"files_in_state: mode {value!r} is not an octal mode such as '0644'") from exc


def _expected_checksum(want: Mapping) -> str | None:
    if "content" in want:
        # SHA-1: the checksum ansible.builtin.copy and file_info compare, not a security check.
        return hashlib.sha1(str(want["content"]).encode("utf-8")).hexdigest()
    return want.get("checksum")


def _matches(found: Mapping, want: Mapping) -> bool:
    kind = want.get("type", "file")
    if found.get("type") != kind:
        return False
    if "mode" in want and (found.get("mode") is None or _mode(found["mode"]) != _mode(want["mode"])):
        return False
    if any(name in want and str(found.get(name)) != str(want[name]) for name in ATTRIBUTES):
        return False
    if kind == "file":
        expected = _expected_checksum(want)
        return expected is not None and _found_checksum(found) == expected
    return True


def _found_checksum(found: Mapping) -> str | None:
    """The SHA-1 file_info returned, or that of the content it read: a task that reads the
    file anyway asks for no checksum (`checksum: false` saves hashing every path it lists)."""
    if found.get("checksum") is not None:
        return found["checksum"]
    if isinstance(found.get("content"), str):
        try:
            return hashlib.sha1(base64.b64decode(found["content"], validate=True)).hexdigest()
        except (binascii.Error, ValueError) as exc:
            raise AnsibleFilterError("files_in_state: a file's content is not file_info's base64") from exc
    return None


def files_in_state(files: Mapping, wanted: list) -> bool:
    """True when every wanted path is there as wanted; False when any is not or was not read."""
    if not isinstance(files, Mapping) or not isinstance(wanted, list):
        raise AnsibleFilterError("files_in_state: expects file_info's files (a dict) and a list of wanted paths")
    for want in wanted:
        if not isinstance(want, Mapping) or "path" not in want:
            raise AnsibleFilterError(f"files_in_state: each wanted entry needs a path; found {want!r}")
        found = files.get(want["path"])
        if not isinstance(found, Mapping) or not _matches(found, want):
            return False
    return True


class FilterModule:
    def filters(self) -> dict:
        return {"files_in_state": files_in_state}
