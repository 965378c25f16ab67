# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Disk and memory checks for the model weights: pure functions over measured numbers."""

from __future__ import annotations

from ansible_collections.sparkfleet.serving.plugins.module_utils.gpu_requirements import problem

GIB = 1024**3
# The one rule for the weights in unified memory (resource_requirements and serving_plan both
# use it): what must remain after loading them. On a 128 GB Spark the BF16 Qwen3.5-35B-A3B
# (64.69 GiB of weights) left ~56 GiB and ran out of memory while profiling; the FP8
# checkpoint (34.22 GiB) left ~87 GiB and was stable.
MIN_FREE_AFTER_WEIGHTS_BYTES = 64 * GIB
# Files a download tool is still writing: they do not count as present weights.
PARTIAL_SUFFIXES = (".incomplete", ".part", ".tmp", ".lock")


def gib(value: int | None) -> str:
    return "unknown" if value is None else f"{value / GIB:.1f} GiB"


def is_partial(name: str) -> bool:
    return name.endswith(PARTIAL_SUFFIXES)


def check_disk(  # noqa: PLR0913 -- each number is measured separately
    *,
    weights_dir: str,
    checked_path: str,
    free_bytes: int,
    present_bytes: int,
    expected_bytes: int,
    margin_bytes: int,
) -> dict:
    """Free space where the weights go must hold what is still to download plus a margin."""
    to_download = max(0, expected_bytes - present_bytes)
    required = to_download + margin_bytes if to_download else 0
    result = {
        "weights_dir": weights_dir,
        "checked_path": checked_path,
        "free_bytes": free_bytes,
        "present_bytes": present_bytes,
        "expected_bytes": expected_bytes,
        "to_download_bytes": to_download,
        "required_free_bytes": required,
        "problems": [],
    }
    if free_bytes < required:
        result["problems"].append(
            problem(
                "Disk space for the model weights",
                f"{gib(free_bytes)} free at {checked_path}",
                f"{gib(required)} ({gib(to_download)} still to download into {weights_dir}"
                f" + {gib(margin_bytes)} margin)",
                "free space on that filesystem or point the weights directory at a larger one",
            )
        )
    return result


def memory_shortfall(mem_total_bytes: int, weights_bytes: int, headroom_bytes: int) -> int:
    """Bytes missing for the weights plus the headroom (KV cache, activations, OS); 0 when they fit."""
    return max(0, weights_bytes + headroom_bytes - mem_total_bytes)


def check_memory(
    *, mem_total_bytes: int | None, weights_bytes: int, headroom_bytes: int = MIN_FREE_AFTER_WEIGHTS_BYTES
) -> dict:
    """Total memory must hold the weights plus a minimum headroom (KV cache, activations, OS)."""
    required = weights_bytes + headroom_bytes
    result = {"mem_total_bytes": mem_total_bytes, "required_bytes": required, "problems": []}
    if mem_total_bytes is None:
        result["problems"].append(
            problem(
                "Memory", "unknown (meminfo unreadable)", f">= {gib(required)}", "check that /proc/meminfo is readable"
            )
        )
    elif memory_shortfall(mem_total_bytes, weights_bytes, headroom_bytes):
        result["problems"].append(
            problem(
                "Memory for the model",
                f"MemTotal {gib(mem_total_bytes)}",
                f">= {gib(required)} ({gib(weights_bytes)} weights + {gib(headroom_bytes)} headroom)",
                "serve a smaller or more quantised model, or use a box with more memory",
            )
        )
    return result
