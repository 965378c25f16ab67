# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.serving.plugins.module_utils.kv_capacity import interpolate
from ansible_collections.sparkfleet.serving.plugins.module_utils.model_architecture import (
    GIB,
    QWEN35_35B_A3B_CONFIG,
    aligned_block_size,
    model_key,
    precision_of,
)
from ansible_collections.sparkfleet.serving.plugins.module_utils.serving_plan import (
    check_plan,
    parse_size,
    with_extra_args,
)

SPARK = {
    "unified_memory": True,
    "mem_total_bytes": 127601248 * 1024,
    "gpu_names": ["NVIDIA GB10"],
    "compute_caps": ["12.1"],
}
H100 = {
    "unified_memory": False,
    "mem_total_bytes": 2113467392 * 1024,
    "gpu_names": ["NVIDIA H100 80GB HBM3"],
    "compute_caps": ["9.0"],
    "gpu_memory_total_bytes": 81559 * 1024 * 1024,
}
# The shipped profile, the stable DGX Spark configuration.
RECIPE = {
    "model": "Qwen/Qwen3.5-35B-A3B-FP8",
    "dtype": "auto",
    "gpu_memory_utilization": 0.75,
    "max_model_len": 16384,
    "max_num_seqs": 16,
    "max_num_batched_tokens": 16384,
    "kv_cache_dtype": "auto",
    "enforce_eager": True,
    "enable_prefix_caching": True,
    "shm_size": "16g",
    "served_model_name": "qwen3.5-35b",
}
LLAMA_8B_CONFIG = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}


def plan(facts: dict | None = None, **changes) -> dict:
    return check_plan({**RECIPE, **changes}, SPARK if facts is None else facts)


def rules(result: dict, severity: str | None = None) -> set[str]:
    return {f["rule"] for f in result["findings"] if severity is None or f["severity"] == severity}


def test_the_field_recipe_passes_without_a_warning():
    result = plan()
    assert (result["errors"], result["warnings"]) == ([], [])
    assert result["kv_capacity_tokens"] == 41072
    assert result["estimate"] is False
    assert result["capacity_source"].startswith("DGX Spark measurement (measured)")
    assert result["precision"] == "fp8"
    assert result["hybrid"] is True


# --- KV capacity of the shipped profile ------------------------------------------------------


@pytest.mark.parametrize(("util", "tokens"), [(0.75, 41072), (0.80, 45000), (0.85, 50000), (0.90, 54000)])
def test_field_measured_capacities(util, tokens):
    result = plan(gpu_memory_utilization=util)
    assert result["kv_capacity_tokens"] == tokens
    assert result["estimate"] is False


def test_between_measurements_is_interpolated_and_labelled():
    result = plan(gpu_memory_utilization=0.78)
    assert 41072 < result["kv_capacity_tokens"] < 45000
    assert result["estimate"] is True
    assert "interpolated" in result["capacity_source"]


def test_below_measurements_is_extrapolated():
    result = plan(gpu_memory_utilization=0.70)
    assert result["kv_capacity_tokens"] < 41072
    assert "extrapolated" in result["capacity_source"]
    assert result["capacity_confidence"] == "medium"


def test_interpolate_is_linear_and_extends_at_both_ends():
    points = ((0.0, 0), (1.0, 10))
    assert interpolate(points, 0.5) == 5
    assert interpolate(points, 2.0) == 20
    assert interpolate(points, -1.0) == -10


def test_field_figures_are_not_used_on_a_box_of_another_size():
    small = {**SPARK, "mem_total_bytes": 24 * GIB}
    result = plan(small)
    assert result["estimate"] is True
    assert "estimate from config.json" in result["capacity_source"]


# --- rule: weights must leave memory (BF16 35B on a Spark) -----------------------------------


def test_bf16_35b_on_a_spark_is_refused_and_names_the_fp8_checkpoint():
    result = plan(model="Qwen/Qwen3.5-35B-A3B")
    assert "weights_leave_too_little_memory" in rules(result, "error")
    message = next(e for e in result["errors"] if "BF16 weights" in e)
    assert "64.7 GiB" in message
    assert "Qwen/Qwen3.5-35B-A3B-FP8" in message


def test_fp8_35b_on_a_spark_leaves_enough():
    assert "weights_leave_too_little_memory" not in rules(plan())


