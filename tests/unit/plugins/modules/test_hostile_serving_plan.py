# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hostile inputs for serving_plan: odd config.json shapes, gpu_facts, meminfo, numbers.

Invariants: a clear error naming the option or file, or a plan result (errors and
warnings as lists of text); nothing escapes as a Python exception; values that cannot be
meant give a finding instead of being replaced by a default.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.sparkfleet.serving.plugins.modules import serving_plan
from ansible_collections.sparkfleet.serving.tests.unit.plugins.hostile import (
    assert_clear_failure,
    call_module,
    hostile,
    python_scalars,
    python_values,
)

GIB = 1024**3
SPARK = {"unified_memory": True, "mem_total_bytes": 130_663_677_952}
GOOD = {
    "model": "Qwen/Qwen3.5-35B-A3B-FP8",
    "gpu_memory_utilization": 0.75,
    "max_model_len": 16384,
    "enforce_eager": True,
    "shm_size": "16g",
    "served_model_name": "qwen3.5-35b",
    "fail_on_error": False,
    "report_warnings": False,
    **SPARK,
}
GENERATED_CASES = 150


def plan(**args: object) -> dict:
    return call_module(serving_plan, {**GOOD, **args})


def rules(result: dict) -> set[str]:
    return {f["rule"] for f in result["findings"]}


def assert_plan(result: dict) -> None:
    assert not result["failed"], result
    assert all(isinstance(e, str) and e for e in result["errors"])
    assert all(isinstance(w, str) and w for w in result["warnings_found"])


# --- the classes of the hostile-input report ------------------------------------------


def test_gpu_memory_utilization_zero_is_not_read_as_the_default():
    result = plan(gpu_memory_utilization=0)
    assert "utilization_out_of_range" in rules(result)
    assert any("gpu_memory_utilization 0" in e for e in result["errors"])


def test_a_nan_utilization_is_refused_naming_the_option():
    assert_clear_failure(plan(gpu_memory_utilization=float("nan")), "gpu_memory_utilization")


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        (0, "max_model_len_zero"),
        ("0", "max_model_len_zero"),
        (-2, "max_model_len_invalid"),
        ("-5", "max_model_len_invalid"),
    ],
)
def test_max_model_len_zero_or_below_minus_one_is_an_error(value, rule):
    result = plan(max_model_len=value)
    assert rule in rules(result)
    assert result["errors"]


@pytest.mark.parametrize("value", [-1, "-1", "auto", "AUTO"])
def test_max_model_len_auto_is_vllms_fit_to_memory(value):
    result = plan(max_model_len=value)
    assert_plan(result)
    assert not {"max_model_len_zero", "max_model_len_invalid", "max_model_len_above_kv_capacity"} & rules(result)
    # 41K tokens fit at 0.75, the model allows 262K: vLLM shortens the context, and says so.
    assert "max_model_len_auto_reduced" in rules(result)


@pytest.mark.parametrize(("value", "tokens"), [("16k", 16000), ("16K", 16384), ("25.6k", 25600), (16384.0, 16384)])
def test_max_model_len_in_vllms_human_readable_forms(value, tokens):
    result = plan(max_model_len=value, gpu_memory_utilization=0.9)
    assert_plan(result)
    assert not result["errors"], result["errors"]
    small = plan(max_model_len=value, gpu_memory_utilization=0.1)
    assert any(f"max_model_len {tokens} " in e for e in small["errors"]), small["errors"]


@pytest.mark.parametrize("value", ["abc", "1.5K", "16 k", True, [16384], {"a": 1}, "--1", float("inf")])
def test_max_model_len_that_vllm_cannot_read_is_refused_naming_the_option(value):
    assert_clear_failure(plan(max_model_len=value), "max_model_len")


