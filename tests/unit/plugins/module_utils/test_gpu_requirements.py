# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import copy

import pytest

from ansible_collections.sparkfleet.serving.plugins.module_utils.gpu_requirements import (
    ARGUMENT_SPEC,
    check_requirements,
    evaluate,
    failure_message,
)

SPARK_REQUIREMENTS = {
    "min_driver_version": "580",
    "min_cuda_version": "13.0",
    "expected_gpu_names": ["GB10"],
    "expected_compute_capabilities": ["12.1"],
    "expected_architectures": ["aarch64"],
    "allowed_architectures": ["x86_64"],
    "require_container_toolkit": False,
    "min_gpu_count": 1,
}
GB10 = {
    "present": True,
    "reason": "",
    "count": 1,
    "gpus": [
        {
            "index": 0,
            "name": "NVIDIA GB10",
            "compute_cap": "12.1",
            "driver_version": "580.142",
            "memory_total_mib": None,
        }
    ],
    "names": ["NVIDIA GB10"],
    "compute_caps": ["12.1"],
    "driver_version": "580.142",
    "cuda_driver_version": "13.0",
    "toolkit": {"present": True, "version": "13.0", "path": "/usr/local/cuda-13.0/bin/nvcc"},
    "kernel_module": {"readable": True, "version": "580.142", "flavour": "open"},
    "architecture": "aarch64",
    "unified_memory": True,
    "container_toolkit": {"present": True, "evidence": ["nvidia-ctk at /usr/bin/nvidia-ctk"]},
}


def facts(**changes) -> dict:
    data = copy.deepcopy(GB10)
    data.update(changes)
    return data


def names(result: dict) -> list[str]:
    return [p["requirement"] for p in result["problems"]]


def test_a_dgx_spark_passes():
    assert check_requirements(facts(), SPARK_REQUIREMENTS) == {"passed": True, "problems": [], "warnings": []}


@pytest.mark.parametrize("driver", ["580.95.05", "580.126.09", "580.142", "580.159.03", "590.1"])
def test_field_drivers_pass(driver):
    assert check_requirements(facts(driver_version=driver), SPARK_REQUIREMENTS)["passed"]


def test_old_driver_lists_driver_and_cuda_with_found_and_required():
    result = check_requirements(facts(driver_version="535.247.01", cuda_driver_version="12.2"), SPARK_REQUIREMENTS)
    assert not result["passed"]
    assert names(result) == ["NVIDIA driver", "CUDA version supported by the driver"]
    driver, cuda = result["problems"]
    assert (driver["found"], driver["required"]) == ("535.247.01 (nvidia-smi)", ">= 580")
    assert (cuda["found"], cuda["required"]) == ("12.2", ">= 13.0")
    assert "nvidia-driver-580-open" in driver["fix"]
    text = failure_message(result["problems"])
    assert text.startswith("2 GPU requirement(s) not met:")
    assert "NVIDIA driver: found 535.247.01 (nvidia-smi), required >= 580. Fix:" in text


def test_numeric_not_string_comparison():
    result = check_requirements(facts(driver_version="580.95.05"), {"min_driver_version": "580.126.09"})
    assert names(result) == ["NVIDIA driver"]
    assert check_requirements(facts(driver_version="580.142"), {"min_driver_version": "580.126.09"})["passed"]


def test_no_gpu_lists_every_unmet_requirement_at_once():
    no_gpu = facts(
        present=False,
        reason="NVIDIA driver not loaded (nvidia-smi could not communicate with the driver)",
        gpus=[],
        names=[],
        compute_caps=[],
        driver_version=None,
        cuda_driver_version=None,
        count=0,
        kernel_module={"readable": False, "version": None, "flavour": None},
    )
    result = check_requirements(no_gpu, SPARK_REQUIREMENTS)
    assert names(result) == ["Usable NVIDIA GPU", "NVIDIA driver", "CUDA version supported by the driver"]
    assert "modprobe nvidia" in result["problems"][0]["fix"]
    assert result["problems"][1]["found"].startswith("none (NVIDIA driver not loaded")
    assert result["problems"][1]["required"] == ">= 580"
    assert result["problems"][2]["required"] == ">= 13.0"


