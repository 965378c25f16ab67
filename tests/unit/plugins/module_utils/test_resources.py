# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

from ansible_collections.sparkfleet.serving.plugins.module_utils.resources import (
    GIB,
    check_disk,
    check_memory,
    is_partial,
)
from ansible_collections.sparkfleet.serving.plugins.module_utils.serving_plan import check_plan

FP8 = int(34.22 * GIB)


def disk(**changes) -> dict:
    args = {
        "weights_dir": "/srv/models/q",
        "checked_path": "/srv",
        "free_bytes": 100 * GIB,
        "present_bytes": 0,
        "expected_bytes": FP8,
        "margin_bytes": 10 * GIB,
    }
    return check_disk(**{**args, **changes})


def test_fresh_download_needs_weights_plus_margin():
    assert disk(free_bytes=FP8 + 10 * GIB)["problems"] == []
    short = disk(free_bytes=FP8 + 10 * GIB - 1)["problems"]
    assert len(short) == 1
    assert short[0]["found"] == "44.2 GiB free at /srv"
    assert short[0]["required"] == "44.2 GiB (34.2 GiB still to download into /srv/models/q + 10.0 GiB margin)"


def test_files_already_there_are_not_downloaded_again():
    result = disk(free_bytes=15 * GIB, present_bytes=30 * GIB)
    assert result["to_download_bytes"] == FP8 - 30 * GIB
    assert result["problems"] == []


def test_complete_download_needs_no_space():
    result = disk(free_bytes=0, present_bytes=FP8)
    assert (result["to_download_bytes"], result["required_free_bytes"], result["problems"]) == (0, 0, [])


def test_memory_must_hold_weights_and_headroom():
    assert check_memory(mem_total_bytes=int(121.7 * GIB), weights_bytes=FP8, headroom_bytes=32 * GIB)["problems"] == []
    small = check_memory(mem_total_bytes=24 * GIB, weights_bytes=FP8, headroom_bytes=32 * GIB)["problems"]
    assert small[0]["found"] == "MemTotal 24.0 GiB"
    assert small[0]["required"] == ">= 66.2 GiB (34.2 GiB weights + 32.0 GiB headroom)"
    unknown = check_memory(mem_total_bytes=None, weights_bytes=FP8, headroom_bytes=0)["problems"]
    assert unknown[0]["found"] == "unknown (meminfo unreadable)"


def test_partial_downloads_do_not_count():
    assert is_partial("model-00001-of-00014.safetensors.incomplete")
    assert not is_partial("model-00001-of-00014.safetensors")


def test_one_memory_rule_for_the_weights():
    # resource_requirements and serving_plan used to disagree: 70 GiB of weights on a 128 GB Spark
    # passed one (32 GiB headroom) and failed the other (64 GiB must remain). Both use this rule now.
    spark = {"unified_memory": True, "mem_total_bytes": 127601248 * 1024}
    for weights, fits in ((70 * GIB, False), (int(34.22 * GIB), True)):
        memory = check_memory(mem_total_bytes=spark["mem_total_bytes"], weights_bytes=weights)["problems"]
        plan = check_plan({"model": "/model", "weights_bytes": weights, "max_model_len": 1024,
                           "gpu_memory_utilization": 0.75, "enforce_eager": True, "shm_size": "16g",
                           "served_model_name": "m"}, spark)
        refused = any(f["rule"] == "weights_leave_too_little_memory" for f in plan["findings"])
        assert (memory == []) is fits
        assert refused is not fits
