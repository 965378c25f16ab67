# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The vllm role's CUDA check (plugins/plugin_utils/vllm_image_cuda.py): the CUDA an image reference says, the image's
own requirement once it is on the box, and the refusal on a driver that runs an older CUDA."""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_releases import SUPPORTED
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.vllm_image_cuda import check
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.vllm_serve_check import (
    UNSUFFIXED_CUDA,
    cuda_from_image,
    image_tag,
)

SPARK = {"spark-01": {"driver_version": "580.142", "cuda_version": "13.0"}}
NEW_IMAGE_ENV = ["NVIDIA_REQUIRE_CUDA=cuda>=13.1 brand=unknown,driver>=535,driver<536", "CUDA_VERSION=13.1.0"]
OLD_IMAGE_ENV = ["NVIDIA_REQUIRE_CUDA=cuda>=13.0 brand=unknown,driver>=535,driver<536", "CUDA_VERSION=13.0.2"]


def deployment(image: str = "vllm/vllm-openai:v0.34.0", declared: str = "", env: dict | None = None) -> dict:
    return {"image": image, "declared": declared, "env": env or {}, "name": "vllm", "host": "spark-01"}


@pytest.mark.parametrize(("ref", "cuda"), [
    ("vllm/vllm-openai:v0.34.0-cu131", "13.1"),
    ("vllm/vllm-openai:v0.34.0-cu129", "12.9"),
    ("vllm/vllm-openai:v0.19.1-cu130", "13.0"),
    ("vllm/vllm-openai:v0.34.0-aarch64-cu129", "12.9"),
    ("registry.example:5000/vllm/vllm-openai:v0.34.0-cu131@sha256:" + "a" * 64, "13.1"),
    # Any repository's -cuXYZ tag: the convention is PyTorch's and vLLM's alike.
    ("registry.example:5000/team/vllm:2026.06-cu118", "11.8"),
    ("team/vllm:cu126", "12.6"),
    # A release tag without a suffix: the release's unsuffixed family.
    ("vllm/vllm-openai:v0.34.0", "13.0"),
    ("vllm/vllm-openai:v0.34.0-aarch64", "13.0"),
    ("registry.example:5000/vllm/vllm-openai:v0.34.0", "13.0"),
    ("vllm/vllm-openai:v0.19.1", "12.9"),
])
def test_the_cuda_a_reference_says(ref: str, cuda: str):
    found = cuda_from_image(ref)
    assert found is not None and found[0] == cuda


@pytest.mark.parametrize("ref", [
    "vllm/vllm-openai@sha256:" + "a" * 64,   # a digest alone
    "registry.example:5000/team/vllm:dev",    # a local build's tag
    "registry.example:5000/team/vllm",         # no tag: the host's port is none
    "vllm/vllm-openai:latest",
    "vllm/vllm-openai:nightly",
    "vllm/vllm-openai:v0.35.0",               # a release the collection has no line for
    "team/vllm:v0.34.0",                       # a release tag of another repository
    "team/cuda:12.4-cudnn",                    # cuda, not cuXYZ
    "team/vllm:cu12",                          # a major version alone
    "team/vllm:dev-cu1300",
])
def test_a_reference_that_says_nothing(ref: str):
    assert cuda_from_image(ref) is None


def test_the_tag_of_a_reference():
    assert image_tag("registry.example:5000/vllm/vllm-openai:v0.34.0@sha256:" + "a" * 64) == "v0.34.0"
    assert image_tag("registry.example:5000/vllm/vllm-openai") == ""
    assert image_tag("vllm/vllm-openai@sha256:" + "a" * 64) == ""


def test_every_supported_release_has_its_unsuffixed_family_with_its_source():
    assert set(UNSUFFIXED_CUDA) == set(SUPPORTED)
    assert UNSUFFIXED_CUDA["0.34.0"][0] == "13.0"
    assert UNSUFFIXED_CUDA["0.19.1"][0] == "12.9"
    for release, (_cuda, where) in UNSUFFIXED_CUDA.items():
        assert f"vLLM {release} sdist" in where and "lines" in where


def test_an_image_built_for_a_newer_cuda_is_refused_before_the_pull():
    result = check(deployment("vllm/vllm-openai:v0.34.0-cu131"), SPARK)
    assert (result["requires"], result["checked"]) == ("13.1", ["spark-01"])
    assert result["refusal"] == (
        "spark-01: deployment vllm's image vllm/vllm-openai:v0.34.0-cu131 requires CUDA 13.1 (the -cu131 of its tag), "
        "but spark-01's NVIDIA driver 580.142 runs CUDA up to 13.0 (nvidia-smi's \"CUDA Version\"): NVIDIA's "
        "container runtime refuses it (\"requirement error: unsatisfied condition: cuda>=13.1, please update your "
        "driver to a newer version, or use an earlier cuda container\"), or, where the image lists its driver branch "
        "as a brand= alternative, starts it on CUDA forward compatibility, which NVIDIA supports on data-center GPUs "
        "only (https://docs.nvidia.com/deploy/cuda-compatibility/). Expected: an image that requires "
        "CUDA 13.0 or older, or a driver that runs CUDA 13.1 (branch 590 or newer). Fix: set vllm_image to "
        "vllm/vllm-openai:v0.34.0 (vLLM 0.34.0's CUDA 13.0 build), or move spark-01 to such a driver; if the "
        "reference is wrong about the image, set vllm_image_cuda_version to the CUDA it requires. Nothing was pulled "
        "and nothing changed.")


@pytest.mark.parametrize("image", ["vllm/vllm-openai:v0.34.0", "vllm/vllm-openai:v0.34.0-aarch64",
                                   "vllm/vllm-openai:v0.19.1-cu130", "vllm/vllm-openai:v0.19.1",
                                   "vllm/vllm-openai:v0.34.0-cu129"])
def test_the_supported_images_pass_on_driver_580(image: str):
    result = check(deployment(image), SPARK)
    assert result["refusal"] == "" and result["checked"] == ["spark-01"]


def test_a_reference_that_says_nothing_is_not_checked_before_the_pull():
    result = check(deployment("registry.example:5000/team/vllm@sha256:" + "b" * 64), SPARK)
    assert (result["requires"], result["refusal"], result["checked"]) == (None, "", [])


def test_the_declared_version_wins_over_the_reference():
    refused = check(deployment("registry.example:5000/team/vllm:dev", declared="13.2"), SPARK)["refusal"]
    assert "requires CUDA 13.2 (as vllm_image_cuda_version declares)" in refused
    assert "a driver that runs CUDA 13.2 (branch 595 or newer)" in refused
    assert refused.endswith("or correct vllm_image_cuda_version. Nothing was pulled and nothing changed.")
    # A tag that says more than the image needs, corrected.
    assert check(deployment("vllm/vllm-openai:v0.34.0-cu131", declared="13.0"), SPARK)["refusal"] == ""


def test_the_deployments_own_requirement_wins_before_the_pull():
    env = {"NVIDIA_REQUIRE_CUDA": "cuda>=13.1"}
    result = check(deployment("vllm/vllm-openai:v0.34.0", declared="13.0", env=env), SPARK)
    assert result["requires"] == "13.1"
    assert "NVIDIA_REQUIRE_CUDA='cuda>=13.1' in the deployment's vllm_env or vllm_extra_env" in result["refusal"]


@pytest.mark.parametrize("declared", ["thirteen", "13.x", "v13.0", "13.0.1.2", ">=13.0"])
def test_a_declared_version_that_is_no_version_is_refused(declared: str):
    refused = check(deployment(declared=declared), SPARK)["refusal"]
    assert refused.startswith(f"vllm_image_cuda_version is {declared!r}; expected the CUDA version the image requires")


def test_once_on_the_box_the_images_own_requirement_decides():
    # The tag says nothing of 13.1; the image's environment does.
    refused = check(deployment("vllm/vllm-openai:v0.34.0"), SPARK, NEW_IMAGE_ENV)["refusal"]
    assert "requires CUDA 13.1 (its NVIDIA_REQUIRE_CUDA, cuda>=13.1)" in refused
    assert "set vllm_image to an image built for CUDA 13.0 or older, or move spark-01 to such a driver." in refused
    assert refused.endswith("The image is on spark-01, but the container vllm was neither created nor replaced: "
                            "nothing changed on it.")
    # A tag that says 13.1 of an image that requires 13.0: the image is right.
    assert check(deployment("registry.example:5000/team/vllm:dev-cu131"), SPARK, OLD_IMAGE_ENV)["refusal"] == ""


def test_a_legacy_images_cuda_version_and_the_deployments_environment_over_the_image():
    refused = check(deployment(), SPARK, ["CUDA_VERSION=13.1.0"])["refusal"]
    assert "its CUDA_VERSION 13.1.0, which the runtime reads as cuda>=13.1" in refused
    lowered = check(deployment(env={"NVIDIA_REQUIRE_CUDA": "cuda>=13.0"}), SPARK, NEW_IMAGE_ENV)
    assert (lowered["requires"], lowered["refusal"]) == ("13.0", "")


def test_the_declared_version_stands_for_an_image_that_requires_nothing():
    assert "as vllm_image_cuda_version declares" in check(deployment(declared="13.1"), SPARK, ["PATH=/bin"])["refusal"]
    assert check(deployment(declared="13.1"), SPARK, OLD_IMAGE_ENV)["refusal"] == ""
    assert check(deployment("team/vllm:dev-cu131"), SPARK, [])["requires"] is None


@pytest.mark.parametrize("image_env", [None, NEW_IMAGE_ENV])
def test_nvidia_disable_require_turns_the_check_off_as_it_turns_the_runtimes_off(image_env: list | None):
    result = check(deployment("vllm/vllm-openai:v0.34.0-cu131", env={"NVIDIA_DISABLE_REQUIRE": "true"}), SPARK,
                   image_env)
    assert (result["disabled"], result["refusal"]) == (True, "")
    # Go's ParseBool: "yes" is no boolean, and the runtime checks.
    assert check(deployment("vllm/vllm-openai:v0.34.0-cu131", env={"NVIDIA_DISABLE_REQUIRE": "yes"}), SPARK,
                 image_env)["refusal"]


def test_the_images_own_disable_counts_too():
    assert check(deployment(), SPARK, [*NEW_IMAGE_ENV, "NVIDIA_DISABLE_REQUIRE=1"])["refusal"] == ""


def test_a_box_whose_drivers_cuda_is_not_known_is_not_checked():
    drivers = {"spark-01": {"driver_version": None, "cuda_version": None}, "spark-02": {}, "spark-03": "x",
               "spark-04": {"cuda_version": "N/A"}}
    result = check(deployment("vllm/vllm-openai:v0.34.0-cu131"), drivers)
    assert (result["refusal"], result["checked"]) == ("", [])
    assert result["unknown"] == ["spark-01", "spark-02", "spark-03", "spark-04"]


def test_every_member_of_a_cluster_refuses_for_the_member_whose_driver_is_older():
    drivers = {"spark-01": {"driver_version": "590.44.01", "cuda_version": "13.1"},
               "spark-02": {"driver_version": "580.142", "cuda_version": "13.0"}}
    for host in drivers:
        refused = check({**deployment("vllm/vllm-openai:v0.34.0-cu131"), "host": host}, drivers)["refusal"]
        assert refused.startswith(f"{host}: deployment vllm's image")
        assert ("but spark-02's NVIDIA driver 580.142 runs CUDA up to 13.0 (nvidia-smi's \"CUDA Version\"; its "
                "cluster runs the image on every member)") in refused
        assert "move spark-02 to such a driver" in refused
        assert "spark-01's" not in refused


def test_each_deployment_of_a_box_is_checked_on_its_own():
    ok = check({**deployment("vllm/vllm-openai:v0.34.0"), "name": "chat"}, SPARK)
    refused = check({**deployment("vllm/vllm-openai:v0.34.0-cu131"), "name": "coder"}, SPARK)
    assert ok["refusal"] == ""
    assert refused["refusal"].startswith("spark-01: deployment coder's image vllm/vllm-openai:v0.34.0-cu131")


def test_a_driver_of_an_unknown_version_that_says_its_cuda():
    refused = check(deployment("vllm/vllm-openai:v0.34.0-cu131"), {"spark-01": {"cuda_version": "13.0"}})["refusal"]
    assert "spark-01's NVIDIA driver of an unknown version runs CUDA up to 13.0" in refused