def test_bf16_on_unified_memory_of_unknown_size_gets_a_warning(tmp_path):
    result = plan(
        model="Qwen/Qwen3.5-35B-A3B", mem_total_bytes=None, meminfo_path=str(tmp_path / "none"), unified_memory=True
    )
    assert "memory_size_unknown" in rules(result)
    assert any("BF16" in w for w in result["warnings_found"])


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("[1, 2]", "found a JSON list"),
        ('"config"', "found a JSON str"),
        ('{"num_hidden_layers": "40"}', "config.json.num_hidden_layers"),
        ('{"head_dim": 0}', "config.json.head_dim"),
        ('{"num_attention_heads": true}', "config.json.num_attention_heads"),
        ('{"text_config": "qwen"}', "config.json.text_config"),
        ('{"text_config": {"num_key_value_heads": 2.5}}', "config.json.text_config.num_key_value_heads"),
        ('{"quantization_config": ["fp8"]}', "config.json.quantization_config"),
        ('{"layer_types": "full_attention"}', "config.json.layer_types"),
        ('{"layer_types": [1, 2]}', "config.json.layer_types[0]"),
        ("{not json", "not valid JSON"),
    ],
)
def test_an_odd_config_json_is_refused_naming_the_file(tmp_path, content, why):
    (tmp_path / "config.json").write_text(content)
    msg = assert_clear_failure(plan(model_path=str(tmp_path)), str(tmp_path / "config.json"))
    assert why in msg


def test_a_binary_config_json_or_meminfo_is_refused_naming_the_file(tmp_path):
    (tmp_path / "config.json").write_bytes(b"\x89PNG\r\n\x1a\n\xff")
    assert_clear_failure(plan(model_path=str(tmp_path)), "config.json", "model_path")
    meminfo = tmp_path / "meminfo"
    meminfo.write_bytes(b"\x00\xff\xfe binary")
    msg = assert_clear_failure(plan(mem_total_bytes=None, meminfo_path=str(meminfo)), "meminfo_path")
    assert str(meminfo) in msg


def test_a_model_path_that_is_a_file_or_a_config_json_that_is_a_directory_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    assert_clear_failure(plan(model_path=str(tmp_path / "file")), "model_path")
    (tmp_path / "model/config.json").mkdir(parents=True)
    assert_clear_failure(plan(model_path=str(tmp_path / "model")), "model_path")


def test_a_gpu_entry_without_a_name_is_refused_naming_the_option():
    facts = {"unified_memory": True, "gpus": [{"memory_total_mib": None}], "memory": {"total_bytes": 1}}
    assert_clear_failure(plan(gpu_facts=facts, mem_total_bytes=None), "gpu_facts.gpus[0]")


@pytest.mark.parametrize(
    ("args", "option"),
    [
        ({"mem_total_bytes": 0}, "mem_total_bytes"),
        ({"weights_bytes": -1}, "weights_bytes"),
        ({"warn_utilization": 0.97}, "warn_utilization"),
        ({"max_utilization": 1.5}, "max_utilization"),
        ({"min_free_after_weights_bytes": -1}, "min_free_after_weights_bytes"),
        ({"min_shm_size": "lots"}, "min_shm_size"),
    ],
)
def test_thresholds_and_sizes_that_cannot_be_meant_are_refused(args, option):
    assert_clear_failure(plan(**args), option)


@pytest.mark.parametrize(
    ("args", "rule"),
    [
        ({"max_num_seqs": 0}, "max_num_seqs_invalid"),
        ({"max_num_batched_tokens": -1}, "max_num_batched_tokens_invalid"),
        ({"max_num_seqs": 64, "max_num_batched_tokens": 32}, "max_num_batched_tokens_below_max_num_seqs"),
        ({"dtype": "bf16"}, "dtype_invalid"),
        ({"kv_cache_dtype": "int8"}, "kv_cache_dtype_invalid"),
    ],
)
def test_values_vllm_refuses_are_errors(args, rule):
    assert rule in rules(plan(**args))


# --- generated cases --------------------------------------------------------------

