# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The firewall role's plan (plugins/plugin_utils/firewall_plan.py): refusals, rules, and the steps
left to apply (what roles/firewall/tasks/apply.yml loops over; empty: nothing to do).

The Molecule scenario proves the rules with traffic through `docker exec`, which carries
no SSH connection; the SSH-connection paths are checked here.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from ansible_collections.sparkfleet.serving.plugins.plugin_utils.firewall_plan import (
    BLOCK_NAME,
    DOCKER_ORDER_UNIT,
    input_errors,
    plan,
)
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.firewall_state import DOCKER_ORDER_PATH, FILES

SSHD = "port 22\nport 2222\nlistenaddress 0.0.0.0:22"
ACTIVE = ("Status: active\nLogging: on (low)\nDefault: deny (incoming), allow (outgoing), disabled (routed)\n"
          "New profiles: skip")
RULES_FILE = "*filter\n:ufw-after-input - [0:0]\nCOMMIT\n"


def section(output: str, rc: int = 0) -> dict[str, Any]:
    return {"rc": rc, "output": output, "lines": output.splitlines()}


def probe(*, sshd: str = SSHD, sshd_rc: int = 0, connection: str = "", files: dict[str, str] | None = None,
          status: str | None = None, added: str = "", status_rc: int = 0) -> dict[str, Any]:
    """The probe's sections as sparkfleet.serving.probe_sections returns them; status None: no ufw."""
    sections = {"ssh_connection": section(connection), "sshd": section(sshd, sshd_rc)}
    for path in FILES:
        text = (files or {}).get(path)
        sections[f"file {path}"] = section("", 1) if text is None else section(base64.b64encode(text.encode()).decode())
    if status is None:
        sections["ufw"] = section("sh: ufw: not found", 127)
    else:
        sections["ufw"] = section(status, status_rc)
        sections["added"] = section(added)
    return sections


def make(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"self": "spark-01", "probe": probe(), "api_port": 8000, "api_sources": [],
                            "docker_user": True, "has_ipv6": True}
    data.update(overrides)
    return plan(data)


def comments(result: dict[str, Any]) -> list[str]:
    return [rule["comment"] for rule in result["rules"]]


def tasks(result: dict[str, Any]) -> list[str]:
    return [step["task"] for step in result["apply"]]


def test_ssh_ports_come_from_sshd_and_the_connection():
    result = make(probe=probe(connection="192.0.2.5 50000 192.0.2.11 22"))
    assert result["ssh_ports"] == [22, 2222]
    assert comments(result)[:2] == result["ssh_comments"] == [
        "sparkfleet.serving.firewall: ssh allow 22/tcp from any",
        "sparkfleet.serving.firewall: ssh allow 2222/tcp from any",
    ]


def test_the_connection_port_alone_is_enough_without_sshd():
    result = make(probe=probe(sshd="sshd: not found", sshd_rc=127, connection="192.0.2.5 50000 192.0.2.11 2022"))
    assert result["ssh_ports"] == [2022]


def test_no_ssh_port_at_all_is_refused_with_sshds_own_message():
    (error,) = make(probe=probe(sshd="sshd: no hostkeys available -- exiting.", sshd_rc=1),
                    sshd_binary="/usr/sbin/sshd")["errors"]
    assert "ufw is NOT enabled" in error
    assert "exit 1: sshd: no hostkeys available -- exiting." in error
    assert "firewall_ssh_port" in error


def test_a_configured_port_that_is_not_this_connections_is_refused():
    (error,) = make(ssh_port=22, probe=probe(connection="192.0.2.5 50000 192.0.2.11 2022"))["errors"]
    assert "arrives on port 2022" in error


