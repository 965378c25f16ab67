# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.serving.plugins.module_utils.versions import (
    compare_versions,
    parse_version,
    version_at_least,
)

FIELD_DRIVERS = ["535.247.01", "580.82.07", "580.95.05", "580.126.09", "580.142", "580.159.03", "580.173.02"]


def test_field_drivers_sort_numerically_not_as_strings():
    shuffled = sorted(FIELD_DRIVERS, reverse=True)
    assert sorted(shuffled, key=parse_version) == FIELD_DRIVERS
    assert sorted(FIELD_DRIVERS) != FIELD_DRIVERS  # string order would be wrong


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        ("580.95.05", "580.126.09", -1),
        ("580.126.09", "580.142", -1),
        ("580.142", "580.95.05", 1),
        ("13.0", "13", 0),
        ("13.0.0", "13.0", 0),
        ("12.2", "13.0", -1),
        ("V13.0", "13.0", 0),
        ("580", "580.0.1", -1),
    ],
)
def test_compare_versions(left, right, expected):
    assert compare_versions(left, right) == expected


def test_version_at_least_includes_equal():
    assert version_at_least("580.142", "580")
    assert version_at_least("580", "580.0")
    assert not version_at_least("535.247.01", "580")


@pytest.mark.parametrize("text", ["", "abc", "580.x", "1..2", "[N/A]"])
def test_non_versions_are_refused_with_the_text_named(text):
    with pytest.raises(ValueError, match="not a version number"):
        parse_version(text)
