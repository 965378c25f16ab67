# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Numeric, per-component version comparison for driver and CUDA versions.

NVIDIA driver versions are not semver and do not sort as strings: 580.95.05 <
580.126.09 < 580.142 (components compare as integers, a missing component is 0).
"""

from __future__ import annotations

import re

_VERSION = re.compile(r"^\s*[vV]?(\d+(?:\.\d+)*)\s*$")


def parse_version(text: str) -> tuple[int, ...]:
    """Return the numeric components of a version such as '580.95.05' or 'V13.0'.

    Raises ValueError naming the text when it is not a dotted number.
    """
    match = _VERSION.match(str(text))
    if not match:
        raise ValueError(f"not a version number: {text!r} (expected digits separated by dots, e.g. 580.142)")
    parts = [int(part) for part in match.group(1).split(".")]
    # Trailing zeros do not change the value: 13.0 == 13 == 13.0.0.
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def compare_versions(left: str, right: str) -> int:
    """Return -1, 0 or 1 as left is older than, equal to or newer than right."""
    a, b = parse_version(left), parse_version(right)
    return (a > b) - (a < b)


def version_at_least(found: str, required: str) -> bool:
    """True when found is the same as or newer than required."""
    return compare_versions(found, required) >= 0