def test_ssh_sources_must_hold_the_controller_seen_in_the_connection():
    connected = probe(connection="192.0.2.5 50000 192.0.2.11 22")
    result = make(ssh_sources=["198.51.100.0/24"], probe=connected)
    assert "does not include the controller's own address 192.0.2.5" in result["errors"][0]
    ok = make(ssh_sources=["192.0.2.0/24"], probe=connected, ssh_limit=True)
    assert "sparkfleet.serving.firewall: ssh limit 22/tcp from 192.0.2.0/24" in comments(ok)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"api_sources": ["10.0.0.0/33"]}, "is not a network in CIDR notation"),
        ({"api_sources": ["10.0.0.5/24"]}, "did you mean 10.0.0.0/24?"),
        ({"api_port": 0}, "is not a port number"),
        ({"extra_rules": [{"port": 65536}]}, "is not a port number"),
        ({"extra_rules": [{"port": "9000:8000"}]}, "from a lower to a higher port"),
        ({"extra_rules": [{"port": 80, "proto": "icmp"}]}, "proto 'icmp'"),
        ({"fleet_ports": [{"port": "x"}]}, "is not a port number"),
        ({"probe": probe(status="ERROR: problem running iptables", status_rc=1)}, "`ufw status verbose` failed"),
    ],
)
def test_bad_input_is_refused(overrides: dict[str, Any], expected: str):
    result = make(**overrides)
    assert "rules" not in result
    assert "apply" not in result
    assert any(expected in error for error in result["errors"]), result["errors"]


def test_a_probe_cut_short_is_refused():
    sections = probe()
    del sections["ufw"]
    with pytest.raises(ValueError, match=r"lacks the sections \['ufw'\]"):
        make(probe=sections)


PEER = {"interfaces": [{"device": "eth0", "addresses": ["192.0.2.12", "2001:db8::12"]}]}


def test_fleet_addresses_come_from_facts_without_bridges_loopback_or_self():
    fleet = {
        "spark-01": {"interfaces": [{"device": "eth0", "addresses": ["192.0.2.11"]}]},
        "spark-02": {"interfaces": [
            *PEER["interfaces"],
            {"device": "docker0", "addresses": ["172.17.0.1"]},
            {"device": "lo", "addresses": ["127.0.0.1"]},
        ]},
        "spark-03": {"ansible_host": "192.0.2.13", "interfaces": []},
    }
    result = make(fleet=fleet, fleet_ports=[{"port": "29500", "proto": "tcp"}])
    assert result["fleet"] == ["192.0.2.12/32", "192.0.2.13/32", "2001:db8::12/128"]
    assert "sparkfleet.serving.firewall: fleet allow 29500/tcp from 192.0.2.12/32" in comments(result)
    assert "-A DOCKER-USER -s 2001:db8::12/128 -m conntrack --ctstate DNAT -j RETURN" in result["docker_user_v6"]


def test_a_fleet_host_whose_addresses_are_unknown_is_refused_not_dropped():
    # A --limit run could not read spark-03's facts: leaving it out would delete its rules here.
    fleet = {"spark-02": PEER, "spark-03": {"ansible_host": "192.0.2.13", "interfaces": None,
                                            "reason": "Failed to connect to the host via ssh: No route to host"}}
    (error,) = make(fleet=fleet)["errors"]
    assert "spark-03's addresses are unknown" in error
    assert "No route to host" in error
    assert "`ansible spark-03 -m ping`" in error


def test_a_fleet_host_the_inventory_does_not_know_is_refused():
    (error,) = make(fleet={"spark-02": PEER, "spark-9": {"known": False}})["errors"]
    assert "firewall_fleet_hosts names 'spark-9', which is not a host of the inventory" in error


def test_docker_user_drops_dnat_from_anyone_else():
    lines = make(api_sources=["10.1.0.0/16"])["docker_user_v4"]
    assert lines.index("-A DOCKER-USER -s 10.1.0.0/16 -m conntrack --ctstate DNAT -j RETURN") < lines.index(
        "-A DOCKER-USER -m conntrack --ctstate DNAT -j DROP")
    assert lines[-1] == "-A DOCKER-USER -j RETURN"


# The steps left to apply.

INPUT = {"api_sources": ["10.1.0.0/16"], "fleet": {"spark-02": PEER}}


def added_line(rule: dict[str, str]) -> str:
    """A rule as `ufw show added` prints it."""
    source = "" if rule["from"] == "any" else f"from {rule['from']} to any port {rule['port']} "
    target = f"{rule['port']}/{rule['proto']} " if rule["from"] == "any" else f"proto {rule['proto']} "
    return f"ufw {rule['rule']} {source}{target}comment '{rule['comment']}'".replace("  ", " ")