def test_driver_from_kernel_module_when_nvidia_smi_is_silent():
    silent = facts(
        present=False,
        reason="nvidia-smi not found (NVIDIA driver utilities not installed)",
        driver_version=None,
        kernel_module={"readable": True, "version": "575.51.03", "flavour": "open"},
    )
    result = check_requirements(silent, {"min_driver_version": "580"})
    assert result["problems"][1]["found"] == "575.51.03 (kernel module file)"
    assert "install the NVIDIA driver" in result["problems"][0]["fix"]


def test_unparsable_driver_is_reported_not_crashed():
    result = check_requirements(facts(driver_version="[N/A]"), {"min_driver_version": "580"})
    assert result["problems"][0]["found"] == "'[N/A]' (not a version number)"


def test_wrong_gpu_and_compute_capability_and_count():
    h100 = facts(gpus=[{"name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0"}], names=["NVIDIA H100 80GB HBM3"])
    result = check_requirements(h100, {**SPARK_REQUIREMENTS, "min_gpu_count": 2})
    assert names(result) == ["GPU count", "GPU model", "GPU compute capability"]
    assert result["problems"][1]["found"] == "NVIDIA H100 80GB HBM3"
    assert result["problems"][1]["required"] == "one of GB10"
    assert result["problems"][2]["found"] == "9.0"


def test_gpu_name_match_is_case_insensitive_substring():
    assert check_requirements(facts(), {"expected_gpu_names": ["gb10"]})["passed"]


def test_x86_64_is_allowed_with_a_warning_and_others_refused():
    result = check_requirements(facts(architecture="x86_64"), SPARK_REQUIREMENTS)
    assert result["passed"]
    assert result["warnings"] == [
        "architecture x86_64 is allowed but not the expected aarch64: images and defaults are tuned for aarch64 "
        "(e.g. the vLLM image tag must match x86_64)"
    ]
    refused = check_requirements(facts(architecture="ppc64le"), SPARK_REQUIREMENTS)
    assert names(refused) == ["CPU architecture"]
    assert refused["problems"][0]["required"] == "aarch64 (or, with a warning, x86_64)"


def test_toolkit_minimum_is_optional():
    old = facts(toolkit={"present": True, "version": "12.2", "path": "/usr/local/cuda-12.2/bin/nvcc"})
    assert check_requirements(old, SPARK_REQUIREMENTS)["passed"]
    result = check_requirements(old, {"min_toolkit_version": "13.0"})
    assert result["problems"][0]["found"] == "12.2 (/usr/local/cuda-12.2/bin/nvcc)"
    assert "cuda-toolkit-13-0" in result["problems"][0]["fix"]
    missing = check_requirements(
        facts(toolkit={"present": False, "version": None, "path": None}), {"min_toolkit_version": "13.0"}
    )
    assert missing["problems"][0]["found"].startswith("none (no nvcc")


def test_container_toolkit_missing_is_a_warning_unless_required():
    without = facts(container_toolkit={"present": False, "evidence": []})
    result = check_requirements(without, SPARK_REQUIREMENTS)
    assert result["passed"]
    assert "NVIDIA Container Toolkit: not found" in result["warnings"][0]
    required = check_requirements(without, {**SPARK_REQUIREMENTS, "require_container_toolkit": True})
    assert names(required) == ["NVIDIA Container Toolkit"]


def options(**changes) -> dict:
    """The options as the module and the action validate them: defaults, then the Spark's."""
    params = {name: spec.get("default") for name, spec in ARGUMENT_SPEC.items()}
    params.update(SPARK_REQUIREMENTS)
    params["facts"] = facts()
    params.update(changes)
    return params


def test_evaluate_passes_a_spark_and_fails_an_old_driver_with_the_message():
    output, error, _warnings = evaluate(options())
    assert (output["passed"], error) == (True, None)
    output, error, _warnings = evaluate(options(facts=facts(driver_version="570.86")))
    assert output["passed"] is False
    assert error == failure_message(output["problems"])
    assert "driver" in error


def test_evaluate_only_reports_without_fail_on_error():
    output, error, _warnings = evaluate(options(facts=facts(driver_version="570.86"), fail_on_error=False))
    assert error is None
    assert output["problems"]


def test_evaluate_refuses_a_bad_version_option_before_checking():
    output, error, warnings = evaluate(options(min_driver_version="five-eighty"))
    assert output == {"changed": False}
    assert "min_driver_version" in error
    assert warnings == []