def test_weights_size_from_the_caller_wins():
    result = plan(weights_bytes=80 * GIB)
    assert result["weights_source"] == "given (weights_bytes)"
    assert "weights_leave_too_little_memory" in rules(result, "error")


def test_a_cluster_member_holds_its_share_of_the_weights():
    # 100 GiB of weights leave too little of one 128 GB Spark; split over two (tensor parallel size 2) they do not.
    alone = plan(weights_bytes=100 * GIB)
    shared = plan(weights_bytes=100 * GIB, weight_shards=2)
    assert shared["weights_bytes"] == 50 * GIB
    assert shared["weights_source"] == "given (weights_bytes), 1/2 per GPU"
    assert "weights_leave_too_little_memory" in rules(alone, "error")
    assert "weights_leave_too_little_memory" not in rules(shared)


def test_weights_on_discrete_gpu_compare_with_gpu_memory():
    too_big = check_plan(
        {**RECIPE, "model": "/model", "weights_bytes": 70 * GIB, "model_config": LLAMA_8B_CONFIG}, H100
    )
    assert "weights_exceed_gpu_memory" in rules(too_big, "error")
    fits = check_plan({**RECIPE, "model": "/model", "weights_bytes": 16 * GIB, "model_config": LLAMA_8B_CONFIG}, H100)
    assert "weights_exceed_gpu_memory" not in rules(fits)


def test_unknown_weights_are_a_warning():
    result = check_plan({**RECIPE, "model": "/model", "model_config": LLAMA_8B_CONFIG}, SPARK)
    assert "weights_size_unknown" in rules(result, "warning")
    assert result["kv_capacity_tokens"] is None


# --- rule: enforce_eager on unified memory ---------------------------------------------------


def test_missing_enforce_eager_warns_on_unified_memory_only():
    assert "enforce_eager_missing" in rules(plan(enforce_eager=False), "warning")
    assert "enforce_eager_missing" not in rules(plan(enforce_eager=True))
    llama = {
        **RECIPE,
        "model": "/model",
        "weights_bytes": 16 * GIB,
        "model_config": LLAMA_8B_CONFIG,
        "enforce_eager": False,
    }
    assert "enforce_eager_missing" not in rules(check_plan(llama, H100))


# --- rule: fp8 KV cache on a hybrid model ----------------------------------------------------


def test_aligned_block_size_reproduces_the_field_error():
    assert aligned_block_size(QWEN35_35B_A3B_CONFIG, "fp8") == 2096
    assert aligned_block_size(QWEN35_35B_A3B_CONFIG, "auto") == 1056
    assert aligned_block_size(LLAMA_8B_CONFIG, "fp8") is None


def test_fp8_kv_with_default_batched_tokens_is_refused():
    result = plan(kv_cache_dtype="fp8", max_num_batched_tokens=None)
    assert "mamba_align_block_size" in rules(result, "error")
    message = next(e for e in result["errors"] if "block_size" in e)
    assert "2096" in message
    assert "2048 (vLLM default)" in message


def test_fp8_kv_with_enough_batched_tokens_passes_that_rule():
    assert "mamba_align_block_size" not in rules(plan(kv_cache_dtype="fp8", max_num_batched_tokens=2096))
    assert "mamba_align_block_size" in rules(plan(kv_cache_dtype="fp8_e4m3", max_num_batched_tokens=2095))


def test_fp8_kv_on_a_plain_transformer_is_fine():
    llama = {
        **RECIPE,
        "model": "/model",
        "weights_bytes": 16 * GIB,
        "model_config": LLAMA_8B_CONFIG,
        "kv_cache_dtype": "fp8",
        "max_num_batched_tokens": None,
    }
    assert not {"mamba_align_block_size", "mamba_align_unknown_block"} & rules(check_plan(llama, SPARK))


def test_fp8_kv_on_a_hybrid_without_state_numbers_warns():
    jamba = {"model_type": "jamba", "num_hidden_layers": 32, "num_key_value_heads": 8, "head_dim": 128}
    result = check_plan(
        {**RECIPE, "model": "/model", "weights_bytes": 20 * GIB, "model_config": jamba, "kv_cache_dtype": "fp8"}, SPARK
    )
    assert "mamba_align_unknown_block" in rules(result, "warning")