def block(lines: list[str]) -> str:
    return f"*filter\n# BEGIN {BLOCK_NAME}\n" + "\n".join(lines) + f"\n# END {BLOCK_NAME}\nCOMMIT\n"


def converged(**changes: Any) -> dict[str, Any]:
    """The probe of a box as the role leaves it with INPUT, with `changes` to its parts (`files`: to some files)."""
    wanted = make(**INPUT)
    parts = {
        "status": ACTIVE,
        "added": "Added user rules (see 'ufw status' for running firewall):\n"
                 + "\n".join(added_line(rule) for rule in wanted["rules"]),
        "files": {"/etc/ufw/after.rules": block(wanted["docker_user_v4"]),
                  "/etc/ufw/after6.rules": block(wanted["docker_user_v6"]),
                  "/etc/default/ufw": "IPV6=no\nDEFAULT_INPUT_POLICY=\"DROP\"\nIPV6=yes\n",
                  DOCKER_ORDER_PATH: DOCKER_ORDER_UNIT},
    }
    parts.update({**changes, "files": {**parts["files"], **changes.get("files", {})}})
    return probe(**parts)


def test_nothing_left_to_apply_on_a_box_as_the_role_leaves_it():
    result = make(**INPUT, probe=converged())
    assert result["apply"] == []
    assert result["ufw_installed"] is True


def test_a_box_without_ufw_gets_every_step_in_apply_order():
    result = make(**INPUT)
    assert result["ufw_installed"] is False
    rules = len(result["rules"])
    assert tasks(result) == ["ipv6", *["ssh_rule"] * 2, *["rule"] * (rules - 2), "default", "default",
                             "block", "block", "docker_order", "enable"]
    assert result["apply"][0] == {"task": "ipv6", "regexp": "^IPV6=", "line": "IPV6=yes"}
    assert [step["state"] for step in result["apply"] if step["task"] == "block"] == ["present", "present"]


def test_only_the_missing_rule_is_applied():
    missing = comments(make(**INPUT))[-1]
    state = converged()
    added = "\n".join(line for line in state["added"]["lines"] if missing not in line)
    result = make(**INPUT, probe=converged(added=added))
    assert result["apply"] == [{"task": "rule", **make(**INPUT)["rules"][-1]}]


def test_a_new_ipv6_line_applies_every_rule_again():
    wanted = make(**INPUT)
    files = {"/etc/ufw/after.rules": block(wanted["docker_user_v4"]),
             "/etc/ufw/after6.rules": block(wanted["docker_user_v6"]), "/etc/default/ufw": "IPV6=yes\nIPV6=no\n"}
    result = make(**INPUT, probe=converged(files=files))
    assert tasks(result) == ["ipv6", "ssh_rule", "ssh_rule", *["rule"] * (len(wanted["rules"]) - 2)]


def test_without_ipv6_neither_the_line_nor_an_ipv6_block_is_wanted():
    wanted = make(**INPUT)
    files = {"/etc/ufw/after.rules": block(wanted["docker_user_v4"]), "/etc/ufw/after6.rules": RULES_FILE,
             "/etc/default/ufw": "IPV6=no\n"}
    assert make(**INPUT, has_ipv6=False, probe=converged(files=files))["apply"] == []
    files["/etc/ufw/after6.rules"] = block(wanted["docker_user_v6"])
    (step,) = make(**INPUT, has_ipv6=False, probe=converged(files=files))["apply"]
    assert (step["task"], step["path"], step["state"]) == ("block", "/etc/ufw/after6.rules", "absent")


def test_a_stale_rule_of_the_role_is_deleted_and_a_foreign_one_kept():
    state = converged()
    stale = "ufw allow 7777/tcp comment 'sparkfleet.serving.firewall: extra allow 7777/tcp from any'"
    foreign = "ufw allow 7778/tcp comment 'made by hand'"
    added = "\n".join([*state["added"]["lines"], stale, foreign])
    result = make(**INPUT, probe=converged(added=added))
    assert result["apply"] == [{"task": "delete", "rule": stale.removeprefix("ufw ")}]


