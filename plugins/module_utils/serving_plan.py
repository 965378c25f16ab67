# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Check a vLLM serving plan against the box before anything is installed.

Each rule is one pitfall of serving vLLM on a DGX Spark: it returns errors (vLLM would
refuse to start, crash or freeze the box) and warnings (it works but is risky). The
KV-cache capacity of the shipped Qwen3.5-35B-A3B-FP8 profile comes from measurements on a
128 GB Spark; for other models it is estimated from the model's config.json and labelled
as an estimate.
"""

from __future__ import annotations

import math
import re

from ansible_collections.sparkfleet.serving.plugins.module_utils.resources import (
    MIN_FREE_AFTER_WEIGHTS_BYTES,
    memory_shortfall,
)
from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_args import tri_state

GIB = 1024**3

# Measured on a 128 GB DGX Spark (MemTotal ~121.7 GiB), vLLM 0.19, enforce-eager,
# Qwen3.5-35B-A3B-FP8, KV cache dtype auto: utilisation -> KV tokens. 0.75 is vLLM's own
# start-up figure ("GPU KV cache size", 2567 blocks x 16 tokens); 0.80-0.90 are rounded
# figures of the same deployment.
FIELD_KV_TOKENS = ((0.75, 41_072), (0.80, 45_000), (0.85, 50_000), (0.90, 54_000))
# The measured figures hold for a box of this size only.
FIELD_MEM_TOTAL_RANGE = (115 * GIB, 128 * GIB)

# Architecture of Qwen3.5-35B-A3B (text part of its config.json): 40 layers, every 4th one
# full attention, the rest Gated DeltaNet (linear attention with a recurrent state).
QWEN35_35B_A3B_CONFIG = {
    "model_type": "qwen3_5_moe_text",
    "num_hidden_layers": 40,
    "full_attention_interval": 4,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "mamba_ssm_dtype": "float32",
    "max_position_embeddings": 262_144,
}

# Models whose figures are known (measured or from their published checkpoints), by the
# last part of their name.
KNOWN_MODELS = {
    "qwen3.5-35b-a3b-fp8": {
        "weights_bytes": int(34.22 * GIB),
        "precision": "fp8",
        "config": QWEN35_35B_A3B_CONFIG,
        "field_kv_tokens": FIELD_KV_TOKENS,
    },
    "qwen3.5-35b-a3b": {
        "weights_bytes": int(64.69 * GIB),
        "precision": "bf16",
        "config": QWEN35_35B_A3B_CONFIG,
        "fp8_variant": "Qwen/Qwen3.5-35B-A3B-FP8",
    },
}

# model_type values of hybrid attention / state-space models (vLLM aligns their KV block
# size to the recurrent state, which is what trips fp8 KV caches).
HYBRID_MODEL_TYPES = {
    "qwen3_next",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_5_moe_text",
    "qwen3_5_text",
    "jamba",
    "nemotron_h",
    "falcon_h1",
    "granitemoehybrid",
    "bamba",
    "zamba2",
    "plamo2",
    "minimax_text_01",
    "lfm2",
}

NVFP4_ISSUE = "https://github.com/vllm-project/vllm/issues/35519"
DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
# vLLM's max_num_batched_tokens when not set, as its own assertion reports it: "In Mamba
# cache align mode, block_size (2096) must be <= max_num_batched_tokens (2048)".
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
# max_model_len -1 (or "auto"): vLLM 0.19 derives the length from the model and fits it to the KV cache.
AUTO_MAX_MODEL_LEN = -1
# vLLM's --gpu-memory-utilization when not given (CacheConfig, vllm/config/cache.py).
DEFAULT_UTILIZATION = 0.9
# Choices of --dtype and --kv-cache-dtype in vLLM 0.19.1 (ModelDType in vllm/config/model.py,
# CacheDType in vllm/config/cache.py); vLLM refuses any other value.
VLLM_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
VLLM_KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla")
# vLLM rounds the attention block size of hybrid models up to a multiple of this.
BLOCK_ALIGNMENT = 16

DEFAULT_THRESHOLDS = {
    # Memory that must be left after the weights on unified memory (the one rule, kept in
    # resources.py: resource_requirements applies it too).
    "min_free_after_weights_bytes": MIN_FREE_AFTER_WEIGHTS_BYTES,
    "warn_utilization": 0.85,
    "max_utilization": 0.95,
    # Docker's default /dev/shm is 64 MB, which breaks vLLM's inter-process queues.
    "min_shm_bytes": 2 * GIB,
    "recommended_shm_bytes": 16 * GIB,
    # Activations, CUDA context and allocator slack kept out of the KV estimate.
    "activation_reserve_bytes": 4 * GIB,
}

# How quantised checkpoints show themselves (first match wins).
QUANT_PATTERNS = (
    (r"nvfp4|modelopt_fp4", "nvfp4"),
    (r"mxfp4|\bfp4\b", "fp4"),
    (r"\b(awq|gptq|int4|w4a16|bitsandbytes|awq_marlin|gptq_marlin)\b", "int4"),
    (r"fp8", "fp8"),
    (r"\b(int8|w8a8)\b", "int8"),
)

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str | int | None) -> int | None:
    """Bytes of a Docker size such as "16g", "512m", "64MB" or 67108864; None when empty.

    Raises ValueError naming the text when it is not a size.
    """
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    if isinstance(text, int):
        return text
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"not a size: {text!r} (expected a number with an optional unit b, k, m, g, e.g. 16g)")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


def gib(value: float | None) -> str:
    return "unknown" if value is None else f"{value / GIB:.1f} GiB"


def model_key(model: str | None) -> str:
    """The last part of a model id or path, lower case: Qwen/Qwen3.5-35B-A3B-FP8 -> qwen3.5-35b-a3b-fp8."""
    return (model or "").rstrip("/").rsplit("/", 1)[-1].lower()


def text_config(config: dict | None) -> dict:
    """Multimodal configs (Qwen3.5) keep the language model's numbers under text_config."""
    if not config:
        return {}
    inner = config.get("text_config")
    if isinstance(inner, dict):
        return {**config, **inner, "quantization_config": config.get("quantization_config")}
    return config


