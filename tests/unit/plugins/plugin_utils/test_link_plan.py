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


# --- the addresses NVIDIA's tools gave the link ------------------------------------------------------
# The files NVIDIA's tools write for the link's ports alone: the connect-two-sparks playbook's
# /etc/netplan/40-cx7.yaml (nvidia/connect-two-sparks/README.md, "Step 3": addresses and dhcp4, no MTU), the
# connect-multiple-sparks one's (nvidia/playbook-connect-multiple-sparks/assets/cx7-netplan-example.yaml,
# 192.168.1.10/24 ... 192.168.4.10/24), NVIDIA Sync's /etc/netplan/99-nvidia-sync-cluster.yaml. The addresses
# below differ from the role's (.10/.11 in 192.168.100/101.0/24) so that the tests tell which were given.

NVIDIA = "/etc/netplan/40-cx7.yaml"
SYNC = "/etc/netplan/99-nvidia-sync-cluster.yaml"
KEPT = "/var/lib/sparkfleet/link/netplan-replaced/40-cx7.yaml"
ROLES = {"enp1s0f1np1": "192.168.100.11/24", "enP2p1s0f1np1": "192.168.101.11/24"}


def netplan_file(addresses: dict[str, list[str]], mtu: int | None = 9000) -> dict:
    """A file as link_facts reads it: the devices it configures and what it gives each."""
    return {"devices": sorted(addresses),
            "settings": {name: {"addresses": given, "mtu": mtu} for name, given in addresses.items()}}


def sync_file(host_number: int, mtu: int | None = 9000) -> dict:
    return netplan_file({"enp1s0f1np1": [f"192.168.1.{host_number}/24"],
                         "enP2p1s0f1np1": [f"192.168.2.{host_number}/24"]}, mtu)


def member_facts(files: dict, kept: dict | None = None) -> dict:
    return {**inputs()["facts"], "netplan_files": files, "backup_netplan_files": kept or {}}


def cluster_inputs(files: dict[str, dict], host: str = "spark-b", kept: dict[str, dict] | None = None,
                   **changes) -> dict:
    """The inputs of `host` with every member's netplan files (by host) read in this run, as the role's
    __link_existing gives them to each other."""
    kept = kept or {}

    def read_on(member: str) -> dict:
        return link_plan.existing(inputs(host=member, facts=member_facts(files.get(member, {}), kept.get(member))))

    existing = {member: read_on(member) for member in files.keys() | kept.keys()}
    return inputs(host=host, facts=member_facts(files.get(host, {}), kept.get(host)), existing=existing,
                  defaults={"subnets": ["192.168.100.0/24", "192.168.101.0/24"], "first_host_number": 10}, **changes)


def right_files() -> dict[str, dict]:
    return {"spark-a": {SYNC: sync_file(1)}, "spark-b": {SYNC: sync_file(2)}}


def test_existing_reads_the_file_that_configures_only_the_link():
    data = inputs(facts=member_facts({SYNC: sync_file(2), "/etc/netplan/01-network-manager-all.yaml":
                                      netplan_file({"enP7s7": []})}))
    assert link_plan.existing(data) == {
        "files": [SYNC], "addresses": {"enp1s0f1np1": "192.168.1.2/24", "enP2p1s0f1np1": "192.168.2.2/24"},
        "problems": [], "kept_aside": False}
    # Nothing but the role's own file: nothing to keep.
    assert link_plan.existing(inputs(facts=member_facts(
        {"/etc/netplan/40-sparkfleet-link.yaml": sync_file(2)}))) == {}
    # Once the role has replaced it, the copy it keeps aside gives the addresses (later runs keep them).
    kept = link_plan.existing(inputs(facts=member_facts({}, {KEPT: sync_file(2)})))
    assert (kept["files"], kept["kept_aside"], kept["problems"]) == ([KEPT], True, [])