def test_hybrid_detected_from_config_json_layer_types_and_text_config():
    config = {
        "model_type": "qwen3_5_moe",
        "text_config": {
            **QWEN35_35B_A3B_CONFIG,
            "model_type": "x",
            "full_attention_interval": None,
            "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        },
    }
    result = check_plan({**RECIPE, "model": "/model", "weights_bytes": 35 * GIB, "model_config": config}, SPARK)
    assert result["hybrid"] is True
    assert result["config_source"] == "config.json"


# --- rule: NVFP4 on GB10 -----------------------------------------------------------------


def test_nvfp4_on_gb10_warns_with_the_upstream_issue():
    result = plan(model="nvidia/Qwen3.5-35B-A3B-NVFP4", weights_bytes=23 * GIB)
    assert result["precision"] == "nvfp4"
    warning = next(w for w in result["warnings"] if "NVFP4" in w)
    assert "https://github.com/vllm-project/vllm/issues/35519" in warning


def test_nvfp4_from_quantization_config_and_option():
    config = {**LLAMA_8B_CONFIG, "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}
    result = check_plan({**RECIPE, "model": "/model", "weights_bytes": 6 * GIB, "model_config": config}, SPARK)
    assert "nvfp4_on_gb10" in rules(result, "warning")
    assert "nvfp4_on_gb10" in rules(plan(quantization="modelopt_fp4", model="/model", weights_bytes=6 * GIB), "warning")


@pytest.mark.parametrize(("release", "warns"), [
    ("0.19.1", True), ("0.27.1", True), ("0.28.0", False), ("0.34.0", False), (None, True)])
def test_nvfp4_on_gb10_warns_for_releases_before_0_28_only(release: str | None, warns: bool):
    # vLLM 0.34.0's recipe recipes/models/Qwen/Qwen3.6-35B-A3B.yaml: nvfp4 variant, min_vllm_version 0.28.0,
    # verified on dgx_spark_gb10; an unknown release (None) keeps the warning.
    result = plan(model="nvidia/Qwen3.5-35B-A3B-NVFP4", weights_bytes=23 * GIB, release=release)
    assert ("nvfp4_on_gb10" in rules(result, "warning")) is warns


def test_nvfp4_elsewhere_and_fp8_on_gb10_do_not_warn():
    assert "nvfp4_on_gb10" not in rules(plan())
    llama = {**RECIPE, "model": "some/Llama-NVFP4", "weights_bytes": 6 * GIB, "model_config": LLAMA_8B_CONFIG}
    assert "nvfp4_on_gb10" not in rules(check_plan(llama, H100))


# --- rule: shared memory -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("shm", "rule", "severity"),
    [
        (None, "shm_size_missing", "error"),
        ("", "shm_size_missing", "error"),
        ("64m", "shm_size_too_small", "error"),
        ("1g", "shm_size_too_small", "error"),
        ("8g", "shm_size_small", "warning"),
        ("lots", "shm_size_invalid", "error"),
    ],
)
def test_shm_rules_fire(shm, rule, severity):
    assert rule in rules(plan(shm_size=shm), severity)


@pytest.mark.parametrize("shm", ["16g", "16G", "32gb", "17179869184"])
def test_enough_shm_passes(shm):
    assert not {r for r in rules(plan(shm_size=shm)) if r.startswith("shm")}


def test_parse_size():
    assert parse_size("16g") == 16 * GIB
    assert parse_size("512m") == 512 * 1024**2
    assert parse_size("64MB") == 64 * 1024**2
    assert parse_size("1.5g") == int(1.5 * GIB)
    assert parse_size(1024) == 1024
    assert parse_size("  ") is None
    with pytest.raises(ValueError, match="not a size: '16 gigs'"):
        parse_size("16 gigs")


# --- rule: memory utilisation ----------------------------------------------------------------


def test_utilization_above_085_warns_and_above_095_is_refused_on_unified_memory():
    assert "utilization_high" in rules(plan(gpu_memory_utilization=0.88, max_model_len=16384), "warning")
    assert "utilization_too_high" in rules(plan(gpu_memory_utilization=0.96), "error")
    assert not {"utilization_high", "utilization_too_high"} & rules(plan(gpu_memory_utilization=0.85))


def test_utilization_on_discrete_gpu_is_not_limited_and_range_is_checked():
    llama = {**RECIPE, "model": "/model", "weights_bytes": 16 * GIB, "model_config": LLAMA_8B_CONFIG}
    assert not rules(check_plan({**llama, "gpu_memory_utilization": 0.95}, H100), "error")
    assert "utilization_out_of_range" in rules(plan(gpu_memory_utilization=1.5), "error")


# --- rule: context length vs KV capacity -------------------------------------------------------


def test_context_above_capacity_is_refused_with_what_would_fit():
    result = plan(gpu_memory_utilization=0.75, max_model_len=65536)
    message = next(e for e in result["errors"] if "KV-cache capacity" in e)
    assert "~41072 tokens" in message
    assert "max_model_len <= 41072 (e.g. 32768)" in message
    assert "no gpu_memory_utilization up to 0.95" in message


def test_context_suggests_the_utilization_that_holds_it():
    message = next(e for e in plan(gpu_memory_utilization=0.75, max_model_len=45000)["errors"] if "KV-cache" in e)
    assert "raise gpu_memory_utilization to 0.8" in message
    risky = next(e for e in plan(gpu_memory_utilization=0.75, max_model_len=52000)["errors"] if "KV-cache" in e)
    assert "above the unified-memory comfort limit" in risky


@pytest.mark.parametrize(("util", "length"), [(0.80, 32768), (0.85, 40960), (0.75, 41072)])
def test_field_recommended_lengths_fit(util, length):
    assert "max_model_len_above_kv_capacity" not in rules(plan(gpu_memory_utilization=util, max_model_len=length))


def test_unset_context_means_the_model_maximum_which_does_not_fit():
    result = plan(max_model_len=None)
    assert "max_model_len_unset" in rules(result, "warning")
    assert "max_model_len_above_kv_capacity" in rules(result, "error")


def test_context_above_the_model_maximum():
    assert "max_model_len_above_model" in rules(plan(max_model_len=300_000), "error")


def test_estimate_from_config_json_for_other_models_is_labelled():
    llama = {
        **RECIPE,
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "weights_bytes": 16 * GIB,
        "model_config": LLAMA_8B_CONFIG,
        "gpu_memory_utilization": 0.5,
        "max_model_len": 131072,
    }
    result = check_plan(llama, SPARK)
    # 0.5 x 121.7 GiB - 16 GiB weights - 4 GiB reserve = 40.8 GiB / (32 layers x 4 KiB) per token
    assert result["kv_capacity_tokens"] == int((0.5 * SPARK["mem_total_bytes"] - 20 * GIB) // (32 * 4096))
    assert result["estimate"] is True
    assert result["capacity_source"].startswith("estimate from config.json (32 attention layers x 4096 bytes")
    assert "max_model_len_above_kv_capacity" not in rules(result)
    tight = check_plan({**llama, "gpu_memory_utilization": 0.2}, SPARK)
    assert "max_model_len_above_kv_capacity" in rules(tight, "error")


def test_hybrid_estimates_only_warn():
    result = plan({**SPARK, "mem_total_bytes": 24 * GIB}, max_model_len=10_000_000)
    finding = next(f for f in result["findings"] if f["rule"] == "max_model_len_above_kv_capacity")
    assert finding["severity"] == "warning"
    assert result["capacity_confidence"] == "low"


# --- rule: served model name -------------------------------------------------------------


def test_missing_served_model_name_warns_with_the_name_clients_must_send():
    warning = next(w for w in plan(served_model_name=None)["warnings"] if "served_model_name" in w)
    assert '"model": "Qwen/Qwen3.5-35B-A3B-FP8"' in warning
    assert "served_model_name_missing" not in rules(plan())


# --- helpers -----------------------------------------------------------------------------


def test_model_key_and_precision():
    assert model_key("Qwen/Qwen3.5-35B-A3B-FP8/") == "qwen3.5-35b-a3b-fp8"
    assert precision_of({"model": "TheBloke/x-AWQ"}, {}, None) == "int4"
    assert precision_of({"model": "x", "dtype": "float16"}, {}, None) == "fp16"
    assert precision_of({"model": "x", "dtype": "float32"}, {}, None) == "fp32"
    assert precision_of({"model": "x"}, {"torch_dtype": "float16"}, None) == "fp16"
    assert precision_of({"model": "x"}, {"quantization_config": {"quant_method": "fp8"}}, None) == "fp8"
    assert precision_of({"model": "x-W8A8"}, {}, None) == "int8"
    assert precision_of({"model": "/model"}, {}, None) == "bf16"
    assert (
        precision_of({"model": "openai/gpt-oss-120b"}, {"quantization_config": {"quant_method": "mxfp4"}}, None)
        == "fp4"
    )
    assert precision_of({"model": "x", "quantization": "modelopt_fp4"}, {}, None) == "nvfp4"
    assert precision_of({"model": "Qwen/Qwen3.5-35B-A3B"}, {}, {"precision": "bf16"}) == "bf16"


def test_a_trimmed_config_json_of_a_known_model_still_trips_the_mamba_rule():
    # What a partial download or a hand-made config.json leaves: no layer numbers.
    trimmed = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe"}
    settings = {**RECIPE, "kv_cache_dtype": "fp8", "max_num_batched_tokens": 2048, "model_config": trimmed}
    result = check_plan(settings, SPARK)
    assert result["config_source"] == "config.json + built-in"
    assert any("block_size (2096) must be <= max_num_batched_tokens" in e for e in result["errors"])


@pytest.mark.parametrize("prefix_caching", [None, False])
def test_without_prefix_caching_there_is_no_align_mode_and_no_block_size_refusal(prefix_caching: object):
    # vLLM 0.19.1: hybrid models default to prefix caching off (vllm/config/model.py:1785-1790) and
    # only prefix caching selects the "align" mode whose assertion this is (vllm/config/vllm.py:1737-1743).
    result = plan(kv_cache_dtype="fp8", max_num_batched_tokens=2048, enable_prefix_caching=prefix_caching)
    assert not {"mamba_align_block_size", "mamba_align_unknown_block"} & rules(result)


def test_align_mode_also_refuses_a_small_batch_with_the_auto_kv_cache():
    # With kv_cache_dtype auto the aligned block is 1056 tokens; align mode asserts it all the same.
    result = plan(max_num_batched_tokens=1024)
    assert "mamba_align_block_size" in rules(result, "error")
    message = next(e for e in result["errors"] if "block_size" in e)
    assert "block_size (1056) must be <= max_num_batched_tokens" in message
    assert "kv_cache_dtype auto" not in message.split(":")[-1]
    assert "max_num_batched_tokens >= 1056" in message
    assert "mamba_align_block_size" not in rules(plan(max_num_batched_tokens=1056))


# --- what vllm_extra_args sets of the flags the rules read -----------------------------------


@pytest.mark.parametrize("extra", [["--enable-prefix-caching"], ["--enable_prefix_caching"],
                                   ["--mamba-cache-mode", "align"], ["--mamba-cache-mode=align"]])
def test_fp8_kv_with_default_batched_tokens_and_align_mode_from_extra_args_is_refused(extra: list[str]):
    # The role writes --enable-prefix-caching only when the setting is true; left unset, the flag can come through
    # vllm_extra_args (the role refuses only a flag it writes itself), and vLLM then stops with the assertion.
    settings = with_extra_args({**RECIPE, "kv_cache_dtype": "fp8", "max_num_batched_tokens": None,
                                "enable_prefix_caching": None}, extra)
    result = check_plan(settings, SPARK)
    assert "mamba_align_block_size" in rules(result, "error")
    assert "block_size (2096) must be <= max_num_batched_tokens" in " ".join(result["errors"])


def test_the_kv_cache_dtype_and_batch_from_extra_args_are_the_ones_checked():
    settings = with_extra_args({**RECIPE, "kv_cache_dtype": "auto", "max_num_batched_tokens": None,
                                "enable_prefix_caching": True}, ["--kv-cache-dtype", "fp8"])
    assert settings["kv_cache_dtype"] == "fp8"
    assert "mamba_align_block_size" in rules(check_plan(settings, SPARK), "error")
    enough = with_extra_args(settings, ["--max-num-batched-tokens=4096"])
    assert "mamba_align_block_size" not in rules(check_plan(enough, SPARK))
    # "all" keeps prefix caching out of align mode (vLLM's other mode for hybrid models).
    other = with_extra_args({**RECIPE, "kv_cache_dtype": "fp8", "max_num_batched_tokens": None,
                             "enable_prefix_caching": True}, ["--mamba-cache-mode", "all"])
    assert "mamba_align_block_size" not in rules(check_plan(other, SPARK))
