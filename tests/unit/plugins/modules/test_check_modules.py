# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The modules end to end: real subprocesses (fake nvidia-smi / nvcc printing the GB10
captures), real files, AnsibleModule argument handling and exit / fail results."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.sparkfleet.serving.plugins.modules import (
    gpu_facts,
    gpu_requirements,
    serving_plan,
)

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
GB10 = FIXTURES / "gb10"
GIB = 1024**3
GB10_ROW = "0, NVIDIA GB10, GPU-00000000-0000-0000-0000-000000000000, 580.95.05, 12.1, [N/A], 0000000F:01:00.0"


def executable(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def run_module(module, args: dict, capsys) -> tuple[int, dict]:
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        module.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def gb10_box(tmp_path, monkeypatch):
    # Only the fake tools: the machine running the tests may have an nvcc of its own on PATH.
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    smi = executable(
        tmp_path / "bin/nvidia-smi",
        f'if [ $# -eq 0 ]; then cat "{GB10 / "nvidia-smi.txt"}"; else echo "{GB10_ROW}"; fi\n',
    )
    executable(tmp_path / "cuda-12.8/bin/nvcc", "echo 'Cuda compilation tools, release 12.8, V12.8.61'\n")
    executable(tmp_path / "cuda-13.0/bin/nvcc", f'cat "{GB10 / "nvcc-version.txt"}"\n')
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       127601248 kB\nMemFree:        117934112 kB\nMemAvailable:   121045876 kB\n")
    return {
        "nvidia_smi": str(smi),
        "cuda_search_globs": [str(tmp_path / "cuda-*/bin/nvcc")],
        "driver_version_file": str(GB10 / "proc-driver-nvidia-version.txt"),
        "meminfo_path": str(meminfo),
    }


def test_gpu_facts_on_a_gb10(gb10_box, capsys):
    code, result = run_module(gpu_facts, gb10_box, capsys)
    assert code == 0
    assert result["changed"] is False
    facts = result["ansible_facts"]["sparkfleet_gpu"]
    assert facts["present"] is True
    assert facts["driver_version"] == "580.95.05"
    assert facts["cuda_driver_version"] == "13.0"
    assert facts["unified_memory"] is True
    assert facts["toolkit"]["version"] == "13.0"  # the newest of 12.8 and 13.0
    assert facts["toolkit"]["path"].endswith("cuda-13.0/bin/nvcc")
    assert len(facts["toolkit"]["candidates"]) == 2
    assert facts["kernel_module"]["flavour"] == "open"
    assert facts["memory"]["total_bytes"] == 127601248 * 1024


def test_gpu_facts_without_a_driver_does_not_fail(tmp_path, capsys):
    not_loaded = FIXTURES / "variants/nvidia-smi-driver-not-loaded.txt"
    smi = executable(tmp_path / "nvidia-smi", f'cat "{not_loaded}"\nexit 9\n')
    args = {"nvidia_smi": str(smi), "cuda_search_globs": [], "driver_version_file": str(tmp_path / "absent")}
    code, result = run_module(gpu_facts, args, capsys)
    assert code == 0
    facts = result["ansible_facts"]["sparkfleet_gpu"]
    assert (facts["present"], facts["count"]) == (False, 0)
    assert facts["reason"].startswith("NVIDIA driver not loaded")


def test_gpu_facts_with_a_missing_nvidia_smi_path(tmp_path, capsys):
    args = {"nvidia_smi": str(tmp_path / "no/nvidia-smi"), "cuda_search_globs": []}
    code, result = run_module(gpu_facts, args, capsys)
    assert code == 0
    assert result["ansible_facts"]["sparkfleet_gpu"]["reason"].startswith("nvidia-smi not found")


def test_gpu_requirements_fails_with_every_problem_and_reports_without_failing(gb10_box, capsys):
    _code, facts_result = run_module(gpu_facts, gb10_box, capsys)
    facts = facts_result["ansible_facts"]["sparkfleet_gpu"]
    args = {
        "facts": facts,
        "min_driver_version": "580.126.09",
        "min_cuda_version": "13.1",
        "expected_gpu_names": ["GB10"],
    }
    code, result = run_module(gpu_requirements, args, capsys)
    assert code == 1
    assert result["failed"] is True
    assert result["msg"].startswith("2 GPU requirement(s) not met:")
    assert "found 580.95.05 (nvidia-smi), required >= 580.126.09" in result["msg"]
    code, result = run_module(gpu_requirements, {**args, "fail_on_error": False}, capsys)
    assert code == 0
    assert result["passed"] is False
    assert len(result["problems"]) == 2


def test_serving_plan_reads_config_json_and_safetensors(tmp_path, capsys):
    model = tmp_path / "Llama-3.1-8B-Instruct"
    model.mkdir()
    config = {
        "model_type": "llama",
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "max_position_embeddings": 131072,
    }
    (model / "config.json").write_text(json.dumps(config))
    with open(model / "model-00001-of-00001.safetensors", "wb") as handle:
        handle.truncate(3 * GIB)  # sparse: counts by size, takes no disk
    args = {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "model_path": str(model),
        "gpu_memory_utilization": 0.5,
        "max_model_len": 65536,
        "enforce_eager": True,
        "shm_size": "16g",
        "served_model_name": "llama",
        "unified_memory": True,
        "mem_total_bytes": 128 * GIB,
    }
    code, result = run_module(serving_plan, args, capsys)
    assert code == 0
    assert result["errors"] == []
    assert result["config_source"] == "config.json"
    assert result["weights_bytes"] == 3 * GIB
    assert result["estimate"] is True
    assert result["kv_capacity_tokens"] == int((0.5 * 128 * GIB - 3 * GIB - 4 * GIB) // (32 * 4096))


def test_serving_plan_fails_on_the_bf16_model(capsys):
    args = {
        "model": "Qwen/Qwen3.5-35B-A3B",
        "gpu_memory_utilization": 0.75,
        "max_model_len": 16384,
        "enforce_eager": True,
        "shm_size": "16g",
        "served_model_name": "q",
        "unified_memory": True,
        "mem_total_bytes": 127601248 * 1024,
    }
    code, result = run_module(serving_plan, args, capsys)
    assert code == 1
    assert "serving plan for Qwen/Qwen3.5-35B-A3B has 1 error(s)" in result["msg"]
    assert "Qwen/Qwen3.5-35B-A3B-FP8" in result["msg"]


# The vllm role's settings dict, as the vllm_serve_args filter takes it (its model_path is the
# container's path, its other keys the command line's only).
ROLE_SETTINGS = {
    "model_path": "/model", "served_model_name": "qwen3.5-35b", "host": "0.0.0.0", "port": 8000, "dtype": "auto",
    "quantization": "", "max_model_len": 16384, "gpu_memory_utilization": 0.75, "max_num_seqs": 16,
    "max_num_batched_tokens": 16384, "kv_cache_dtype": "auto", "enforce_eager": True, "enable_prefix_caching": True,
    "reasoning_parser": "qwen3", "tool_call_parser": "qwen3_coder", "enable_auto_tool_choice": True,
    "text_only": True, "extra_args": [],
}
BOX = {"model": "Qwen/Qwen3.5-35B-A3B-FP8", "shm_size": "16g", "unified_memory": True,
       "mem_total_bytes": 127601248 * 1024}


def plan_of(code: int, result: dict) -> tuple[int, dict]:
    """The exit code and the plan, without the echo of the arguments it was given."""
    return code, {key: value for key, value in result.items() if key != "invocation"}


@pytest.mark.parametrize("change, errors", [
    ({}, 0),
    ({"gpu_memory_utilization": "0.9", "max_model_len": "65536"}, 1),
    # fp8 KV with the align-mode block size above max_num_batched_tokens (prefix caching on).
    ({"kv_cache_dtype": "fp8", "max_num_batched_tokens": 2048}, 1),
    ({"enforce_eager": "false", "served_model_name": "", "enable_prefix_caching": None}, 0),
])
def test_serving_plan_from_the_settings_dict_equals_the_options(change, errors, capsys):
    settings = {**ROLE_SETTINGS, **change}
    options = {name: settings[name] for name in serving_plan.FROM_SETTINGS if settings.get(name) not in (None, "")}
    from_options = plan_of(*run_module(serving_plan, {**BOX, **options}, capsys))
    from_settings = plan_of(*run_module(serving_plan, {**BOX, "settings": settings}, capsys))
    assert from_settings == from_options
    assert len(from_settings[1]["errors"]) == errors, from_settings[1]["errors"]


def test_serving_plan_refuses_a_setting_given_twice(capsys):
    code, result = run_module(serving_plan, {**BOX, "settings": ROLE_SETTINGS, "dtype": "auto"}, capsys)
    assert code == 1
    assert "mutually exclusive" in result["msg"] and "dtype" in result["msg"]


def test_serving_plan_names_a_bad_value_in_the_settings(capsys):
    code, result = run_module(serving_plan, {**BOX, "settings": {**ROLE_SETTINGS, "max_num_seqs": "many"}}, capsys)
    assert code == 1
    assert result["msg"].startswith("settings.max_num_seqs:")
