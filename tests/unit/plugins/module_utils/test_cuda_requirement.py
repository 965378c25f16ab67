# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""An image's CUDA requirement as NVIDIA's container runtime reads it (nvidia-container-toolkit,
internal/config/image/cuda_image.go): NVIDIA_REQUIRE_CUDA, a legacy image's CUDA_VERSION, NVIDIA_DISABLE_REQUIRE, and
the container's own environment over the image's."""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.serving.plugins.module_utils.cuda_requirement import (
    container_environment,
    driver_runs,
    environment,
    required_cuda,
    requirement_disabled,
)
from ansible_collections.sparkfleet.serving.plugins.module_utils.driver_policy import BRANCH_CUDA, driver_for_cuda

# The Config.Env of nvidia/cuda:13.0.2-base-ubuntu24.04, cut after its first brand= alternatives.
CUDA_13_0 = ["PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/bin:/bin", "NVARCH=sbsa",
             "NVIDIA_REQUIRE_CUDA=cuda>=13.0 brand=unknown,driver>=535,driver<536 brand=grid,driver>=535,driver<536",
             "CUDA_VERSION=13.0.2"]


@pytest.mark.parametrize(("env", "cuda"), [
    (CUDA_13_0, "13.0"),
    (["NVIDIA_REQUIRE_CUDA=cuda>=13.1 brand=tesla,driver>=580,driver<581", "CUDA_VERSION=13.1.0"], "13.1"),
    # The brand= alternatives are not read: the cuda>= term is what a driver without the compat package meets.
    (["NVIDIA_REQUIRE_CUDA=brand=tesla,driver>=580,driver<581 cuda>=12.9"], "12.9"),
    # A legacy image: CUDA_VERSION without NVIDIA_REQUIRE_CUDA requires cuda>= its major.minor.
    (["CUDA_VERSION=12.9.1"], "12.9"),
    (["NVIDIA_REQUIRE_CUDA=", "CUDA_VERSION=12.8.0"], "12.8"),
    # NVIDIA_REQUIRE_CUDA set without a cuda>= term: not a legacy image, no CUDA requirement.
    (["NVIDIA_REQUIRE_CUDA=brand=tesla,driver>=535", "CUDA_VERSION=13.0.2"], None),
    (["PATH=/usr/bin"], None),
    ([], None),
    (None, None),
    ({"NVIDIA_REQUIRE_CUDA": "cuda>=13.2"}, "13.2"),
    (["NVIDIA_REQUIRE_CUDA=cuda>=13"], "13"),
])
def test_the_cuda_an_environment_requires(env: object, cuda: str | None):
    assert required_cuda(env) == cuda


@pytest.mark.parametrize("value", ["1", "t", "T", "TRUE", "true", "True", " true "])
def test_what_go_reads_as_true_turns_the_requirement_off(value: str):
    assert requirement_disabled([*CUDA_13_0, f"NVIDIA_DISABLE_REQUIRE={value}"])
    assert requirement_disabled({"NVIDIA_DISABLE_REQUIRE": value})


@pytest.mark.parametrize("value", ["", "0", "false", "yes", "on", "enabled"])
def test_anything_else_leaves_it_on(value: str):
    # strconv.ParseBool refuses "yes" and "on": HasDisableRequire takes the error as false.
    assert not requirement_disabled([*CUDA_13_0, f"NVIDIA_DISABLE_REQUIRE={value}"])
    assert not requirement_disabled(CUDA_13_0)


def test_the_containers_own_environment_is_over_the_images():
    env = container_environment(CUDA_13_0, {"NVIDIA_REQUIRE_CUDA": "cuda>=12.9", "VLLM_LOGGING_LEVEL": 10})
    assert required_cuda(env) == "12.9"
    assert env["VLLM_LOGGING_LEVEL"] == "10"
    assert env["CUDA_VERSION"] == "13.0.2"
    assert environment(["NO_VALUE", "A=b=c"]) == {"A": "b=c"}


@pytest.mark.parametrize(("driver", "image", "runs"), [
    ("13.0", "13.0", True), ("13.0", "12.9", True), ("13.0", "13.1", False), ("13.1", "13.0", True),
    ("13.0", "13", True), ("12.10", "12.9", True), ("12.9", "12.10", False),
])
def test_a_driver_runs_what_requires_its_cuda_or_older(driver: str, image: str, runs: bool):
    assert driver_runs(driver, image) is runs


def test_the_driver_that_runs_a_cuda_is_the_oldest_branch_that_does():
    assert driver_for_cuda("13.1") == "a driver that runs CUDA 13.1 (branch 590 or newer)"
    assert driver_for_cuda("13.0") == "a driver that runs CUDA 13.0 (branch 580 or newer)"
    newest = max(BRANCH_CUDA)
    assert driver_for_cuda("99.0") == (f"a driver that runs CUDA 99.0 (a branch newer than {newest}, which runs CUDA "
                                       f"{BRANCH_CUDA[newest][0]})")
