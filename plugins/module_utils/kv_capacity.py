# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How many tokens the KV cache holds at a gpu_memory_utilization: measured for the models
kept in model_architecture.KNOWN_MODELS on a 128 GB DGX Spark, estimated from config.json for
the others (and labelled as an estimate).
"""

from __future__ import annotations

from ansible_collections.sparkfleet.serving.plugins.module_utils.model_architecture import (
    MEASURED_MEM_TOTAL_RANGE,
    attention_layer_count,
    kv_bytes_per_token_per_layer,
)


def interpolate(points: tuple[tuple[float, int], ...], x: float) -> float:
    """Piecewise-linear through the points, extended linearly beyond both ends."""
    if x <= points[0][0]:
        (x0, y0), (x1, y1) = points[0], points[1]
    elif x >= points[-1][0]:
        (x0, y0), (x1, y1) = points[-2], points[-1]
    else:
        pairs = zip(points, points[1:])  # noqa: B905, RUF007 -- modules still run on Python 3.8 targets
        (x0, y0), (x1, y1) = next((a, b) for a, b in pairs if a[0] <= x <= b[0])
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def weights_size(settings: dict, known: dict | None) -> tuple[int | None, str]:
    if settings.get("weights_bytes"):
        return int(settings["weights_bytes"]), "given (weights_bytes)"
    if settings.get("weights_on_disk_bytes"):
        return int(settings["weights_on_disk_bytes"]), f"safetensors files in {settings.get('model_path')}"
    if known:
        return known["weights_bytes"], "known model"
    return None, "unknown"


def capacity(settings: dict, facts: dict, plan: dict) -> dict:
    """KV-cache capacity in tokens for the plan's utilisation, with where the figure comes from."""
    util = plan["utilization"]
    known = plan["known"]
    mem_total = facts.get("mem_total_bytes")
    points = known.get("measured_kv_tokens") if known else None
    kv_dtype = plan["kv_cache_dtype"]
    if (
        points
        and facts.get("unified_memory")
        and mem_total
        and MEASURED_MEM_TOTAL_RANGE[0] <= mem_total <= MEASURED_MEM_TOTAL_RANGE[1]
        and not kv_dtype.startswith("fp8")
    ):
        measured = dict(points)
        tokens = measured.get(round(util, 2)) if round(util, 2) == util else None
        exact = tokens is not None
        tokens = tokens if exact else max(0, int(interpolate(points, util)))
        how = "measured" if exact else ("interpolated" if points[0][0] <= util <= points[-1][0] else "extrapolated")
        return {
            "tokens": tokens,
            "estimate": not exact,
            "confidence": "high" if how != "extrapolated" else "medium",
            "source": f"DGX Spark measurement ({how}): Qwen3.5-35B-A3B-FP8 on a 128 GB DGX Spark, KV dtype auto",
            "points": points,
        }
    config = plan["config"]
    layers = attention_layer_count(config)
    per_layer = kv_bytes_per_token_per_layer(config, kv_dtype)
    memory = mem_total if facts.get("unified_memory") else facts.get("gpu_memory_total_bytes") or mem_total
    weights = plan["weights_bytes"]
    if not (layers and per_layer and memory and weights is not None):
        missing = [
            n
            for n, v in (("config.json", layers and per_layer), ("memory size", memory), ("weights size", weights))
            if not v
        ]
        return {
            "tokens": None,
            "estimate": True,
            "confidence": "none",
            "source": "unknown: no " + ", no ".join(missing),
        }
    per_token = layers * per_layer
    # A draft model (speculative decoding) sits in the same share as the main weights.
    draft = int(settings.get("draft_weights_bytes") or 0)
    budget = util * memory - weights - draft - plan["thresholds"]["activation_reserve_bytes"]
    hybrid_note = "; hybrid model: vLLM's recurrent-state pages make the real figure lower" if plan["hybrid"] else ""
    return {
        "tokens": max(0, int(budget // per_token)),
        "estimate": True,
        "confidence": "low" if plan["hybrid"] else "medium",
        "source": f"estimate from config.json ({layers} attention layers x {per_layer} bytes per token{hybrid_note})",
        "bytes_per_token": per_token,
        "memory_bytes": memory,
        "draft_bytes": draft,
    }


def utilization_for(tokens: int, cap: dict, plan: dict) -> float | None:
    """The smallest utilisation (2 decimals) whose capacity holds `tokens`, or None above 0.95."""
    for step in range(50, 96):
        util = step / 100
        if cap.get("points"):
            if interpolate(cap["points"], util) >= tokens:
                return util
        elif cap.get("bytes_per_token"):
            budget = (util * cap["memory_bytes"] - plan["weights_bytes"] - cap.get("draft_bytes", 0)
                      - plan["thresholds"]["activation_reserve_bytes"])
            if budget / cap["bytes_per_token"] >= tokens:
                return util
    return None
