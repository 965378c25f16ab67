"""The firewall role's plan (plugins/plugin_utils/firewall_plan.py): refusals and rules.

The Molecule scenario proves the rules with traffic through `docker exec`, which carries
no SSH connection; the SSH-connection paths are checked here.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

PLAN = Path(__file__).resolve().parents[2] / "plugins" / "plugin_utils" / "firewall_plan.py"
spec = importlib.util.spec_from_file_location("firewall_plan", PLAN)
assert spec and spec.loader
firewall_plan = importlib.util.module_from_spec(spec)
spec.loader.exec_module(firewall_plan)

SSHD = "port 22\nport 2222\nlistenaddress 0.0.0.0:22\n"


def make(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"self": "spark-01", "sshd_output": SSHD, "api_port": 8000, "api_sources": []}
    data.update(overrides)
    return firewall_plan.plan(data)


def comments(result: dict[str, Any]) -> list[str]:
    return [rule["comment"] for rule in result["rules"]]


def test_ssh_ports_come_from_sshd_and_the_connection():
    result = make(ssh_connection="192.0.2.5 50000 192.0.2.11 22")
    assert result["ssh_ports"] == [22, 2222]
    assert comments(result)[:2] == [
        "sparkfleet.serving.firewall: ssh allow 22/tcp from any",
        "sparkfleet.serving.firewall: ssh allow 2222/tcp from any",
    ]


def test_the_connection_port_alone_is_enough_without_sshd():
    assert make(sshd_output="", ssh_connection="192.0.2.5 50000 192.0.2.11 2022")["ssh_ports"] == [2022]


def test_no_ssh_port_at_all_is_refused():
    (error,) = make(sshd_output="", sshd_binary="/usr/sbin/sshd", sshd_error="not found")["errors"]
    assert "ufw is NOT enabled" in error
    assert "firewall_ssh_port" in error


def test_a_configured_port_that_is_not_this_connections_is_refused():
    (error,) = make(ssh_port=22, ssh_connection="192.0.2.5 50000 192.0.2.11 2022")["errors"]
    assert "arrives on port 2022" in error


def test_ssh_sources_must_hold_the_controller_seen_in_the_connection():
    result = make(ssh_sources=["198.51.100.0/24"], ssh_connection="192.0.2.5 50000 192.0.2.11 22")
    assert "does not include the controller's own address 192.0.2.5" in result["errors"][0]
    ok = make(ssh_sources=["192.0.2.0/24"], ssh_connection="192.0.2.5 50000 192.0.2.11 22", ssh_limit=True)
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
    ],
)
def test_bad_input_is_refused(overrides: dict[str, Any], expected: str):
    result = make(**overrides)
    assert "rules" not in result
    assert any(expected in error for error in result["errors"]), result["errors"]


def test_fleet_addresses_come_from_facts_without_bridges_loopback_or_self():
    fleet = {
        "spark-01": {"interfaces": [{"device": "eth0", "addresses": ["192.0.2.11"]}]},
        "spark-02": {"interfaces": [
            {"device": "eth0", "addresses": ["192.0.2.12", "2001:db8::12"]},
            {"device": "docker0", "addresses": ["172.17.0.1"]},
            {"device": "lo", "addresses": ["127.0.0.1"]},
        ]},
        "spark-03": {"ansible_host": "192.0.2.13", "interfaces": []},
    }
    result = make(fleet=fleet, fleet_ports=[{"port": "29500", "proto": "tcp"}])
    assert result["fleet"] == ["192.0.2.12/32", "192.0.2.13/32", "2001:db8::12/128"]
    assert "sparkfleet.serving.firewall: fleet allow 29500/tcp from 192.0.2.12/32" in comments(result)
    assert "-A DOCKER-USER -s 2001:db8::12/128 -m conntrack --ctstate DNAT -j RETURN" in result["docker_user_v6"]


def test_docker_user_drops_dnat_from_anyone_else():
    lines = make(api_sources=["10.1.0.0/16"])["docker_user_v4"]
    assert lines.index("-A DOCKER-USER -s 10.1.0.0/16 -m conntrack --ctstate DNAT -j RETURN") < lines.index(
        "-A DOCKER-USER -m conntrack --ctstate DNAT -j DROP")
    assert lines[-1] == "-A DOCKER-USER -j RETURN"