@pytest.mark.parametrize(("file", "expected"), [
    # NVIDIA's connect-two-sparks file sets no MTU: the port stays at 1500.
    (sync_file(2, mtu=None), "gives enp1s0f1np1 no MTU (the kernel's default, 1500); expected link_mtu 9000"),
    (sync_file(2, mtu=1500), "gives enp1s0f1np1 MTU 1500; expected link_mtu 9000"),
    (netplan_file({"enp1s0f1np1": ["192.168.1.2/24", "192.168.7.2/24"], "enP2p1s0f1np1": ["192.168.2.2/24"]}),
     "gives enp1s0f1np1 2 static IPv4 addresses (192.168.1.2/24, 192.168.7.2/24); expected one"),
    # NVIDIA's "automatic" option: link-local addresses only.
    (netplan_file({"enp1s0f1np1": [], "enP2p1s0f1np1": ["192.168.2.2/24"]}),
     "gives enp1s0f1np1 0 static IPv4 addresses (link-local or DHCP only); expected one"),
    (netplan_file({"enp1s0f1np1": ["192.168.1.2/24"], "enP2p1s0f1np1": ["192.168.1.3/24"]}),
     "enp1s0f1np1 and enP2p1s0f1np1 are both in 192.168.1.0/24; expected one subnet per port"),
    (netplan_file({"enp1s0f1np1": ["192.168.1.2/32"], "enP2p1s0f1np1": ["192.168.2.2/24"]}),
     "a /32: no other member can be in its subnet"),
    (netplan_file({"enp1s0f1np1": ["192.168.1.0/24"], "enP2p1s0f1np1": ["192.168.2.2/24"]}),
     "the subnet's own network or broadcast address"),
    (netplan_file({"enp1s0f1np1": ["one"], "enP2p1s0f1np1": ["192.168.2.2/24"]}), "'one', not an address"),
    (netplan_file({"enp1s0f1np1": ["192.168.1.2/24"]}), "gives enP2p1s0f1np1 nothing"),
])
def test_existing_says_why_its_addresses_cannot_be_kept(file: dict, expected: str):
    found = link_plan.existing(inputs(facts=member_facts({NVIDIA: file})))
    assert any(expected in problem for problem in found["problems"]), found


def test_two_nvidia_files_for_one_port_cannot_be_kept():
    found = link_plan.existing(inputs(facts=member_facts({NVIDIA: sync_file(2), SYNC: sync_file(2)})))
    assert f"enp1s0f1np1 is configured by 2 files ({NVIDIA}, {SYNC})" in " | ".join(found["problems"])


def test_right_addresses_are_kept_on_every_member():
    plan = link_plan.plan(cluster_inputs(right_files()))
    assert plan["errors"] == []
    assert plan["adoption"]["adopted"] is True
    assert plan["addresses"] == {"enp1s0f1np1": "192.168.1.2/24", "enP2p1s0f1np1": "192.168.2.2/24"}
    # The role's file gives the same, so nothing changes on the wire; NVIDIA's is still taken over.
    assert plan["netplan"]["network"]["ethernets"]["enp1s0f1np1"]["addresses"] == ["192.168.1.2/24"]
    assert plan["netplan"]["network"]["ethernets"]["enp1s0f1np1"]["mtu"] == 9000
    assert plan["replaced"] == [SYNC]
    # The firewall lets the other member in by the address its own file gives it.
    assert plan["peers"] == {"enp1s0f1np1": {"spark-a": "192.168.1.1"}, "enP2p1s0f1np1": {"spark-a": "192.168.2.1"}}
    message = plan["adoption"]["message"]
    assert message.startswith(f"kept the addresses {SYNC} gives the link: enp1s0f1np1 192.168.1.2/24, "
                              "enP2p1s0f1np1 192.168.2.2/24, MTU 9000 - right for cluster pair1")
    assert "nothing changes on the wire" in message
    head = link_plan.plan(cluster_inputs(right_files(), host="spark-a"))
    assert head["addresses"] == {"enp1s0f1np1": "192.168.1.1/24", "enP2p1s0f1np1": "192.168.2.1/24"}


def test_kept_addresses_hold_on_the_next_run_from_the_copies_kept_aside():
    kept = {"spark-a": {KEPT: sync_file(1)}, "spark-b": {KEPT: sync_file(2)}}
    plan = link_plan.plan(cluster_inputs({}, kept=kept))
    assert plan["addresses"] == {"enp1s0f1np1": "192.168.1.2/24", "enP2p1s0f1np1": "192.168.2.2/24"}
    assert plan["replaced"] == []
    assert "(kept aside by an earlier run)" in plan["adoption"]["message"]


def test_nvidias_addresses_equal_to_the_roles_are_kept_too():
    # The connect-two-sparks playbook's node 2, with the MTU the link needs.
    node = {"enp1s0f1np1": ["192.168.100.{}/24"], "enP2p1s0f1np1": ["192.168.101.{}/24"]}
    files = {member: {NVIDIA: netplan_file({n: [a[0].format(number)] for n, a in node.items()})}
             for member, number in (("spark-a", 10), ("spark-b", 11))}
    plan = link_plan.plan(cluster_inputs(files))
    assert plan["adoption"]["adopted"] is True and plan["addresses"] == ROLES


