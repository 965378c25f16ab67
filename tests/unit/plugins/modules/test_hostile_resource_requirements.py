# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hostile inputs for resource_requirements: odd paths, meminfo and numbers."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.sparkfleet.serving.plugins.modules import resource_requirements
from ansible_collections.sparkfleet.serving.tests.unit.plugins.hostile import (
    assert_clear_failure,
    call_module,
    hostile,
    snapshot,
)

GIB = 1024**3
GENERATED_CASES = 150


def check(tmp: Path, **args: object) -> dict:
    args.setdefault("weights_dir", str(tmp / "weights"))
    args.setdefault("weights_bytes", GIB)
    args.setdefault("mem_total_bytes", 128 * GIB)
    return call_module(resource_requirements, {"fail_on_error": False, **args})


def test_a_weights_dir_that_is_or_lies_under_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    assert_clear_failure(check(tmp_path, weights_dir=str(tmp_path / "file")), "weights_dir")
    assert_clear_failure(check(tmp_path, weights_dir=str(tmp_path / "file/below/weights")), "weights_dir")


def test_a_binary_or_foreign_meminfo_is_refused_naming_the_file(tmp_path):
    for content in (b"\x00\xff\xfe\x00", b"Hello: world\n", b""):
        path = tmp_path / "meminfo"
        path.write_bytes(content)
        msg = assert_clear_failure(check(tmp_path, mem_total_bytes=None, meminfo_path=str(path)), "meminfo_path")
        assert str(path) in msg
    assert_clear_failure(check(tmp_path, mem_total_bytes=None, meminfo_path=str(tmp_path)), "meminfo_path")


@pytest.mark.parametrize(
    ("option", "value"),
    [("weights_bytes", 0), ("weights_bytes", -5), ("mem_total_bytes", 0), ("disk_margin_bytes", -1),
     ("memory_headroom_bytes", -1)],
)  # fmt: skip
def test_sizes_that_cannot_be_meant_are_refused_naming_the_option(tmp_path, option, value):
    assert_clear_failure(check(tmp_path, **{option: value}), option)


@hostile(GENERATED_CASES)
@given(
    meminfo=st.binary(max_size=80) | st.text(max_size=80).map(str.encode)
    | st.integers(0, 2**40).map(lambda n: f"MemTotal: {n} kB\n".encode()),
    weights=st.integers(-(2**40), 2**42),
    headroom=st.integers(-(2**33), 2**40),
    below_a_file=st.booleans(),
)
def test_property_any_meminfo_sizes_and_paths_give_a_clear_error_or_a_verdict(meminfo, weights, headroom, below_a_file):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "meminfo").write_bytes(meminfo)
        (root / "file").write_text("x")
        weights_dir = root / ("file/weights" if below_a_file else "weights")
        before = snapshot(root)
        result = check(
            root,
            weights_dir=str(weights_dir),
            weights_bytes=weights,
            memory_headroom_bytes=headroom,
            mem_total_bytes=None,
            meminfo_path=str(root / "meminfo"),
        )
        assert snapshot(root) == before
    if result["failed"]:
        assert_clear_failure(result, "meminfo_path", "weights_bytes", "memory_headroom_bytes", "weights_dir")
    else:
        assert isinstance(result["passed"], bool)
        assert result["memory"]["mem_total_bytes"] > 0
