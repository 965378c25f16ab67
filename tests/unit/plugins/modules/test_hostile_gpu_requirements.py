# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hostile inputs for gpu_requirements: odd facts and versions give a clear error or a verdict."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.sparkfleet.serving.plugins.modules import gpu_requirements
from ansible_collections.sparkfleet.serving.tests.unit.plugins.hostile import (
    assert_clear_failure,
    call_module,
    hostile,
    python_values,
)

GB10 = {
    "present": True,
    "reason": "",
    "gpus": [{"name": "NVIDIA GB10", "compute_cap": "12.1", "memory_total_mib": None}],
    "names": ["NVIDIA GB10"],
    "compute_caps": ["12.1"],
    "driver_version": "580.95.05",
    "cuda_driver_version": "13.0",
    "toolkit": {"present": True, "version": "13.0", "path": "/usr/local/cuda-13.0/bin/nvcc"},
    "kernel_module": {"version": "580.95.05"},
    "architecture": "aarch64",
    "container_toolkit": {"present": True},
}
GENERATED_CASES = 150


def check(**args: object) -> dict:
    return call_module(gpu_requirements, {"facts": GB10, "fail_on_error": False, "report_warnings": False, **args})


def test_a_gpu_entry_without_a_name_is_refused_naming_the_option():
    facts = {**GB10, "gpus": [{"compute_cap": "12.1"}]}
    msg = assert_clear_failure(check(facts=facts, expected_gpu_names=["GB10"]), "facts.gpus[0]")
    assert "no name" in msg


@pytest.mark.parametrize("option", ["min_driver_version", "min_cuda_version", "min_toolkit_version"])
@pytest.mark.parametrize("value", ["abc", "580.x", "1..2", "-1"])
def test_a_minimum_version_that_is_not_a_version_is_refused_naming_the_option(option, value):
    msg = assert_clear_failure(check(**{option: value}), option)
    assert repr(value) in msg


def test_min_gpu_count_zero_is_not_read_as_one():
    facts = {**GB10, "gpus": []}
    result = check(facts=facts, min_gpu_count=0)
    assert not any(p["requirement"] == "GPU count" for p in result["problems"])
    assert any(p["requirement"] == "GPU count" for p in check(facts=facts)["problems"])
    assert_clear_failure(check(min_gpu_count=-1), "min_gpu_count")


@pytest.mark.parametrize(
    "facts",
    [
        {**GB10, "gpus": "GB10"},
        {**GB10, "gpus": [["NVIDIA GB10"]]},
        {**GB10, "toolkit": "13.0"},
        {**GB10, "driver_version": 580},
        {**GB10, "names": "NVIDIA GB10"},
        {**GB10, "container_toolkit": True},
    ],
)
def test_facts_of_the_wrong_shape_are_refused_naming_the_option(facts):
    assert_clear_failure(check(facts=facts), "facts")


versions = st.one_of(st.none(), st.text(max_size=10), st.from_regex(r"\A\d{1,3}(\.\d{1,3}){0,3}\Z"))


@hostile(GENERATED_CASES)
@given(
    facts=st.dictionaries(st.sampled_from(sorted(GB10)), python_values, max_size=6).map(lambda d: {**GB10, **d}),
    driver=versions,
    cuda=versions,
    count=st.none() | st.integers(-3, 8),
)
def test_property_any_facts_and_versions_give_a_clear_error_or_a_verdict(facts, driver, cuda, count):
    result = check(facts=facts, min_driver_version=driver, min_cuda_version=cuda, min_gpu_count=count)
    if result["failed"]:
        assert_clear_failure(result, "facts", "min_driver_version", "min_cuda_version", "min_gpu_count")
    else:
        assert isinstance(result["passed"], bool)
        assert all(p["message"] for p in result["problems"])