def not_kept(files: dict[str, dict], **changes) -> str:
    """The role's own addresses are given; the message says why the files' were not kept."""
    plan = link_plan.plan(cluster_inputs(files, **changes))
    assert plan["errors"] == [], plan["errors"]
    assert plan["adoption"]["adopted"] is False
    assert plan["addresses"] == ROLES and plan["peers"]["enp1s0f1np1"] == {"spark-a": "192.168.100.10"}
    message = plan["adoption"]["message"]
    assert message.startswith("did not keep the addresses of ")
    assert message.endswith("the role gives its own: enp1s0f1np1 192.168.100.11/24, enP2p1s0f1np1 "
                            "192.168.101.11/24, MTU 9000 (link_subnets and the members' host numbers)")
    return message


def test_mtu_1500_on_one_member_keeps_the_roles_addresses_and_mtu():
    files = {**right_files(), "spark-a": {SYNC: sync_file(1, mtu=1500)}}
    assert f"spark-a: {SYNC} gives enp1s0f1np1 MTU 1500; expected link_mtu 9000" in not_kept(files)
    assert link_plan.plan(cluster_inputs(files))["netplan"]["network"]["ethernets"]["enp1s0f1np1"]["mtu"] == 9000


def test_two_members_with_one_address_keep_the_roles():
    files = {"spark-a": {SYNC: sync_file(2)}, "spark-b": {SYNC: sync_file(2)}}
    message = not_kept(files)
    assert "spark-a and spark-b both have 192.168.1.2 in 192.168.1.0/24; expected one address per member" in message


def test_members_in_different_subnets_keep_the_roles():
    other = netplan_file({"enp1s0f1np1": ["192.168.7.1/24"], "enP2p1s0f1np1": ["192.168.2.1/24"]})
    message = not_kept({**right_files(), "spark-a": {SYNC: other}})
    assert ("the members' link subnets differ (spark-a 192.168.2.0/24, 192.168.7.0/24; spark-b 192.168.1.0/24, "
            "192.168.2.0/24)") in message


def test_a_member_without_such_a_file_keeps_the_roles():
    message = not_kept({"spark-b": {SYNC: sync_file(2)}, "spark-a": {}})
    assert "spark-a: no netplan file but the role's gives its link ports their addresses" in message
    # The member without a file says so too (it read spark-b's).
    head = link_plan.plan(cluster_inputs({"spark-b": {SYNC: sync_file(2)}, "spark-a": {}}, host="spark-a"))
    assert head["adoption"]["message"].startswith("did not keep the addresses of the netplan files of spark-b: ")


@pytest.mark.parametrize(("changes", "expected"), [
    ({"host_numbers": {"spark-a": 10, "spark-b": 11}}, "link_host_number of spark-a, link_host_number of spark-b"),
    ({"first_host_number": 20}, "link_first_host_number"),
])
def test_addresses_set_by_hand_win(changes: dict, expected: str):
    message = link_plan.plan(cluster_inputs(right_files(), **changes))["adoption"]["message"]
    assert f"addresses are set by hand ({expected}), and they win" in message
    subnets = link_plan.plan(cluster_inputs(right_files(), subnets=["10.0.1.0/24", "10.0.2.0/24"]))
    assert subnets["addresses"] == {"enp1s0f1np1": "10.0.1.11/24", "enP2p1s0f1np1": "10.0.2.11/24"}
    assert "(link_subnets)" in subnets["adoption"]["message"]


def test_a_member_outside_the_run_with_other_addresses_is_refused_before_any_change():
    data = cluster_inputs(right_files())
    data["existing"] = {"spark-b": data["existing"]["spark-b"]}  # spark-a is not in the run (--limit)
    message = refusal(**{key: value for key, value in data.items() if key != "host"})
    assert message.startswith(f"{SYNC} on spark-b gives the link enp1s0f1np1 192.168.1.2/24, enP2p1s0f1np1 "
                              "192.168.2.2/24, not the role's enp1s0f1np1 192.168.100.11/24")
    assert "spark-a is not in this run" in message and "run without --limit" in message


def test_a_member_outside_the_run_and_the_same_addresses_as_the_roles_is_no_refusal():
    node = netplan_file({"enp1s0f1np1": ["192.168.100.11/24"], "enP2p1s0f1np1": ["192.168.101.11/24"]})
    data = cluster_inputs({"spark-b": {NVIDIA: node}})
    data["existing"] = {"spark-b": data["existing"]["spark-b"]}
    plan = link_plan.plan(data)
    assert plan["errors"] == [] and plan["addresses"] == ROLES
    assert "spark-a not in this run to compare with, and the role's are the same on spark-b" in \
        plan["adoption"]["message"]


