# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Version ordering as the requirement checks use it: numeric per component, any length."""

from __future__ import annotations

import hypothesis
from hypothesis import strategies

from ansible_collections.sparkfleet.serving.plugins.module_utils.gpu_requirements import check_requirements
from ansible_collections.sparkfleet.serving.plugins.module_utils.versions import compare_versions

components = strategies.lists(strategies.integers(min_value=0, max_value=999), min_size=1, max_size=4)


def text(parts: list[int], width: int = 0) -> str:
    return ".".join(str(p).zfill(width) for p in parts)


def padded(parts: list[int], size: int = 4) -> list[int]:
    return parts + [0] * (size - len(parts))


@hypothesis.given(components, components)
def test_order_is_that_of_zero_padded_integer_tuples(left, right):
    want = (padded(left) > padded(right)) - (padded(left) < padded(right))
    assert compare_versions(text(left), text(right)) == want


@hypothesis.given(components)
def test_leading_zeros_do_not_change_a_version(parts):
    # nvidia-smi prints 580.95.05: the 05 is five.
    assert compare_versions(text(parts, width=2), text(parts)) == 0


@hypothesis.given(strategies.integers(min_value=0, max_value=999), strategies.integers(min_value=0, max_value=99))
def test_driver_requirement_accepts_exactly_the_580_branch_and_newer(minor, patch):
    for branch, ok in ((535, False), (575, False), (580, True), (590, True)):
        facts = {"present": True, "driver_version": f"{branch}.{minor}.{patch:02d}", "gpus": [{"name": "NVIDIA GB10"}]}
        assert check_requirements(facts, {"min_driver_version": "580"})["passed"] is ok