config_keys = st.sampled_from(
    [
        "model_type", "num_hidden_layers", "full_attention_interval", "num_key_value_heads", "num_attention_heads",
        "head_dim", "hidden_size", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
        "linear_value_head_dim", "linear_conv_kernel_dim", "max_position_embeddings", "mamba_ssm_dtype",
        "torch_dtype", "layer_types", "quantization_config", "text_config",
    ]
)  # fmt: skip
config_values = st.one_of(
    st.integers(min_value=-4, max_value=300_000), st.sampled_from(["float32", "full_attention", "fp8", "qwen3_5_moe"]),
    st.lists(st.sampled_from(["full_attention", "linear_attention", 3]), max_size=4), python_values,
)  # fmt: skip
configs = st.recursive(
    st.dictionaries(config_keys, config_values, max_size=8),
    lambda inner: st.dictionaries(config_keys, config_values | inner, max_size=8),
    max_leaves=4,
) | python_values


@hostile(GENERATED_CASES)
@given(config=configs, kv=st.sampled_from(["auto", "fp8", "fp8_e5m2"]), length=python_scalars | st.integers(-3, 10**6))
def test_property_any_config_json_and_length_give_a_clear_error_or_a_plan(config, kv, length):
    with tempfile.TemporaryDirectory() as tmp:
        try:
            text = json.dumps(config)
        except ValueError:
            text = "{"
        (Path(tmp) / "config.json").write_text(text)
        result = plan(model="org/some-model", model_path=tmp, kv_cache_dtype=kv, max_model_len=length)
        if result["failed"]:
            assert_clear_failure(result, "config.json", "model_path", "max_model_len")
        else:
            assert_plan(result)


@hostile(GENERATED_CASES)
@given(
    utilization=st.floats() | st.integers(-2, 2),
    mem=st.one_of(st.none(), st.integers(-(2**40), 2**41)),
    weights=st.one_of(st.none(), st.integers(-(2**40), 2**41)),
    limits=st.tuples(st.one_of(st.none(), st.integers(-5, 300)), st.one_of(st.none(), st.integers(-5, 70_000))),
    unified=st.one_of(st.none(), st.booleans()),
)
def test_property_any_numbers_give_a_clear_error_or_a_plan(utilization, mem, weights, limits, unified):
    seqs, batched = limits
    with tempfile.TemporaryDirectory() as tmp:
        result = plan(
            gpu_memory_utilization=utilization,
            mem_total_bytes=mem,
            weights_bytes=weights,
            max_num_seqs=seqs,
            max_num_batched_tokens=batched,
            unified_memory=unified,
            meminfo_path=str(Path(tmp) / "absent"),
        )
    if result["failed"]:
        assert_clear_failure(result, "gpu_memory_utilization", "mem_total_bytes", "weights_bytes")
        return
    assert_plan(result)
    if not 0 < utilization <= 1:
        assert "utilization_out_of_range" in rules(result)
    if seqs is not None and seqs < 1:
        assert "max_num_seqs_invalid" in rules(result)


gpu_entries = st.one_of(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["NVIDIA GB10", ""]) | python_scalars},
        optional={"memory_total_mib": python_scalars | st.integers(0, 10**6), "compute_cap": python_scalars},
    ),
    python_values,
)
gpu_facts = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "unified_memory": python_scalars,
            "gpus": st.lists(gpu_entries, max_size=3) | python_scalars,
            "names": st.lists(python_scalars, max_size=2) | python_scalars,
            "compute_caps": st.lists(python_scalars, max_size=2) | python_scalars,
            "memory": st.fixed_dictionaries({}, optional={"total_bytes": python_scalars}) | python_scalars,
        },
    ),
    st.dictionaries(st.text(max_size=8), python_values, max_size=3),
)


@hostile(GENERATED_CASES)
@given(facts=gpu_facts, meminfo=st.binary(max_size=80) | st.text(max_size=80).map(str.encode))
def test_property_any_gpu_facts_and_meminfo_give_a_clear_error_or_a_plan(facts, meminfo):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "meminfo"
        path.write_bytes(meminfo)
        result = plan(gpu_facts=facts, mem_total_bytes=None, unified_memory=None, meminfo_path=str(path))
    if result["failed"]:
        assert_clear_failure(result, "gpu_facts", "meminfo_path")
    else:
        assert_plan(result)
