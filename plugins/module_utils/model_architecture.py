# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What is known of a model before vLLM loads it: its precision, whether it is a hybrid
(attention + state-space) model, the KV-cache bytes per token and the block size vLLM aligns to
the recurrent state, from its name and config.json; and the models whose sizes and KV-cache
capacity on a DGX Spark are known.
"""

from __future__ import annotations

import math
import re

GIB = 1024**3

# Measured on a 128 GB DGX Spark (MemTotal ~121.7 GiB), vLLM 0.19, enforce-eager,
# Qwen3.5-35B-A3B-FP8, KV cache dtype auto: utilisation -> KV tokens. 0.75 is vLLM's own
# start-up figure ("GPU KV cache size", 2567 blocks x 16 tokens); 0.80-0.90 are rounded
# figures of the same deployment.
MEASURED_KV_TOKENS = ((0.75, 41_072), (0.80, 45_000), (0.85, 50_000), (0.90, 54_000))
# The measured figures hold for a box of this size only.
MEASURED_MEM_TOTAL_RANGE = (115 * GIB, 128 * GIB)

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
        "measured_kv_tokens": MEASURED_KV_TOKENS,
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

DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
# vLLM rounds the attention block size of hybrid models up to a multiple of this.
BLOCK_ALIGNMENT = 16

# How quantised checkpoints show themselves (first match wins).
QUANT_PATTERNS = (
    (r"nvfp4|modelopt_fp4", "nvfp4"),
    (r"mxfp4|\bfp4\b", "fp4"),
    (r"\b(awq|gptq|int4|w4a16|bitsandbytes|awq_marlin|gptq_marlin)\b", "int4"),
    (r"fp8", "fp8"),
    (r"\b(int8|w8a8)\b", "int8"),
)


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
    (community checkpoints say it there: ...-FP8, ...-NVFP4, ...-AWQ), what a recipe says of its
    checkpoint (checkpoint_quantization, before config.json is on the box), then the dtype.
    """
    qconf = config.get("quantization_config") or {}
    text = " ".join(
        [
            (settings.get("quantization") or "").lower(),
            str(qconf.get("quant_method") or "").lower(),
            str(qconf.get("quant_algo") or "").lower(),
            model_key(settings.get("model")),
            model_key(settings.get("model_path")),
            str(settings.get("checkpoint_quantization") or "").lower(),
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
