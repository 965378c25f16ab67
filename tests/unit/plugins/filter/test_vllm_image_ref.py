# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""vllm_image_ref: the reference the rollback runs a recorded deployment's image by."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.filter.vllm import vllm_image_ref

OLD = "sha256:" + "a" * 64
NEW = "sha256:" + "b" * 64
DIGEST = "registry.example:5000/vllm/vllm-openai@sha256:" + "c" * 64
RECORD = {"image": "registry.example:5000/vllm/vllm-openai:v0.19.1-cu130", "image_id": OLD,
          "repo_digests": ["other/repo@sha256:" + "d" * 64, DIGEST]}


def test_the_recorded_reference_when_it_still_names_the_recorded_image():
    # docker_image_info of [image_id, reference]: both found, one image.
    assert vllm_image_ref([{"Id": OLD}, {"Id": OLD}], RECORD) == RECORD["image"]


def test_a_digest_of_the_same_repository_when_the_tag_has_moved():
    assert vllm_image_ref([{"Id": OLD}, {"Id": NEW}], RECORD) == DIGEST


def test_a_digest_of_the_same_repository_when_the_reference_is_gone():
    assert vllm_image_ref([{"Id": OLD}], RECORD) == DIGEST


def test_the_id_when_the_image_has_no_digest():
    # A locally built or loaded image has no repo digest: the id is all that pins it.
    assert vllm_image_ref([{"Id": OLD}, {"Id": NEW}], {**RECORD, "repo_digests": []}) == OLD


def test_any_recorded_digest_before_the_id():
    record = {**RECORD, "repo_digests": RECORD["repo_digests"][:1]}
    assert vllm_image_ref([{"Id": OLD}], record) == record["repo_digests"][0]


@pytest.mark.parametrize("images, record", [("x", RECORD), ([], "x"), ([], {"image": "a:b"})])
def test_bad_input_is_refused_with_a_message(images, record):
    with pytest.raises(AnsibleFilterError, match="vllm_image_ref"):
        vllm_image_ref(images, record)
