# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""cluster_of: a host's cluster (a child group of `clusters`), its members in rank order, its head,
and the host's rank and role."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.filter.cluster import cluster_of as cluster_filter
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.cluster import (
    ClusterError,
    cluster_of,
    cluster_of_host,
    head,
    place,
)

# As ansible-inventory builds `groups` from the documented shape (spark > clusters > pair1, pair2, trio).
GROUPS = {
    "all": ["spark-a", "spark-b", "spark-c", "spark-d", "spark-e", "spark-f", "spark-g", "solo"],
    "ungrouped": [],
    "spark": ["spark-a", "spark-b", "spark-c", "spark-d", "spark-e", "spark-f", "spark-g", "solo"],
    "clusters": ["spark-b", "spark-a", "spark-c", "spark-d", "spark-e", "spark-f", "spark-g"],
    "pair1": ["spark-b", "spark-a"],
    "pair2": ["spark-c", "spark-d"],
    "trio": ["spark-e", "spark-f", "spark-g"],
    "gpu": ["spark-a", "solo"],
}
PAIR1 = ["all", "spark", "clusters", "pair1", "gpu"]


def test_the_head_is_the_first_member_in_the_inventory_order():
    # spark-b is listed first in pair1: it is the head although spark-a sorts first.
    assert cluster_of(GROUPS, PAIR1, "spark-b") == {
        "name": "pair1", "members": ["spark-b", "spark-a"], "head": "spark-b", "rank": 0, "role": "head", "size": 2}


def test_a_worker_has_its_rank_and_knows_its_head():
    assert cluster_of(GROUPS, PAIR1, "spark-a") == {
        "name": "pair1", "members": ["spark-b", "spark-a"], "head": "spark-b", "rank": 1, "role": "worker", "size": 2}


@pytest.mark.parametrize(("host", "rank", "role"), [
    ("spark-e", 0, "head"), ("spark-f", 1, "worker"), ("spark-g", 2, "worker"),
])
def test_every_member_of_a_larger_cluster_has_its_own_rank(host, rank, role):
    found = cluster_of(GROUPS, ["all", "spark", "clusters", "trio"], host)
    assert (found["head"], found["rank"], found["role"], found["size"]) == ("spark-e", rank, role, 3)


def test_a_host_in_no_cluster():
    assert cluster_of(GROUPS, ["all", "spark", "gpu"], "solo") == {}


def test_one_cluster_holding_every_box_of_spark():
    # spark and clusters hold the same hosts: only the child group is the cluster.
    groups = {"all": ["a", "b"], "spark": ["a", "b"], "clusters": ["a", "b"], "duo": ["a", "b"]}
    assert cluster_of(groups, ["all", "spark", "clusters", "duo"], "b") == {
        "name": "duo", "members": ["a", "b"], "head": "a", "rank": 1, "role": "worker", "size": 2}


def test_a_host_in_two_clusters_is_refused_with_both_names():
    groups = {**GROUPS, "pair3": ["spark-a", "spark-c"]}
    with pytest.raises(ClusterError, match=r"2 cluster groups \(pair1, pair3\)"):
        cluster_of(groups, ["spark", "clusters", "pair1", "pair3"], "spark-a")


def test_a_host_not_among_the_members_its_group_names_give_is_refused():
    # Another host's group_names with this host's name: the answer would be some other box's place.
    with pytest.raises(ClusterError, match=r"solo is not a member of the cluster \(spark-b, spark-a\)"):
        cluster_of(GROUPS, PAIR1, "solo")


def test_head_and_place_are_the_one_definition():
    assert head(["x", "y", "z"]) == "x"
    assert place(["x", "y", "z"], "z") == {"head": "x", "rank": 2, "role": "worker", "size": 3}
    assert place(["x"], "x") == {"head": "x", "rank": 0, "role": "head", "size": 1}
    with pytest.raises(ClusterError, match="w is not a member"):
        place(["x", "y"], "w")


def test_cluster_of_host_reads_the_hosts_groups_from_groups():
    # What the filter answers with the host's group_names, found without them.
    for host in ("spark-a", "spark-b", "spark-f"):
        names = [name for name, hosts in GROUPS.items() if host in hosts]
        assert cluster_of_host(GROUPS, host) == cluster_of(GROUPS, names, host)
    assert cluster_of_host(GROUPS, "spark-d")["head"] == "spark-c"
    assert cluster_of_host(GROUPS, "solo") == {}
    assert cluster_of_host(GROUPS, "not-in-the-inventory") == {}
    with pytest.raises(ClusterError, match="pair1, pair3"):
        cluster_of_host({**GROUPS, "pair3": ["spark-a", "spark-c"]}, "spark-a")


def test_filter_wraps_the_refusal_and_bad_input():
    with pytest.raises(AnsibleFilterError, match="pair1, pair3"):
        cluster_filter({**GROUPS, "pair3": ["spark-a"]}, ["clusters", "pair1", "pair3"], "spark-a")
    with pytest.raises(AnsibleFilterError, match="groups variable"):
        cluster_filter(["pair1"], ["pair1"], "spark-a")
    with pytest.raises(AnsibleFilterError, match="group_names"):
        cluster_filter(GROUPS, "pair1", "spark-a")
    with pytest.raises(AnsibleFilterError, match="inventory_hostname"):
        cluster_filter(GROUPS, ["pair1"], ["spark-a"])
    with pytest.raises(AnsibleFilterError, match="cluster_of: solo is not a member"):
        cluster_filter(GROUPS, ["pair1"], "solo")
    assert cluster_filter(GROUPS, ("clusters", "pair2"), "spark-d") == {
        "name": "pair2", "members": ["spark-c", "spark-d"], "head": "spark-c", "rank": 1, "role": "worker", "size": 2}
