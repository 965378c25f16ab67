# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout_summary filter at its boundary (the summary itself: module_utils/test_rollout.py)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.filter.rollout import rollout_summary


@pytest.mark.parametrize("bad", [None, [], {"x": "deployed"}])
def test_filter_refuses_what_is_not_outcomes(bad):
    with pytest.raises(AnsibleFilterError):
        rollout_summary(bad)


def test_filter_refuses_hosts_that_are_not_names():
    with pytest.raises(AnsibleFilterError):
        rollout_summary({}, "fleet-1")


def test_filter_orders_hosts_as_asked():
    summary = rollout_summary({"b": {"state": "unchanged"}, "a": {"state": "deployed"}}, ["a", "b"])
    assert [e["host"] for e in summary["hosts"]] == ["a", "b"]
    assert summary["complete"] is True
