# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The firewall role's plan for the ports another role publishes (roles/firewall/tasks/publish.yml, the
sparkfleet.serving.firewall_published_plan filter): an owner (a role: "gateway", "model") and the rules it
wants now -> the ufw rules to add and the owner's rules to delete.

Each published rule's comment is `sparkfleet.serving.firewall OWNER: PURPOSE allow PORT/PROTO from SOURCE`.
The firewall's own rules are `sparkfleet.serving.firewall: ...` (firewall_plan.MARKER followed by a colon):
neither plan ever deletes the other's, and no owner deletes another owner's. The comments the gateway and the
model role wrote before they published through the firewall (LEGACY_MARKS) are that owner's too, so that an
upgrade removes them.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.sparkfleet.serving.plugins.plugin_utils.firewall_plan import MARKER, parse_network, parse_port
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.firewall_state import read_probe, rule_comments

PROTOCOLS = ("tcp", "udp")
# An owner is a role's short name: it ends up in a ufw comment, which ufw quotes with '.
OWNER = re.compile(r"^[a-z][a-z0-9_]*$")
# The comments the roles wrote themselves before the firewall role owned their rules.
LEGACY_MARKS = {
    "gateway": ("sparkfleet gateway: ",),
    "model": ("sparkfleet.serving.model: ",),
}


def owner_mark(owner: str) -> str:
    """The prefix of every comment of this owner's rules."""
    return f"{MARKER} {owner}: "


def owner_rules(owner: str, published: Any, errors: list[str]) -> list[dict[str, str]]:
    """The published items {port, proto, sources, purpose} -> one ufw rule per source, each checked."""
    if not isinstance(published, list):
        errors.append(f"firewall_publish_rules: expected a list of rules, found {type(published).__name__}")
        return []
    rules = []
    for index, item in enumerate(published):
        what = f"firewall_publish_rules[{index}]"
        if not isinstance(item, dict):
            errors.append(f"{what}: expected a dict with port, proto, sources and purpose, found {item!r}")
            continue
        port = parse_port(item.get("port"), f"{what}.port", errors)
        proto = str(item.get("proto", "tcp"))
        if proto not in PROTOCOLS:
            errors.append(f"{what}: proto {proto!r} is not one of {', '.join(PROTOCOLS)}")
        purpose = str(item.get("purpose", "")).strip()
        if not purpose or "'" in purpose:
            errors.append(f"{what}: purpose {purpose!r} must say what the port is for, without a quote (')")
        sources = item.get("sources", [])
        if not isinstance(sources, list):
            errors.append(f"{what}.sources: expected a list of networks (CIDR) or 'any', found {sources!r}")
            continue
        for source in sources:
            network = None if str(source) == "any" else parse_network(source, f"{what}.sources", errors)
            origin = "any" if network is None else str(network)
            rules.append({"rule": "allow", "port": str(port), "proto": proto, "from": origin,
                          "comment": f"{owner_mark(owner)}{purpose} allow {port}/{proto} from {origin}"})
    return rules


def is_owners(comment: str, owner: str) -> bool:
    """Whether a rule's comment marks it as this owner's (now or as the owner marked it before)."""
    return comment.startswith((owner_mark(owner), *LEGACY_MARKS.get(owner, ())))


def plan(data: dict[str, Any]) -> dict[str, Any]:
    """{owner, rules (as published), probe (the firewall probe's sections)} -> {"errors": [...]} or
    {active, rules, add, delete}: add the rules ufw lacks (by comment), delete (as `ufw delete` takes them)
    the owner's rules no longer published. ufw not installed or not active: nothing to do (the firewall
    role decides whether the box has a firewall; an inactive ufw filters nothing)."""
    errors: list[str] = []
    owner = str(data.get("owner", ""))
    if not OWNER.match(owner):
        errors.append(f"firewall_publish_owner: {owner!r} must name the publishing role (lower case, e.g. gateway)")
    rules = owner_rules(owner, data.get("rules", []), errors)
    state = read_probe(data.get("probe") or {}, errors)
    if errors:
        return {"errors": errors}
    unique = list({r["comment"]: r for r in rules}.values())
    active = state["ufw_installed"] and bool(re.search(r"^Status: active$", state["status"], re.MULTILINE))
    if not active:
        return {"active": False, "rules": unique, "add": [], "delete": []}
    wanted = {r["comment"] for r in unique}
    present = set(rule_comments(state["added"]))
    delete = [{"rule": line.removeprefix("ufw ")} for line in state["added"].splitlines()
              if any(is_owners(c, owner) and c not in wanted for c in rule_comments(line))]
    add = [r for r in unique if r["comment"] not in present]
    return {"active": True, "rules": unique, "add": add, "delete": delete}
