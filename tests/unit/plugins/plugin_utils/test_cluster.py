# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""cluster_of: a host's cluster (a child group of `clusters`) and its members in rank order."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.filter.cluster import cluster_of as cluster_filter
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.cluster import ClusterError, cluster_of

# As ansible-inventory builds `groups` from the documented shape (spark > clusters > pair1, pair2).
GROUPS = {
    "all": ["spark-a", "spark-b", "spark-c", "spark-d", "solo"],
    "ungrouped": [],
    "spark": ["spark-a", "spark-b", "spark-c", "spark-d", "solo"],
    "clusters": ["spark-b", "spark-a", "spark-c", "spark-d"],
    "pair1": ["spark-b", "spark-a"],
    "pair2": ["spark-c", "spark-d"],
    "gpu": ["spark-a", "solo"],
}


def test_members_in_the_inventory_order_head_first():
    assert cluster_of(GROUPS, ["all", "spark", "clusters", "pair1", "gpu"]) == {
        "name": "pair1", "members": ["spark-b", "spark-a"]}


def test_a_host_in_no_cluster():
    assert cluster_of(GROUPS, ["all", "spark", "gpu"]) == {}


def test_one_cluster_holding_every_box_of_spark():
    # spark and clusters hold the same hosts: only the child group is the cluster.
    groups = {"all": ["a", "b"], "spark": ["a", "b"], "clusters": ["a", "b"], "duo": ["a", "b"]}
    assert cluster_of(groups, ["all", "spark", "clusters", "duo"]) == {"name": "duo", "members": ["a", "b"]}


def test_a_host_in_two_clusters_is_refused_with_both_names():
    groups = {**GROUPS, "pair3": ["spark-a", "spark-c"]}
    with pytest.raises(ClusterError, match=r"2 cluster groups \(pair1, pair3\)"):
        cluster_of(groups, ["spark", "clusters", "pair1", "pair3"])


def test_filter_wraps_the_refusal_and_bad_input():
    with pytest.raises(AnsibleFilterError, match="pair1, pair3"):
        cluster_filter({**GROUPS, "pair3": ["spark-a"]}, ["clusters", "pair1", "pair3"])
    with pytest.raises(AnsibleFilterError, match="groups variable"):
        cluster_filter(["pair1"], ["pair1"])
    with pytest.raises(AnsibleFilterError, match="group_names"):
        cluster_filter(GROUPS, "pair1")
    assert cluster_filter(GROUPS, ("clusters", "pair2")) == {"name": "pair2", "members": ["spark-c", "spark-d"]}
