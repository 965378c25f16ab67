# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The link role's plan (addresses, netplan file, refusals) and the doctor's cluster-wide findings."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.filter import link as link_filters
from ansible_collections.sparkfleet.serving.plugins.plugin_utils import link_plan
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.cluster import cluster_of_host

CX7 = [
    {"name": "enp1s0f1np1", "driver": "mlx5_core", "operstate": "up", "mtu": 1500, "ipv4": []},
    {"name": "enP2p1s0f1np1", "driver": "mlx5_core", "operstate": "up", "mtu": 1500, "ipv4": []},
    {"name": "enp1s0f0np0", "driver": "mlx5_core", "operstate": "down", "mtu": 1500, "ipv4": []},
    {"name": "enP7s7", "driver": "r8169", "operstate": "up", "mtu": 1500, "ipv4": ["10.0.0.5/24"]},
]


# Two inventories: pair1 (spark-a the head, spark-b rank 1) and trio (spark-a, spark-b, spark-c).
PAIR = {"spark": ["spark-a", "spark-b"], "clusters": ["spark-a", "spark-b"], "pair1": ["spark-a", "spark-b"]}
TRIO = {"spark": ["spark-a", "spark-b", "spark-c"], "clusters": ["spark-a", "spark-b", "spark-c"],
        "trio": ["spark-a", "spark-b", "spark-c"]}


def inputs(**changes) -> dict:
    """The role's defaults for spark-b, rank 1 of pair1, on a box as NVIDIA's playbook describes it; the
    cluster as roles/link/vars/main.yml gives it (the cluster_of filter's answer for the host)."""
    host = changes.get("host", "spark-b")
    data = {
        "host": host,
        "cluster": cluster_of_host(PAIR, host),
        "interfaces": [],
        "subnets": ["192.168.100.0/24", "192.168.101.0/24"],
        "host_numbers": {"spark-a": 0, "spark-b": 0},
        "first_host_number": 10,
        "mtu": 9000,
        "netplan_path": "/etc/netplan/40-sparkfleet-link.yaml",
        "facts": {"interfaces": CX7, "discovered": ["enp1s0f1np1", "enP2p1s0f1np1"],
                  "netplan_files": {"/etc/netplan/01-network-manager-all.yaml": {"devices": []}}},
    }
    data.update(changes)
    return data


def test_defaults_give_nvidias_addresses_by_rank():
    plan = link_plan.plan(inputs())
    assert plan["errors"] == []
    assert plan["addresses"] == {"enp1s0f1np1": "192.168.100.11/24", "enP2p1s0f1np1": "192.168.101.11/24"}
    assert plan["netplan"] == {"network": {"version": 2, "ethernets": {
        "enp1s0f1np1": {"addresses": ["192.168.100.11/24"], "dhcp4": False, "dhcp6": False, "link-local": [],
                        "mtu": 9000},
        "enP2p1s0f1np1": {"addresses": ["192.168.101.11/24"], "dhcp4": False, "dhcp6": False, "link-local": [],
                          "mtu": 9000}}}}
    assert plan["mode"] == "0600"
    assert (plan["rank"], plan["host_number"]) == (1, 11)
    assert plan["replaced"] == []
    # Nothing in force yet: the handler must run even if the file were already there.
    assert "enp1s0f1np1: MTU 1500, expected 9000" in plan["drift"]
    head = link_plan.plan(inputs(host="spark-a"))
    assert (head["rank"], head["addresses"]["enp1s0f1np1"]) == (0, "192.168.100.10/24")


def test_no_drift_once_in_force():
    facts = inputs()["facts"]
    in_force = [{**CX7[0], "mtu": 9000, "ipv4": ["192.168.100.11/24"]},
                {**CX7[1], "mtu": 9000, "ipv4": ["192.168.101.11/24"]}]
    assert link_plan.plan(inputs(facts={**facts, "interfaces": in_force}))["drift"] == []


def test_explicit_interfaces_and_host_number():
    plan = link_plan.plan(inputs(interfaces=["enP2p1s0f1np1"], host_numbers={"spark-a": 0, "spark-b": 42}))
    assert plan["addresses"] == {"enP2p1s0f1np1": "192.168.100.42/24"}


def test_peers_are_the_other_members_addresses_on_each_link_subnet():
    three = cluster_of_host(TRIO, "spark-b")
    plan = link_plan.plan(inputs(cluster=three, host_numbers={"spark-a": 0, "spark-b": 0, "spark-c": 50}))
    assert plan["peers"] == {
        "enp1s0f1np1": {"spark-a": "192.168.100.10", "spark-c": "192.168.100.50"},
        "enP2p1s0f1np1": {"spark-a": "192.168.101.10", "spark-c": "192.168.101.50"},
    }