def test_no_file_anywhere_says_nothing():
    plan = link_plan.plan(cluster_inputs({"spark-a": {}, "spark-b": {}}))
    assert plan["adoption"] == {"adopted": False, "message": ""}
    assert link_plan.plan(inputs())["adoption"] == {"adopted": False, "message": ""}


def test_finding_lines_name_the_files_of_the_port():
    finding = {"severity": "error", "check": "mtu", "interface": "enp1s0f0np0", "found": "MTU 1500",
               "expected": "9000", "fix": "set it", "configured_by": [NVIDIA]}
    assert link_plan.finding_line(finding) == \
        f"ERROR mtu enp1s0f0np0: MTU 1500; expected 9000; fix: set it [enp1s0f0np0: configured by {NVIDIA}]"
    assert link_plan.finding_line({**finding, "configured_by": []}).endswith(
        "[enp1s0f0np0: configured by no netplan file]")


def test_cluster_findings_name_the_files_of_the_port():
    mine = reports(mtu_b=1500)
    mine["spark-a"]["interfaces"][0]["configured_by"] = [NVIDIA]
    [found] = link_plan.cluster_findings(mine, "spark-a", 9000)
    assert found["configured_by"] == [NVIDIA]
    assert link_plan.finding_line(found).endswith(f"[enp1s0f1np1: configured by {NVIDIA}]")


def test_link_existing_filter_at_its_boundary():
    assert link_filters.link_existing(inputs(facts=member_facts({SYNC: sync_file(2)})))["files"] == [SYNC]
    with pytest.raises(AnsibleFilterError, match="link_existing"):
        link_filters.link_existing({"host": "x"})


# --- clusters of more than two, through a switch (NVIDIA Sync clusters 2 to 4 Sparks) -------------------

QUAD_MEMBERS = ["spark-a", "spark-b", "spark-c", "spark-d"]
QUAD = {"spark": QUAD_MEMBERS, "clusters": QUAD_MEMBERS, "quad": QUAD_MEMBERS}


@pytest.mark.parametrize("host", QUAD_MEMBERS)
def test_four_members_on_one_switch_get_one_subnet_an_address_each_and_three_peers(host: str):
    """One switch port per box: one link interface, one subnet, the host number by rank; every other member is a
    peer (what the doctor pings and the firewall lets in)."""
    plan = link_plan.plan(inputs(host=host, cluster=cluster_of_host(QUAD, host), interfaces=["enp1s0f1np1"],
                                 subnets=["192.168.100.0/24"], host_numbers=dict.fromkeys(QUAD_MEMBERS, 0)))
    assert plan["errors"] == []
    rank = QUAD_MEMBERS.index(host)
    assert plan["addresses"] == {"enp1s0f1np1": f"192.168.100.{10 + rank}/24"}
    others = {m: f"192.168.100.{10 + i}" for i, m in enumerate(QUAD_MEMBERS) if m != host}
    assert plan["peers"] == {"enp1s0f1np1": others}


def test_two_of_four_members_with_one_host_number_are_refused():
    numbers = {"spark-a": 0, "spark-b": 0, "spark-c": 0, "spark-d": 11}
    found = refusal(host="spark-d", cluster=cluster_of_host(QUAD, "spark-d"), host_numbers=numbers)
    assert "spark-b" in found and "spark-d" in found and "11" in found


def quad_reports(mtu_c: int = 9000) -> dict:
    return {m: {"interfaces": [{"name": "enp1s0f1np1", "mtu": mtu_c if m == "spark-c" else 9000,
                                "ipv4": [f"192.168.100.{10 + i}/24"]}]} for i, m in enumerate(QUAD_MEMBERS)}


def test_each_of_four_members_pings_the_three_others():
    for host in QUAD_MEMBERS:
        assert link_plan.peers(quad_reports(), host) == [
            {"interface": "enp1s0f1np1", "host": m, "address": f"192.168.100.{10 + i}"}
            for i, m in enumerate(QUAD_MEMBERS) if m != host]


def test_one_end_of_four_at_another_mtu_is_named_among_all_ends():
    assert link_plan.cluster_findings(quad_reports(), "spark-a", 9000) == []
    [found] = link_plan.cluster_findings(quad_reports(mtu_c=1500), "spark-a", 9000)
    assert found["check"] == "mtu"
    assert ("spark-a enp1s0f1np1 9000, spark-b enp1s0f1np1 9000, spark-c enp1s0f1np1 1500, spark-d enp1s0f1np1 "
            "9000") in found["found"]
