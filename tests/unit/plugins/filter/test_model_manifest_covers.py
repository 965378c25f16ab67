# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""model_manifest_covers: the check tasks ask the download program's own rule (covers())."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.filter.model import model_manifest_covers
from ansible_collections.sparkfleet.serving.plugins.module_utils.model_plan import covers

MANIFESTS = [None, {}, {"include": [], "exclude": []}, {"include": ["*.json"], "exclude": []}]
SELECTIONS = [([], []), (["*.json"], []), (["*.json"], ["a.json"])]


@pytest.mark.parametrize("manifest", MANIFESTS)
@pytest.mark.parametrize(("include", "exclude"), SELECTIONS)
def test_the_filter_answers_as_the_program_does(manifest, include, exclude):
    assert model_manifest_covers(manifest, include, exclude) is covers(manifest, include, exclude)


def test_a_selection_that_is_not_lists_is_an_error():
    with pytest.raises(AnsibleFilterError, match="lists of patterns"):
        model_manifest_covers({}, "*.json", [])
