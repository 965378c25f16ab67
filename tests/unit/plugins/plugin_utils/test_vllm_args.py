# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.serving.plugins.plugin_utils.vllm_args import (
    LAYOUT_FLAGS,
    build_serve_args,
    checked_settings,
)

STABLE = {
    "model_path": "/model", "served_model_name": "qwen3.5-35b", "host": "0.0.0.0", "port": 8000,
    "dtype": "auto", "quantization": "", "max_model_len": 16384, "gpu_memory_utilization": 0.75,
    "max_num_seqs": 16, "max_num_batched_tokens": 16384, "kv_cache_dtype": "auto", "enforce_eager": True,
    "enable_prefix_caching": True, "reasoning_parser": "qwen3", "tool_call_parser": "qwen3_coder",
    "enable_auto_tool_choice": True, "text_only": True, "extra_args": [],
}


def test_the_stable_dgx_spark_configuration():
    # The profile's `vllm serve` command line, kept once for these tests and Molecule's.
    golden = Path(__file__).resolve().parents[3] / "fixtures" / "vllm" / "qwen3.5-35b-a3b-fp8.argv.json"
    assert build_serve_args(STABLE) == json.loads(golden.read_text(encoding="utf-8"))[1:]


def test_fp8_kv_cache_and_quantization_appear_when_set():
    args = build_serve_args(dict(STABLE, kv_cache_dtype="fp8", quantization="fp8"))
    assert args[args.index("--kv-cache-dtype") + 1] == "fp8"
    assert args[args.index("--quantization") + 1] == "fp8"


def test_switches_off_are_left_out_and_extra_args_come_last():
    args = build_serve_args(dict(STABLE, enforce_eager=False, text_only=False, extra_args=["--seed", 7]))
    assert "--enforce-eager" not in args
    assert "--limit-mm-per-prompt" not in args
    assert args[-2:] == ["--seed", "7"]


def test_whole_floats_are_written_as_integers():
    args = build_serve_args(dict(STABLE, max_model_len=32768.0, gpu_memory_utilization=0.8))
    assert args[args.index("--max-model-len") + 1] == "32768"
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.8"


def test_auto_tool_choice_without_parser_is_refused():
    with pytest.raises(ValueError, match="tool_call_parser"):
        build_serve_args(dict(STABLE, tool_call_parser=""))


def test_model_path_is_required():
    with pytest.raises(ValueError, match="model_path"):
        build_serve_args({"served_model_name": "x"})


@pytest.mark.parametrize(("value", "expected"), [
    (True, ["--enable-prefix-caching"]),
    ("true", ["--enable-prefix-caching"]),
    (False, ["--no-enable-prefix-caching"]),
    ("False", ["--no-enable-prefix-caching"]),
    (None, []),
    ("", []),
    ("None", []),  # a null variable rendered to text by an older ansible-core
])
def test_prefix_caching_is_tri_state_as_in_vllm(value: object, expected: list[str]):
    # vLLM 0.19.1 declares --enable-prefix-caching with default None and BooleanOptionalAction
    # (vllm/engine/arg_utils.py:996-1001 and :310): unset leaves the choice to the model.
    args = build_serve_args(dict(STABLE, enable_prefix_caching=value))
    assert [a for a in args if "prefix-caching" in a] == expected


def test_prefix_caching_refuses_what_is_not_a_tri_state():
    with pytest.raises(ValueError, match="enable_prefix_caching is 'sometimes'"):
        build_serve_args(dict(STABLE, enable_prefix_caching="sometimes"))


@pytest.mark.parametrize("extra", [["-tp", "2"], ["--tensor-parallel-size=2"], ["--tensor_parallel_size", "2"],
                                   ["--seed", "1", "-pp", "2"], ["--nnodes", "2"], ["--headless"],
                                   ["--master-addr", "10.0.0.1"]])
def test_the_parallel_layout_in_extra_args_is_refused_with_the_roles_variables(extra: list[str]):
    with pytest.raises(ValueError, match="the role sets itself") as refused:
        checked_settings(dict(STABLE, extra_args=extra))
    assert "vllm_tensor_parallel_size" in str(refused.value) and "clusters" in str(refused.value)


@pytest.mark.parametrize("release", ["0.19.1", "0.34.0"])
def test_the_layout_flags_are_vllms_own_with_their_short_forms(release: str):
    """LAYOUT_FLAGS against the stand-in's tables, generated from each supported release's sdist."""
    table_path = Path(__file__).resolve().parents[3] / "testbed" / "vllm-standin" / "releases" / release
    table_path /= "vllm_serve.json"
    table = json.loads(table_path.read_text())
    aliases = {option["options"][0]: option["options"][1:] for option in table["options"]}
    assert {flag: ([short] if short else []) for flag, short in LAYOUT_FLAGS.items()} == {
        flag: aliases[flag] for flag in LAYOUT_FLAGS}