def refusal(**changes) -> str:
    plan = link_plan.plan(inputs(**changes))
    assert plan["errors"], plan
    assert set(plan) == {"errors"}
    return " | ".join(plan["errors"])


def test_an_interface_the_box_does_not_have():
    message = refusal(interfaces=["enp1s0f1np9"])
    assert "link_interfaces names enp1s0f1np9, which spark-b does not have" in message
    assert "enp1s0f1np1 (up)" in message and "enp1s0f0np0 (down)" in message


def test_no_link_found():
    message = refusal(facts={"interfaces": CX7[2:], "discovered": [], "netplan_files": {}})
    assert "no ConnectX-7 interface with a link" in message and "enp1s0f0np0 (down)" in message


@pytest.mark.parametrize(("subnet", "expected"), [
    ("192.168.100.0/23", "is not an IPv4 /24"),
    ("192.168.100.10/24", "is not a network in CIDR notation"),
    ("fd00::/64", "is not an IPv4 /24"),
])
def test_a_subnet_that_is_not_a_24(subnet: str, expected: str):
    assert expected in refusal(subnets=[subnet, "192.168.101.0/24"])


def test_two_members_with_one_address():
    message = refusal(host_numbers={"spark-a": 11, "spark-b": 0})
    assert "spark-a and spark-b would both have host number 11" in message


def test_a_host_number_outside_the_24():
    assert "host number 255" in refusal(first_host_number=254)
    assert "host number 300" in refusal(host_numbers={"spark-a": 0, "spark-b": 300})


def test_mtu_below_1500():
    assert "link_mtu is 1400; expected at least 1500" in refusal(mtu=1400)


def test_more_interfaces_than_subnets():
    assert "add one to link_subnets" in refusal(subnets=["192.168.100.0/24"])


def test_not_in_a_cluster():
    assert "spark-b is in no cluster" in refusal(cluster={})


def test_nvidias_file_is_replaced_a_mixed_file_refused():
    facts = {**inputs()["facts"], "netplan_files": {"/etc/netplan/40-cx7.yaml": {"devices": ["enP2p1s0f1np1",
                                                                                             "enp1s0f1np1"]}}}
    assert link_plan.plan(inputs(facts=facts))["replaced"] == ["/etc/netplan/40-cx7.yaml"]
    facts["netplan_files"]["/etc/netplan/50-cloud-init.yaml"] = {"devices": ["enP7s7", "enp1s0f1np1"]}
    assert "configures enp1s0f1np1 (the link) together with enP7s7" in refusal(facts=facts)
    facts["netplan_files"] = {"/etc/netplan/x.yaml": {"error": "while parsing"}}
    assert "cannot be read (while parsing)" in refusal(facts=facts)


def test_input_errors_need_no_box():
    assert link_plan.input_errors({**inputs(), "facts": {}}) == []
    assert len(link_plan.input_errors(inputs(mtu=1000, subnets=["10.0.0.0/8"]))) == 2


def reports(mtu_b: int = 9000) -> dict:
    return {
        "spark-a": {"interfaces": [{"name": "enp1s0f1np1", "mtu": 9000, "ipv4": ["192.168.100.10/24"]}]},
        "spark-b": {"interfaces": [{"name": "enp1s0f1np1", "mtu": mtu_b, "ipv4": ["192.168.100.11/24"]}]},
    }


def test_each_member_pings_the_others_on_each_link():
    assert link_plan.peers(reports(), "spark-a") == [
        {"interface": "enp1s0f1np1", "host": "spark-b", "address": "192.168.100.11"}]
    assert link_plan.peers(reports(), "spark-b") == [
        {"interface": "enp1s0f1np1", "host": "spark-a", "address": "192.168.100.10"}]


def test_ends_that_differ_in_mtu_and_a_link_without_peer():
    assert link_plan.cluster_findings(reports(), "spark-a", 9000) == []
    found = link_plan.cluster_findings(reports(mtu_b=1500), "spark-a", 9000)
    assert [f["check"] for f in found] == ["mtu"]
    assert "spark-a enp1s0f1np1 9000, spark-b enp1s0f1np1 1500" in found[0]["found"]
    alone = link_plan.cluster_findings({"spark-a": reports()["spark-a"]}, "spark-a", 9000)
    assert [f["check"] for f in alone] == ["peer"]


def test_filters_at_their_boundary():
    with pytest.raises(AnsibleFilterError, match="expected a dict"):
        link_filters.link_plan(["x"])
    with pytest.raises(AnsibleFilterError, match="link_plan"):
        link_filters.link_plan({"host": "x", "cluster": {"name": "p", "members": ["x"]}})
    line = link_filters.link_finding_line({"severity": "error", "check": "mtu", "interface": "eth1",
                                           "found": "MTU 1500", "expected": "9000", "fix": "set it"})
    assert line == "ERROR mtu eth1: MTU 1500; expected 9000; fix: set it"
