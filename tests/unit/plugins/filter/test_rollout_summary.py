# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout filters at their boundary (the batches and the summary themselves: plugin_utils/test_rollout.py)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.filter.rollout import rollout_serial, rollout_summary


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


GROUPS = {"all": ["a", "b", "c"], "spark": ["a", "b", "c"], "clusters": ["a", "c"], "pair": ["a", "c"]}


def test_serial_filter_turns_units_into_hosts():
    assert rollout_serial([1], ["a", "c", "b"], GROUPS) == [2, 1]


@pytest.mark.parametrize(("batches", "hosts", "groups", "message"), [
    ([1], ["a", "b", "c"], GROUPS, "rollout_serial: the members of cluster pair"),
    ([0], ["b"], GROUPS, "rollout_serial: rollout_batches: 0 is not a batch size"),
    ([1], "abc", GROUPS, "hosts must be a list"),
    ([1], ["a"], ["pair"], "groups must be"),
])
def test_serial_filter_refuses_with_what_to_do(batches, hosts, groups, message):
    with pytest.raises(AnsibleFilterError, match=message):
        rollout_serial(batches, hosts, groups)


def test_summary_filter_with_groups_has_one_line_per_cluster():
    outcomes = {h: {"state": "unchanged"} for h in ("a", "c", "b")}
    summary = rollout_summary(outcomes, ["a", "c", "b"], GROUPS)
    assert [u["name"] for u in summary["units"]] == ["pair", "b"] and len(summary["lines"]) == 2