def test_a_changed_block_is_written_again_and_an_unwanted_one_removed():
    wanted = make(**INPUT)
    files = {"/etc/ufw/after.rules": block(wanted["docker_user_v4"][:-1]),
             "/etc/ufw/after6.rules": block(wanted["docker_user_v6"]), "/etc/default/ufw": "IPV6=yes\n"}
    (step,) = make(**INPUT, probe=converged(files=files))["apply"]
    assert step == {"task": "block", "path": "/etc/ufw/after.rules", "marker": f"# {{mark}} {BLOCK_NAME}",
                    "block": "\n".join(wanted["docker_user_v4"]), "state": "present"}
    unwanted = make(**INPUT, docker_user=False, probe=converged())
    assert [(s["path"], s["state"]) for s in unwanted["apply"]] == [
        ("/etc/ufw/after.rules", "absent"), ("/etc/ufw/after6.rules", "absent")]


def test_an_inactive_ufw_with_other_policies_gets_the_policies_and_enable_only():
    status = "Status: inactive"
    result = make(**INPUT, probe=converged(status=status))
    assert tasks(result) == ["default", "default", "enable"]
    allowing = ACTIVE.replace("deny (incoming)", "allow (incoming)")
    assert make(**INPUT, probe=converged(status=allowing))["apply"] == [
        {"task": "default", "direction": "incoming", "policy": "deny"}]


# --- the check play's input check (the role's tasks/check.yml): the variables alone ---------

FIREWALL_SETTINGS = {"ssh_port": 0, "ssh_sources": [], "ssh_limit": False, "controller_address": "",
                     "api_port": 8000, "api_sources": [], "fleet_ports": [], "monitoring_ports": [9100],
                     "extra_rules": []}


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        ({"api_sources": ["10.251.71.0/24", "10.0.0.0/33"]}, "firewall_api_sources: '10.0.0.0/33' is not a network"),
        ({"api_sources": ["10.0.0.1/24"]}, "did you mean 10.0.0.0/24?"),
        ({"api_port": 0}, "firewall_api_port: 0 is not a port number"),
        ({"ssh_port": "22a"}, "firewall_ssh_port: '22a' is not a port number"),
        ({"fleet_ports": [{"port": 9000, "proto": "sctp"}]}, "proto 'sctp' is not one of tcp, udp, any"),
        ({"extra_rules": [{"port": "80:70"}]}, "range '80:70' must go from a lower to a higher port"),
        ({"extra_rules": [{"port": 80, "from": "lan"}]}, "firewall_extra_rules[0].from: 'lan' is not a network"),
        ({"ssh_sources": ["10.0.0.0/8"], "controller_address": "192.168.1.5"}, "does not include the controller's"),
        ({"monitoring_ports": [9100, 70000]}, "firewall_monitoring_ports: '70000' is not a port number"),
    ],
)
def test_firewall_input_errors_refuse_what_the_plan_refuses(change: dict, expect: str) -> None:
    settings = {**FIREWALL_SETTINGS, **change}
    errors = input_errors(settings)
    assert any(expect in error for error in errors), errors
    with_box = {**settings, "self": "spark-01", "probe": probe(connection="10.0.0.9 50000 10.0.0.2 22")}
    assert plan(with_box)["errors"] == errors


def test_firewall_input_errors_leave_the_box_to_the_plan() -> None:
    """Without the box the SSH port is unknown: that is the plan's to refuse, not the input check's."""
    assert input_errors(FIREWALL_SETTINGS) == []
    no_port = probe(sshd="sshd: not found", sshd_rc=127)
    refused = plan({**FIREWALL_SETTINGS, "self": "spark-01", "probe": no_port})["errors"]
    assert "Cannot establish the SSH rule" in refused[0]


# A cluster member: the other members in on its link interfaces.

PEERS = {"enp1s0f1np1": {"spark-b": "192.168.100.11"}, "enP2p1s0f1np1": {"spark-b": "192.168.101.11"}}


