# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hostile inputs for gpu_facts: odd nvidia-smi outputs, meminfo files and options."""

from __future__ import annotations

import stat
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.sparkfleet.serving.plugins.modules import gpu_facts
from ansible_collections.sparkfleet.serving.tests.unit.plugins.hostile import (
    assert_clear_failure,
    call_module,
    hostile,
)

GENERATED_CASES = 60
MEMINFO = "MemTotal:       127601248 kB\nMemAvailable:   121045876 kB\n"


def gather(root: Path, **args: object) -> dict:
    if "meminfo_path" not in args:
        (root / "meminfo").write_text(MEMINFO)
        args["meminfo_path"] = str(root / "meminfo")
    args.setdefault("cuda_search_globs", [])
    args.setdefault("driver_version_file", str(root / "absent"))
    return call_module(gpu_facts, args)


def fake_smi(root: Path, output: bytes) -> str:
    (root / "out").write_bytes(output)
    smi = root / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\ncat "{root / "out"}"\n')
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    return str(smi)


def test_a_binary_meminfo_is_refused_naming_the_option(tmp_path):
    (tmp_path / "meminfo").write_bytes(b"\x7fELF\x02\x01\x01\x00\xff")
    msg = assert_clear_failure(gather(tmp_path, meminfo_path=str(tmp_path / "meminfo")), "meminfo_path")
    assert "UTF-8" in msg


def test_an_nvidia_smi_that_is_a_directory_is_refused_naming_the_option(tmp_path):
    assert_clear_failure(gather(tmp_path, nvidia_smi=str(tmp_path)), "nvidia_smi")


def test_a_command_timeout_below_one_second_is_refused(tmp_path):
    assert_clear_failure(gather(tmp_path, command_timeout=0), "command_timeout")


@hostile(GENERATED_CASES)
@given(
    output=st.binary(max_size=120)
    | st.lists(st.lists(st.sampled_from(["0", "NVIDIA GB10", "[N/A]", "12.1", "", "x,y", "81559", "é"]), max_size=8)
               .map(", ".join), max_size=3).map(lambda rows: "\n".join(rows).encode()),
)  # fmt: skip
def test_property_any_nvidia_smi_output_gives_facts(output):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        result = gather(root, nvidia_smi=fake_smi(root, output))
    assert not result["failed"], result
    facts = result["ansible_facts"]["sparkfleet_gpu"]
    assert facts["present"] is (facts["count"] > 0 and not facts["reason"])
    assert all(isinstance(gpu["name"], str) for gpu in facts["gpus"])