def precision_of(settings: dict, config: dict, known: dict | None) -> str:
    """The checkpoint's weight precision: nvfp4, fp4, int4, fp8, int8, bf16, fp16 or fp32.

    From the quantization option, the config's quantization_config and the model's name
    (community checkpoints say it there: ...-FP8, ...-NVFP4, ...-AWQ), then the dtype.
    """
    qconf = config.get("quantization_config") or {}
    text = " ".join(
        [
            (settings.get("quantization") or "").lower(),
            str(qconf.get("quant_method") or "").lower(),
            str(qconf.get("quant_algo") or "").lower(),
            model_key(settings.get("model")),
            model_key(settings.get("model_path")),
        ]
    )
    for pattern, precision in QUANT_PATTERNS:
        if re.search(pattern, text):
            return precision
    if known:
        return known["precision"]
    dtype = (settings.get("dtype") or "auto").lower()
    if dtype in {"float32", "float", "float16", "half"}:
        return "fp32" if dtype.startswith("float3") or dtype == "float" else "fp16"
    torch_dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16").lower()
    return "fp16" if torch_dtype == "float16" else "bf16"


def is_hybrid(config: dict) -> bool:
    layer_types = config.get("layer_types") or []
    if any(str(t) in {"linear_attention", "mamba", "mamba2", "ssm"} for t in layer_types):
        return True
    return str(config.get("model_type") or "") in HYBRID_MODEL_TYPES or "full_attention_interval" in config


def attention_layer_count(config: dict) -> int | None:
    layers = config.get("num_hidden_layers")
    layer_types = config.get("layer_types")
    if layer_types:
        return sum(1 for t in layer_types if t in {"full_attention", "attention", "sliding_attention"})
    if layers and config.get("full_attention_interval"):
        return int(layers) // int(config["full_attention_interval"])
    return int(layers) if layers else None


def head_dim(config: dict) -> int | None:
    if config.get("head_dim"):
        return int(config["head_dim"])
    if config.get("hidden_size") and config.get("num_attention_heads"):
        return int(config["hidden_size"]) // int(config["num_attention_heads"])
    return None