def test_a_cluster_member_lets_the_other_members_in_on_each_link_interface_only():
    result = make(**INPUT, cluster_peers=PEERS)
    cluster = [rule for rule in result["rules"] if ": cluster " in rule["comment"]]
    assert cluster == [
        {"rule": "allow", "port": "", "proto": "any", "from": "192.168.101.11/32", "interface": "enP2p1s0f1np1",
         "direction": "in", "comment": "sparkfleet.serving.firewall: cluster allow any from 192.168.101.11/32 on "
                                       "enP2p1s0f1np1"},
        {"rule": "allow", "port": "", "proto": "any", "from": "192.168.100.11/32", "interface": "enp1s0f1np1",
         "direction": "in", "comment": "sparkfleet.serving.firewall: cluster allow any from 192.168.100.11/32 on "
                                       "enp1s0f1np1"},
    ]
    # Applied with the other rules; a box in no cluster gets none.
    assert [step for step in result["apply"] if step.get("interface")] == [{"task": "rule", **r} for r in cluster]
    assert not [r for r in make(**INPUT)["rules"] if ": cluster " in r["comment"]]


def test_a_member_of_four_lets_the_three_others_in_and_no_one_else():
    """Four Sparks through one switch: spark-a's peers on its one link are the three others, each let in by its
    own link address (the link role's peers never hold the member itself)."""
    peers = {"enp1s0f1np1": {f"spark-{c}": f"192.168.100.{n}" for c, n in (("b", 11), ("c", 12), ("d", 13))}}
    result = make(**INPUT, cluster_peers=peers)
    cluster = [rule for rule in result["rules"] if ": cluster " in rule["comment"]]
    assert [(r["from"], r["interface"], r["port"], r["proto"]) for r in cluster] == [
        (f"192.168.100.{n}/32", "enp1s0f1np1", "", "any") for n in (11, 12, 13)]


def test_a_member_that_left_the_cluster_loses_its_rule():
    state = converged(added=converged()["added"]["output"]
                      + "\nufw allow in on enp1s0f1np1 from 192.168.100.12 comment "
                        "'sparkfleet.serving.firewall: cluster allow any from 192.168.100.12/32 on enp1s0f1np1'")
    result = make(**INPUT, cluster_peers={"enp1s0f1np1": {}}, probe=state)
    assert [step["task"] for step in result["apply"]] == ["delete"]


@pytest.mark.parametrize("peers", [{"enp1s0f1np1": {"spark-b": "192.168.100.300"}}, {"bad name!": {}}, ["x"]])
def test_bad_cluster_peers_are_refused(peers):
    assert make(**INPUT, cluster_peers=peers)["errors"]


def test_a_cluster_worker_opens_no_api_port_to_the_api_sources_nor_to_the_fleet():
    head = make(**INPUT, cluster_peers=PEERS)
    worker = make(**INPUT, cluster_peers=PEERS, serves_api=False)
    assert any(": api allow 8000/tcp" in c for c in comments(head))
    assert any(": fleet allow 8000/tcp" in c for c in comments(head))
    assert [c for c in comments(worker) if "8000/tcp" in c] == []
    # The rest stays: SSH, the fleet's other services, the cluster's own rule.
    assert [c for c in comments(head) if "8000/tcp" not in c] == comments(worker)


@pytest.mark.parametrize("found", [None, "[Unit]\nAfter=network-online.target\n"])
def test_docker_is_ordered_after_ufw_at_boot_by_a_drop_in(found: str | None):
    """Without the drop-in docker.service and ufw.service start side by side at boot where no network manager pulls
    in network.target: the plan writes it when it is missing or not the role's."""
    files = {DOCKER_ORDER_PATH: found} if found is not None else {}
    state = converged(files=files)
    if found is None:
        state[f"file {DOCKER_ORDER_PATH}"] = section("", 1)
    (step,) = make(**INPUT, probe=state)["apply"]
    assert step == {"task": "docker_order", "path": DOCKER_ORDER_PATH, "content": DOCKER_ORDER_UNIT}
    assert "[Unit]\nAfter=ufw.service\n" in step["content"]


# Prometheus (the monitoring hosts) and the gateway's router: from their addresses only.

MONITOR = {"interfaces": [{"device": "eth0", "addresses": ["192.0.2.50"]}]}
GATEWAY = {"interfaces": [{"device": "eth0", "addresses": ["192.0.2.60"]}]}
AROUND = {"fleet": {"spark-02": PEER, "mon-1": MONITOR, "gw-1": GATEWAY}, "fleet_hosts": ["spark-01", "spark-02"],
          "monitoring_hosts": ["mon-1"], "gateway_hosts": ["gw-1"], "monitoring_ports": [9100]}


