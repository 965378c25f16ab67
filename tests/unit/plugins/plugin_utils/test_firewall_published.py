# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan of the firewall role's publish entry point (plugins/plugin_utils/firewall_published.py): the rules
an owner publishes are added when ufw lacks them, kept when it has them, and the owner's rules no longer published
(its current mark or the one it wrote before) deleted; other owners' and the firewall's own rules are never touched."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.sparkfleet.serving.plugins.plugin_utils.firewall_published import plan
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.firewall_state import FILES

ACTIVE = "Status: active\nDefault: deny (incoming), allow (outgoing), disabled (routed)"
INACTIVE = "Status: inactive"
API = {"port": 443, "proto": "tcp", "sources": ["any"], "purpose": "API"}
API_ANY = "sparkfleet.serving.firewall gateway: API allow 443/tcp from any"
METRICS = {"port": 29000, "sources": ["10.0.0.5", "10.1.0.0/16"], "purpose": "router metrics"}
FIREWALL_OWN = "ufw allow 22/tcp comment 'sparkfleet.serving.firewall: ssh allow 22/tcp from any'"
MODEL_SEED = ("ufw allow from 10.0.0.7 to any port 8090 proto tcp "
              "comment 'sparkfleet.serving.firewall model: LAN copy allow 8090/tcp from 10.0.0.7/32'")


def section(output: str, rc: int = 0) -> dict[str, Any]:
    return {"rc": rc, "output": output, "lines": output.splitlines()}


def probe(status: str | None = ACTIVE, added: list[str] | None = None) -> dict[str, Any]:
    """The firewall probe's sections; status None: ufw is not installed."""
    sections = {"ssh_connection": section(""), "sshd": section("port 22")}
    sections.update({f"file {path}": section("", 1) for path in FILES})
    if status is None:
        sections["ufw"] = section("", 127)
    else:
        sections["ufw"] = section(status)
        sections["added"] = section("Added user rules (see 'ufw status' for running firewall):\n"
                                    + "\n".join(added or []))
    return sections


def line(comment: str, port: int = 443, source: str = "any") -> str:
    """A rule as `ufw show added` prints it."""
    where = f"{port}/tcp" if source == "any" else f"from {source} to any port {port} proto tcp"
    return f"ufw allow {where} comment '{comment}'"


def make(rules: list[dict[str, Any]], owner: str = "gateway", **kwargs: Any) -> dict[str, Any]:
    return plan({"owner": owner, "rules": rules, "probe": probe(**kwargs)})


def comments(items: list[dict[str, str]]) -> list[str]:
    return [item["comment"] for item in items]


def test_a_new_rule_is_added_with_its_owners_mark():
    result = make([API, METRICS])
    assert result["active"] is True
    assert comments(result["add"]) == [
        API_ANY,
        "sparkfleet.serving.firewall gateway: router metrics allow 29000/tcp from 10.0.0.5/32",
        "sparkfleet.serving.firewall gateway: router metrics allow 29000/tcp from 10.1.0.0/16",
    ]
    assert result["add"][1] == {"rule": "allow", "port": "29000", "proto": "tcp", "from": "10.0.0.5/32",
                                "comment": result["add"][1]["comment"]}
    assert result["delete"] == []


def test_a_rule_ufw_has_is_kept_and_nothing_is_to_do():
    result = make([API], added=[line(API_ANY)])
    assert (result["add"], result["delete"]) == ([], [])
    assert comments(result["rules"]) == [API_ANY]


def test_a_rule_the_owner_no_longer_publishes_is_deleted():
    old = "sparkfleet.serving.firewall gateway: API allow 8443/tcp from any"
    result = make([API], added=[line(API_ANY), line(old, 8443)])
    assert result["add"] == []
    assert result["delete"] == [{"rule": f"allow 8443/tcp comment '{old}'"}]


def test_an_empty_list_deletes_every_rule_of_the_owner_and_only_those():
    added = [FIREWALL_OWN, MODEL_SEED, line(API_ANY), line("someone else's rule", 80)]
    result = make([], added=added)
    assert [d["rule"] for d in result["delete"]] == [line(API_ANY).removeprefix("ufw ")]
    result = make([], owner="model", added=added)
    assert [d["rule"] for d in result["delete"]] == [MODEL_SEED.removeprefix("ufw ")]


def test_the_comments_the_roles_wrote_before_are_migrated():
    gateway_old = line("sparkfleet gateway: API 443/tcp from any")
    model_old = line("sparkfleet.serving.model: LAN copy of the weights", 8090, "10.0.0.7")
    added = [gateway_old, model_old]
    gateway = make([API], added=added)
    assert comments(gateway["add"]) == [API_ANY]
    assert [d["rule"] for d in gateway["delete"]] == [gateway_old.removeprefix("ufw ")]
    model = make([], owner="model", added=added)
    assert [d["rule"] for d in model["delete"]] == [model_old.removeprefix("ufw ")]


def test_an_owner_whose_name_prefixes_another_keeps_off_its_rules():
    result = make([], owner="gate", added=[line(API_ANY)])
    assert result["delete"] == []


@pytest.mark.parametrize("status", [INACTIVE, None], ids=["ufw inactive", "ufw not installed"])
def test_without_an_active_ufw_there_is_nothing_to_do(status):
    result = make([API], status=status, **({"added": [line("sparkfleet gateway: old")]} if status else {}))
    assert result["active"] is False
    assert (result["add"], result["delete"]) == ([], [])
    assert comments(result["rules"]) == [API_ANY]


@pytest.mark.parametrize(("owner", "rules", "message"), [
    ("", [API], "firewall_publish_owner: ''"),
    ("Gate way", [API], "firewall_publish_owner: 'Gate way'"),
    ("gateway", [{**API, "port": 70000}], "firewall_publish_rules[0].port: 70000 is not a port number"),
    ("gateway", [{**API, "proto": "icmp"}], "proto 'icmp' is not one of tcp, udp"),
    ("gateway", [{**API, "sources": ["10.0.0.5/24"]}], "did you mean 10.0.0.0/24?"),
    ("gateway", [{**API, "sources": "any"}], "firewall_publish_rules[0].sources: expected a list"),
    ("gateway", [{**API, "purpose": "it's"}], "without a quote"),
    ("gateway", [{**API, "purpose": ""}], "must say what the port is for"),
    ("gateway", "443", "expected a list of rules"),
])
def test_bad_input_is_refused(owner, rules, message):
    result = plan({"owner": owner, "rules": rules, "probe": probe()})
    assert any(message in error for error in result["errors"]), result


def test_a_ufw_that_cannot_answer_is_refused():
    sections = probe()
    sections["ufw"] = section("ERROR: problem running iptables", 1)
    result = plan({"owner": "gateway", "rules": [API], "probe": sections})
    assert "`ufw status verbose` failed (exit 1)" in result["errors"][0]
