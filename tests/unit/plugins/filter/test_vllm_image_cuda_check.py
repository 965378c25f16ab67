# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The vllm_image_cuda_check and vllm_driver_cuda filters: what the role hands them, and nvidia-smi's header."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.filter.vllm import vllm_driver_cuda, vllm_image_cuda_check

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
SPARK = {"spark-01": {"driver_version": "580.95.05", "cuda_version": "13.0"}}
DEPLOYMENT = {"image": "vllm/vllm-openai:v0.34.0-cu131", "declared": "", "env": {}, "name": "vllm", "host": "spark-01"}


def test_the_role_hands_the_deployment_and_the_drivers():
    assert vllm_image_cuda_check(DEPLOYMENT, SPARK)["refusal"].startswith("spark-01: deployment vllm's image")
    assert vllm_image_cuda_check({**DEPLOYMENT, "declared": " 13.0 "}, SPARK)["refusal"] == ""
    # A deployment's image_cuda_version written unquoted in YAML arrives as a number.
    assert vllm_image_cuda_check({**DEPLOYMENT, "declared": 13.0}, SPARK)["refusal"] == ""
    assert vllm_image_cuda_check({**DEPLOYMENT, "declared": None}, SPARK)["requires"] == "13.1"
    after = vllm_image_cuda_check({**DEPLOYMENT, "image": "vllm/vllm-openai:v0.34.0"}, SPARK,
                                  ["NVIDIA_REQUIRE_CUDA=cuda>=13.1"])
    assert "nothing changed on it" in after["refusal"]


@pytest.mark.parametrize(("args", "words"), [
    (({**DEPLOYMENT, "env": None}, SPARK), "env: a dict"),
    (({"image": "x"}, SPARK), "expects the deployment as a dict of image, declared, env, name, host"),
    (("vllm/vllm-openai:v0.34.0", SPARK), "expects the deployment"),
    ((DEPLOYMENT, ["spark-01"]), "expects the drivers by host"),
    ((DEPLOYMENT, SPARK, "NVIDIA_REQUIRE_CUDA=cuda>=13.1"), "image_env must be the image's Config.Env"),
])
def test_what_is_not_of_the_expected_shape_is_refused(args: tuple, words: str):
    with pytest.raises(AnsibleFilterError, match=words):
        vllm_image_cuda_check(*args)


def test_the_cuda_version_of_the_gb10s_driver_from_nvidia_smi():
    table = (FIXTURES / "gb10/nvidia-smi.txt").read_text(encoding="utf-8")
    assert vllm_driver_cuda(table) == {"driver_version": "580.95.05", "cuda_version": "13.0"}
    older = (FIXTURES / "variants/a100-x86_64-535-cuda12.2/nvidia-smi.txt").read_text(encoding="utf-8")
    assert vllm_driver_cuda(older) == {"driver_version": "535.104.05", "cuda_version": "12.2"}


@pytest.mark.parametrize("table", [(FIXTURES / "variants/nvidia-smi-driver-not-loaded.txt").read_text(encoding="utf-8"),
                                   "", None, 3])
def test_no_header_no_cuda_version(table: object):
    assert vllm_driver_cuda(table) == {"driver_version": None, "cuda_version": None}