def test_monitoring_hosts_reach_the_api_and_node_exporter_the_gateway_the_api_only():
    result = make(**AROUND)
    assert (result["monitoring"], result["gateway"]) == (["192.0.2.50/32"], ["192.0.2.60/32"])
    marked = "sparkfleet.serving.firewall: "
    assert [c.removeprefix(marked) for c in comments(result) if "192.0.2.50" in c or "192.0.2.60" in c] == [
        "monitoring allow 8000/tcp from 192.0.2.50/32",
        "monitoring allow 9100/tcp from 192.0.2.50/32",
        "gateway allow 8000/tcp from 192.0.2.60/32",
    ]
    # Nobody else reaches node_exporter: not the fleet, not the API's sources, not anyone.
    assert [c for c in comments(make(**AROUND, api_sources=["10.1.0.0/16"])) if "9100" in c] == [
        f"{marked}monitoring allow 9100/tcp from 192.0.2.50/32"]
    assert "-A DOCKER-USER -s 192.0.2.60/32 -m conntrack --ctstate DNAT -j RETURN" in result["docker_user_v4"]
    # Without monitoring or gateway hosts (the inputs' defaults when the groups are empty): neither rule.
    alone = make(**{**AROUND, "monitoring_hosts": [], "gateway_hosts": []})
    assert [c for c in comments(alone) if ": monitoring " in c or ": gateway " in c] == []
    assert [c for c in comments(make(fleet={"spark-02": PEER})) if "9100" in c] == []


def test_a_cluster_worker_lets_prometheus_reach_node_exporter_but_no_one_the_api():
    worker = make(**AROUND, serves_api=False)
    assert [c for c in comments(worker) if "192.0.2.50" in c or "192.0.2.60" in c] == [
        "sparkfleet.serving.firewall: monitoring allow 9100/tcp from 192.0.2.50/32"]
    assert not any("192.0.2.60" in line for line in worker["docker_user_v4"])


def test_a_monitoring_host_in_the_fleet_gets_no_second_api_rule():
    # ufw skips a rule that differs from one in place only by its comment: the role would add it on every run.
    result = make(**{**AROUND, "monitoring_hosts": ["spark-02"]})
    to_peer = [c for c in comments(result) if "192.0.2.12/32" in c and ("8000/tcp" in c or "9100/tcp" in c)]
    assert to_peer == ["sparkfleet.serving.firewall: fleet allow 8000/tcp from 192.0.2.12/32",
                       "sparkfleet.serving.firewall: monitoring allow 9100/tcp from 192.0.2.12/32"]
    assert result["docker_user_v4"].count("-A DOCKER-USER -s 192.0.2.12/32 -m conntrack --ctstate DNAT -j RETURN") == 1


@pytest.mark.parametrize(("kind", "host", "other"),
                         [("monitoring", "mon-1", "gateway"), ("gateway", "gw-1", "monitoring")])
def test_a_monitoring_or_gateway_host_unknown_or_unreachable_is_refused(kind: str, host: str, other: str):
    unreachable = {**AROUND["fleet"], host: {"interfaces": None, "reason": "unreachable"}}
    (error,) = make(**{**AROUND, "fleet": unreachable, f"{other}_hosts": []})["errors"]
    assert error.startswith(f"The {kind} host {host}'s addresses are unknown: this run has no facts for it")
    assert error.endswith(f"(`ansible {host} -m ping`), or leave it out of firewall_{kind}_hosts.")
    (error,) = make(**{**AROUND, f"{kind}_hosts": ["nobody"]})["errors"]
    assert error == f"firewall_{kind}_hosts names 'nobody', which is not a host of the inventory."


# A pull-through image cache on the host (sparkfleet.serving.registry_cache): the fleet's engines only.

def test_a_registry_cache_host_lets_the_fleet_reach_its_port_and_no_one_else():
    result = make(**AROUND, cache_port=5000, cache_here=True, api_sources=["10.1.0.0/16"])
    assert [c for c in comments(result) if "5000" in c] == [
        "sparkfleet.serving.firewall: fleet allow 5000/tcp from 192.0.2.12/32",
        "sparkfleet.serving.firewall: fleet allow 5000/tcp from 2001:db8::12/128"]
    # A host that runs no cache opens nothing; the port is checked everywhere (playbooks/check.yml).
    assert [c for c in comments(make(**AROUND, cache_port=5000, cache_here=False)) if "5000" in c] == []
    assert make(**AROUND, cache_port=70000)["errors"] == [
        "firewall_registry_cache_port: 70000 is not a port number (expected an integer from 1 to 65535)"]