def kv_bytes_per_token_per_layer(config: dict, kv_cache_dtype: str) -> int | None:
    heads = config.get("num_key_value_heads") or config.get("num_attention_heads")
    dim = head_dim(config)
    if not heads or not dim:
        return None
    dtype_bytes = 1 if kv_cache_dtype.startswith("fp8") else 2
    return 2 * int(heads) * dim * dtype_bytes


def recurrent_state_bytes(config: dict) -> int | None:
    """Bytes of one Gated DeltaNet layer's state (conv state in bf16, SSM state in its dtype)."""
    keys = (
        "linear_num_key_heads",
        "linear_num_value_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_conv_kernel_dim",
    )
    if not all(config.get(k) for k in keys):
        return None
    nk, nv, dk, dv, kernel = (int(config[k]) for k in keys)
    conv = (kernel - 1) * (2 * nk * dk + nv * dv) * 2
    ssm = nv * dk * dv * DTYPE_BYTES.get(str(config.get("mamba_ssm_dtype") or "float32"), 4)
    return conv + ssm


def aligned_block_size(config: dict, kv_cache_dtype: str) -> int | None:
    """The attention block size vLLM picks so that one block's page equals the recurrent state.

    Reproduces the number vLLM's assertion shows for Qwen3.5-35B-A3B with fp8 KV: 2096.
    """
    state = recurrent_state_bytes(config)
    per_token = kv_bytes_per_token_per_layer(config, kv_cache_dtype)
    if not state or not per_token:
        return None
    return math.ceil(math.ceil(state / per_token) / BLOCK_ALIGNMENT) * BLOCK_ALIGNMENT


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
    field = known.get("field_kv_tokens") if known else None
    kv_dtype = plan["kv_cache_dtype"]
    if (
        field
        and facts.get("unified_memory")
        and mem_total
        and FIELD_MEM_TOTAL_RANGE[0] <= mem_total <= FIELD_MEM_TOTAL_RANGE[1]
        and not kv_dtype.startswith("fp8")
    ):
        measured = dict(field)
        tokens = measured.get(round(util, 2)) if round(util, 2) == util else None
        exact = tokens is not None
        tokens = tokens if exact else max(0, int(interpolate(field, util)))
        how = "measured" if exact else ("interpolated" if field[0][0] <= util <= field[-1][0] else "extrapolated")
        return {
            "tokens": tokens,
            "estimate": not exact,
            "confidence": "high" if how != "extrapolated" else "medium",
            "source": f"DGX Spark measurement ({how}): Qwen3.5-35B-A3B-FP8 on a 128 GB DGX Spark, KV dtype auto",
            "points": field,
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
    budget = util * memory - weights - plan["thresholds"]["activation_reserve_bytes"]
    hybrid_note = "; hybrid model: vLLM's recurrent-state pages make the real figure lower" if plan["hybrid"] else ""
    return {
        "tokens": max(0, int(budget // per_token)),
        "estimate": True,
        "confidence": "low" if plan["hybrid"] else "medium",
        "source": f"estimate from config.json ({layers} attention layers x {per_layer} bytes per token{hybrid_note})",
        "bytes_per_token": per_token,
        "memory_bytes": memory,
    }


def utilization_for(tokens: int, cap: dict, plan: dict) -> float | None:
    """The smallest utilisation (2 decimals) whose capacity holds `tokens`, or None above 0.95."""
    for step in range(50, 96):
        util = step / 100
        if cap.get("points"):
            if interpolate(cap["points"], util) >= tokens:
                return util
        elif cap.get("bytes_per_token"):
            budget = util * cap["memory_bytes"] - plan["weights_bytes"] - plan["thresholds"]["activation_reserve_bytes"]
            if budget / cap["bytes_per_token"] >= tokens:
                return util
    return None


def finding(severity: str, rule: str, message: str) -> dict:
    return {"severity": severity, "rule": rule, "message": message}


def rule_weights_fit(settings: dict, facts: dict, plan: dict) -> list[dict]:
    weights, memory = plan["weights_bytes"], facts.get("mem_total_bytes")
    if weights is None:
        return [
            finding(
                "warning",
                "weights_size_unknown",
                "weights size unknown: memory fit not checked; give weights_bytes or model_path with the "
                "safetensors files",
            )
        ]
    precision, known = plan["precision"], plan["known"] or {}
    better = (
        f" Use the FP8 checkpoint {known['fp8_variant']}."
        if known.get("fp8_variant")
        else " Use an FP8 checkpoint of the model."
    )
    sixteen_bit = precision in {"bf16", "fp16", "fp32"}
    if facts.get("unified_memory") and memory:
        left = memory - weights
        need = plan["thresholds"]["min_free_after_weights_bytes"]
        if memory_shortfall(memory, weights, need):
            what = f"{precision.upper()} weights" if sixteen_bit else "weights"
            return [
                finding(
                    "error",
                    "weights_leave_too_little_memory",
                    f"{what} of {gib(weights)} leave {gib(left)} of {gib(memory)} unified memory; at least {gib(need)} "
                    "must remain for activations, KV cache and the OS (a BF16 Qwen3.5-35B-A3B on a 128 GB Spark "
                    "had ~56 GiB left and ran out of memory while profiling)."
                    + (better if sixteen_bit else " Use a smaller or more quantised checkpoint."),
                )
            ]
        return []
    gpu_memory = facts.get("gpu_memory_total_bytes")
    if gpu_memory and weights >= plan["utilization"] * gpu_memory:
        return [
            finding(
                "error",
                "weights_exceed_gpu_memory",
                f"weights of {gib(weights)} do not fit in {plan['utilization']:.2f} x {gib(gpu_memory)} of GPU memory."
                + (better if sixteen_bit else ""),
            )
        ]
    return []


def rule_enforce_eager(settings: dict, facts: dict, plan: dict) -> list[dict]:
    if facts.get("unified_memory") and not settings.get("enforce_eager"):
        return [
            finding(
                "warning",
                "enforce_eager_missing",
                "enforce_eager is off on unified memory: torch.compile and CUDA-graph capture add a memory peak "
                "that can freeze the box (unified memory: there is no separate GPU memory to run out first, see "
                "https://github.com/NVIDIA/dgx-spark-playbooks/blob/main/nvidia/vllm/README.md); "
                "set enforce_eager: true",
            )
        ]
    return []


def rule_mamba_align_block_size(settings: dict, facts: dict, plan: dict) -> list[dict]:
    """vLLM 0.19.1's block-size assertion, which only its Mamba "align" cache mode makes.

    A hybrid model's attention block is enlarged until one page holds the recurrent state (2096
    tokens for Qwen3.5 with an fp8 KV cache, 1056 with auto). Only with prefix caching switched on
    does vLLM 0.19.1 put such a model in the experimental "align" mode
    (vllm/model_executor/models/config.py:436-451) and assert block_size <= max_num_batched_tokens
    (vllm/config/vllm.py:1737-1743). Unset, prefix caching is off for hybrid models
    (vllm/config/model.py:1785-1790), and so is the assertion.
    """
    if not plan["hybrid"] or plan["prefix_caching"] is not True:
        return []
    kv = plan["kv_cache_dtype"]
    block = aligned_block_size(plan["config"], kv)
    given = settings.get("max_num_batched_tokens")
    batched = DEFAULT_MAX_NUM_BATCHED_TOKENS if given is None else given
    shown = f"{DEFAULT_MAX_NUM_BATCHED_TOKENS} (vLLM default)" if given is None else given
    fp8 = kv.startswith("fp8")
    if block is None:
        if not fp8:
            return []
        return [
            finding(
                "warning",
                "mamba_align_unknown_block",
                f"kv_cache_dtype {kv} with prefix caching on a hybrid (attention + state-space) model: vLLM enlarges "
                "the block size to the recurrent state and refuses to start when it exceeds max_num_batched_tokens; "
                "the block size could not be computed from config.json. Prefer kv_cache_dtype auto.",
            )
        ]
    if batched >= block:
        return []
    fixes = [f"Set max_num_batched_tokens >= {block}", "leave enable_prefix_caching unset (null) or false"]
    if fp8:
        fixes = ["Use kv_cache_dtype auto", fixes[0][0].lower() + fixes[0][1:], fixes[1]]
    return [
        finding(
            "error",
            "mamba_align_block_size",
            f"enable_prefix_caching on a hybrid Mamba/linear-attention model puts vLLM in Mamba cache align mode, "
            f"and with kv_cache_dtype {kv} its aligned block size is {block}, above max_num_batched_tokens {shown}: "
            f'vLLM stops with "In Mamba cache align mode, block_size ({block}) must be <= max_num_batched_tokens". '
            f"{'; or '.join(fixes)}.",
        )
    ]


def rule_nvfp4_gb10(settings: dict, facts: dict, plan: dict) -> list[dict]:
    if plan["precision"] != "nvfp4":
        return []
    names = " ".join(facts.get("gpu_names") or []).lower()
    caps = facts.get("compute_caps") or []
    on_gb10 = "gb10" in names or "12.1" in caps or (not names and not caps and facts.get("unified_memory"))
    if not on_gb10:
        return []
    return [
        finding(
            "warning",
            "nvfp4_on_gb10",
            "NVFP4 checkpoint on GB10: vLLM's NVFP4 kernels crash with cudaErrorIllegalInstruction on this GPU "
            f"({NVFP4_ISSUE}); use the FP8 checkpoint until the issue is fixed",
        )
    ]


def rule_shm(settings: dict, facts: dict, plan: dict) -> list[dict]:
    try:
        shm = parse_size(settings.get("shm_size"))
    except ValueError as exc:
        return [finding("error", "shm_size_invalid", f"shm_size: {exc}")]
    low, good = plan["thresholds"]["min_shm_bytes"], plan["thresholds"]["recommended_shm_bytes"]
    if shm is None:
        return [
            finding(
                "error",
                "shm_size_missing",
                "shm_size is not set: Docker's default /dev/shm of 64 MB breaks vLLM's inter-process "
                f"communication; set shm_size to 16g (at least {gib(low)})",
            )
        ]
    if shm < low:
        return [
            finding(
                "error",
                "shm_size_too_small",
                f"shm_size {settings['shm_size']} ({gib(shm)}) is below the minimum of {gib(low)}: vLLM's "
                "inter-process communication fails; set shm_size to 16g",
            )
        ]
    if shm < good:
        return [
            finding(
                "warning",
                "shm_size_small",
                f"shm_size {settings['shm_size']} is below the recommended {gib(good)} "
                "(the shipped profile runs with 16g)",
            )
        ]
    return []


def rule_utilization(settings: dict, facts: dict, plan: dict) -> list[dict]:
    util = plan["utilization"]
    warn, stop = plan["thresholds"]["warn_utilization"], plan["thresholds"]["max_utilization"]
    if not 0 < util <= 1:
        return [
            finding("error", "utilization_out_of_range", f"gpu_memory_utilization {util} must be above 0 and at most 1")
        ]
    if not facts.get("unified_memory"):
        return []
    if util > stop:
        return [
            finding(
                "error",
                "utilization_too_high",
                f"gpu_memory_utilization {util} is above {stop} on unified memory: the OS and the Docker engine "
                f"share this memory and the box freezes; use {warn} or less",
            )
        ]
    if util > warn:
        return [
            finding(
                "warning",
                "utilization_high",
                f"gpu_memory_utilization {util} is above {warn} on unified memory: little is left for the OS "
                "(at 0.90 a 128 GB Spark keeps about 12 GiB for everything else); the memory watchdog may stop "
                "the container",
            )
        ]
    return []


def rule_context(settings: dict, facts: dict, plan: dict) -> list[dict]:
    cap = plan["capacity"]
    max_pos = plan["config"].get("max_position_embeddings")
    wanted = settings.get("max_model_len")
    findings = []
    if wanted is not None and wanted < AUTO_MAX_MODEL_LEN:
        return [
            finding(
                "error",
                "max_model_len_invalid",
                f"max_model_len {wanted}: vLLM refuses values below -1 (ModelConfig.max_model_len, ge=-1); give a "
                "number of tokens such as 16384, or -1 / auto to fit the context to the KV cache",
            )
        ]
    if wanted == 0:
        return [
            finding(
                "error",
                "max_model_len_zero",
                "max_model_len 0 leaves no room for a single token: every request would be refused; give a number "
                "of tokens such as 16384, or -1 / auto to fit the context to the KV cache",
            )
        ]
    if wanted == AUTO_MAX_MODEL_LEN:
        return rule_auto_context(cap.get("tokens"), max_pos)
    if wanted is None:
        wanted = max_pos
        if wanted:
            findings.append(
                finding(
                    "warning",
                    "max_model_len_unset",
                    f"max_model_len is not set: vLLM uses the model's maximum ({wanted} tokens)",
                )
            )
    elif max_pos and wanted > max_pos:
        findings.append(
            finding(
                "error",
                "max_model_len_above_model",
                f"max_model_len {wanted} is above the model's max_position_embeddings {max_pos}",
            )
        )
    tokens = cap.get("tokens")
    if tokens is None or not wanted or wanted <= tokens:
        return findings
    fits = 2 ** int(math.log2(tokens)) if tokens >= 1 else 0
    util = utilization_for(wanted, cap, plan)
    util_text = f"raise gpu_memory_utilization to {util}" if util else "no gpu_memory_utilization up to 0.95 holds it"
    if util and util > plan["thresholds"]["warn_utilization"] and facts.get("unified_memory"):
        util_text += " (above the unified-memory comfort limit)"
    message = (
        f"max_model_len {wanted} is above the KV-cache capacity of ~{tokens} tokens at gpu_memory_utilization "
        f"{plan['utilization']} ({cap['source']}); vLLM refuses to start. Set max_model_len <= {tokens} "
        f"(e.g. {fits}) or {util_text}."
    )
    severity = "warning" if cap.get("confidence") == "low" else "error"
    findings.append(finding(severity, "max_model_len_above_kv_capacity", message))
    return findings


def rule_auto_context(tokens: int | None, max_pos: int | None) -> list[dict]:
    """max_model_len -1 / auto: vLLM 0.19 fits the context to the KV cache (vllm/v1/core/kv_cache_utils.py)."""
    if tokens is not None and tokens < 1:
        return [
            finding(
                "error",
                "max_model_len_auto_no_memory",
                "max_model_len auto (-1): the KV cache has room for no token at this gpu_memory_utilization; vLLM "
                'stops with "Cannot auto-fit max_model_len". Raise gpu_memory_utilization or use a smaller checkpoint.',
            )
        ]
    if tokens is not None and max_pos and tokens < max_pos:
        return [
            finding(
                "warning",
                "max_model_len_auto_reduced",
                f"max_model_len auto (-1): vLLM shortens the context from the model's {max_pos} tokens to what the "
                f"KV cache holds (~{tokens} tokens); set max_model_len explicitly to know what clients get",
            )
        ]
    return []


def rule_memory_unknown(settings: dict, facts: dict, plan: dict) -> list[dict]:
    """On unified memory the fit check needs the memory size: say so when it was skipped."""
    if not facts.get("unified_memory") or facts.get("mem_total_bytes") or plan["weights_bytes"] is None:
        return []
    precision = plan["precision"]
    risk = (
        f" {precision.upper()} weights are the case that ran out of memory on a 128 GB Spark."
        if precision in {"bf16", "fp16", "fp32"}
        else ""
    )
    return [
        finding(
            "warning",
            "memory_size_unknown",
            f"unified memory of unknown size: whether {gib(plan['weights_bytes'])} of weights leave enough memory was "
            f"not checked.{risk} Give mem_total_bytes or gpu_facts (or a readable meminfo_path).",
        )
    ]


def rule_vllm_limits(settings: dict, facts: dict, plan: dict) -> list[dict]:
    """Values vLLM 0.19.1 refuses at start-up (pydantic bounds and choices of its config classes)."""
    findings = []
    for key, source in (
        ("max_num_seqs", "SchedulerConfig.max_num_seqs, ge=1"),
        ("max_num_batched_tokens", "SchedulerConfig.max_num_batched_tokens, ge=1"),
    ):
        value = settings.get(key)
        if value is not None and value < 1:
            message = f"{key} {value}: vLLM refuses values below 1 ({source})"
            findings.append(finding("error", f"{key}_invalid", message))
    seqs, batched = settings.get("max_num_seqs"), settings.get("max_num_batched_tokens")
    if seqs and batched and 1 <= batched < seqs:
        findings.append(
            finding(
                "error",
                "max_num_batched_tokens_below_max_num_seqs",
                f"max_num_batched_tokens {batched} is below max_num_seqs {seqs}: vLLM stops with "
                '"max_num_batched_tokens ... must be greater than or equal to max_num_seqs"',
            )
        )
    for key, choices in (("dtype", VLLM_DTYPES), ("kv_cache_dtype", VLLM_KV_CACHE_DTYPES)):
        value = settings.get(key)
        if value not in (None, "") and str(value).lower() not in choices:
            findings.append(
                finding(
                    "error",
                    f"{key}_invalid",
                    f"{key} {value!r} is not one vLLM accepts; choose one of {', '.join(choices)}",
                )
            )
    return findings


def rule_served_model_name(settings: dict, facts: dict, plan: dict) -> list[dict]:
    if settings.get("served_model_name"):
        return []
    return [
        finding(
            "warning",
            "served_model_name_missing",
            f'served_model_name is not set: clients must send "model": "{settings.get("model")}" exactly or the '
            "API answers 404; set a short served_model_name (e.g. qwen3.5-35b) and use it in clients",
        )
    ]


RULES = (
    rule_weights_fit,
    rule_enforce_eager,
    rule_mamba_align_block_size,
    rule_nvfp4_gb10,
    rule_shm,
    rule_utilization,
    rule_context,
    rule_served_model_name,
    rule_memory_unknown,
    rule_vllm_limits,
)


def check_plan(settings: dict, facts: dict, thresholds: dict | None = None) -> dict:
    """Errors and warnings of a vLLM serving plan on a box.

    settings: model, model_path, quantization, dtype, gpu_memory_utilization, max_model_len,
    max_num_seqs, max_num_batched_tokens, kv_cache_dtype, enforce_eager,
    enable_prefix_caching (true, false or None = the model's default), shm_size,
    served_model_name, weights_bytes, and from the module: model_config (config.json as a
    dict) and weights_on_disk_bytes.
    facts: unified_memory, mem_total_bytes, and optionally gpu_names, compute_caps,
    gpu_memory_total_bytes.
    """
    known = KNOWN_MODELS.get(model_key(settings.get("model"))) or KNOWN_MODELS.get(
        model_key(settings.get("model_path"))
    )
    on_disk = text_config(settings.get("model_config"))
    builtin = dict((known or {}).get("config") or {})
    # config.json is authoritative where it says something; for a known model the built-in
    # numbers fill what it leaves out (a trimmed config.json must not hide a known pitfall).
    config = {**builtin, **on_disk}
    sources = [name for name, present in (("config.json", on_disk), ("built-in", builtin)) if present]
    weights, weights_source = weights_size(settings, known)
    utilization = settings.get("gpu_memory_utilization")
    plan = {
        "known": known,
        "config": config,
        "config_source": " + ".join(sources) or "none",
        "precision": precision_of(settings, config, known),
        "hybrid": is_hybrid(config),
        "kv_cache_dtype": (settings.get("kv_cache_dtype") or "auto").lower(),
        "prefix_caching": tri_state(settings.get("enable_prefix_caching"), "enable_prefix_caching"),
        # `or 0.9` would read an explicit 0 as vLLM's default; only an unset value is the default.
        "utilization": float(DEFAULT_UTILIZATION if utilization is None else utilization),
        "weights_bytes": weights,
        "thresholds": {**DEFAULT_THRESHOLDS, **(thresholds or {})},
    }
    plan["capacity"] = capacity(settings, facts, plan)
    findings = [item for rule in RULES for item in rule(settings, facts, plan)]
    cap = plan["capacity"]
    return {
        "errors": [f["message"] for f in findings if f["severity"] == "error"],
        "warnings": [f["message"] for f in findings if f["severity"] == "warning"],
        "findings": findings,
        "kv_capacity_tokens": cap.get("tokens"),
        "estimate": cap.get("estimate", True),
        "capacity_source": cap.get("source"),
        "capacity_confidence": cap.get("confidence"),
        "weights_bytes": weights,
        "weights_source": weights_source,
        "precision": plan["precision"],
        "hybrid": plan["hybrid"],
        "config_source": plan["config_source"],
        "aligned_block_size": aligned_block_size(config, plan["kv_cache_dtype"]) if plan["hybrid"] else None,
    }