# --- several vLLM deployments on a box: an API port each (firewall_api_ports) --------------------


def test_one_listed_api_port_makes_the_rules_of_the_single_api_port():
    """A box serving one deployment keeps its rules and their order, whether the port comes as a list or not."""
    single = make(**{**AROUND, "api_sources": ["10.1.0.0/16"]})
    listed = make(**{**AROUND, "api_sources": ["10.1.0.0/16"], "api_ports": [8000], "api_port": 1234})
    assert single.get("errors") is None
    assert listed["rules"] == single["rules"] and listed["docker_user_v4"] == single["docker_user_v4"]
    assert make(**INPUT, api_ports=["8000"], probe=converged())["apply"] == []
    # Empty (the role's default on a box serving one deployment): the one firewall_api_port, refused by that name.
    assert make(**{**AROUND, "api_sources": ["10.1.0.0/16"], "api_ports": []})["rules"] == single["rules"]
    assert input_errors({**FIREWALL_SETTINGS, "api_ports": [], "api_port": 70000}) == [
        "firewall_api_port: 70000 is not a port number (expected an integer from 1 to 65535)"]


def test_every_deployments_port_is_opened_to_the_api_sources_the_fleet_prometheus_and_the_gateway():
    result = make(**{**AROUND, "api_sources": ["10.1.0.0/16"], "api_ports": [8000, 8001, 8001]})
    assert result.get("errors") is None
    for port in ("8000", "8001"):
        wanted = {f"api allow {port}/tcp from 10.1.0.0/16", f"monitoring allow {port}/tcp from 192.0.2.50/32",
                  f"gateway allow {port}/tcp from 192.0.2.60/32"}
        assert wanted <= {c.removeprefix("sparkfleet.serving.firewall: ") for c in comments(result)}
        assert any(f": fleet allow {port}/tcp from " in c for c in comments(result))
    # A port listed twice is opened once.
    assert len([c for c in comments(result) if ": api allow 8001/tcp" in c]) == 1


def test_a_port_no_longer_listed_is_closed_on_the_next_run():
    """The rules of a removed deployment's port are the role's (its comment) and wanted by no plan: deleted."""
    two = make(**INPUT, api_ports=[8000, 8001])
    state = converged(added="Added user rules (see 'ufw status' for running firewall):\n"
                      + "\n".join(added_line(r) for r in two["rules"]))
    assert make(**INPUT, api_ports=[8000, 8001], probe=state)["apply"] == []
    result = make(**INPUT, api_ports=[8000], probe=state)
    deleted = [step["rule"] for step in result["apply"] if step["task"] == "delete"]
    assert deleted and all("8001/tcp" in rule for rule in deleted)
    assert len(deleted) == len([r for r in two["rules"] if r["port"] == "8001"])
    assert [step["task"] for step in result["apply"]] == ["delete"] * len(deleted)


def test_a_cluster_worker_opens_none_of_the_api_ports():
    worker = make(**INPUT, api_ports=[8000, 8001], cluster_peers=PEERS, serves_api=False)
    assert [c for c in comments(worker) if "8000/tcp" in c or "8001/tcp" in c] == []


@pytest.mark.parametrize(("ports", "expect"), [
    ([8000, 0], "firewall_api_ports[1]: 0 is not a port number"),
    (["80a"], "firewall_api_ports[0]: '80a' is not a port number"),
    ("8000", "firewall_api_ports: '8000' is not a list"),
])
def test_bad_api_ports_are_refused_by_the_check_and_the_plan(ports: Any, expect: str):
    settings = {**FIREWALL_SETTINGS, "api_ports": ports}
    errors = input_errors(settings)
    assert any(expect in error for error in errors), errors
    assert plan({**settings, "self": "spark-01", "probe": probe(connection="10.0.0.9 50000 10.0.0.2 22")})["errors"] \
        == errors
