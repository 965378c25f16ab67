# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the link role and its doctor: the plan (link_plan), the addresses another netplan file gives a
member's link (link_existing), what the variables alone would be refused for (link_input_errors), the peers a
member pings (link_peers) and the findings that need every end of a link (link_cluster_findings). The logic:
plugins/plugin_utils/link_plan.py."""

from __future__ import annotations

from typing import Any

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).


def _call(name: str, data: object, what: str, *args: Any) -> Any:
    """plugins/plugin_utils/link_plan.py's function `name` on data (a dict), its errors as the filter's."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.filter_errors import as_filter
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.link_plan import call

    return as_filter(what, call, name, data, *args)


def link_plan(data: object) -> dict:
    """The role's inputs -> {"errors": [...]} or the plan."""
    return _call("plan", data, "link_plan")


def link_existing(data: object) -> dict:
    """The role's inputs -> the addresses another netplan file gives this member's link ({} when none)."""
    return _call("existing", data, "link_existing")


def link_input_errors(data: object) -> list[str]:
    """The role's variables alone -> what link_plan would refuse in them, whatever the box says."""
    return _call("input_errors", data, "link_input_errors")


def link_peers(reports: object, host: str) -> list[dict]:
    """{member: link_facts result} -> the addresses `host` pings on its links."""
    return _call("peers", reports, "link_peers", host)


def link_cluster_findings(reports: object, host: str, mtu: int) -> list[dict]:
    """{member: link_facts result} -> the findings about host's links that need the other ends."""
    return _call("cluster_findings", reports, "link_cluster_findings", host, mtu)


def link_finding_line(finding: object) -> str:
    """A finding of the doctor -> one line: severity, check, interface, found, expected, fix."""
    return _call("finding_line", finding, "link_finding_line")


class FilterModule:
    def filters(self) -> dict:
        return {"link_plan": link_plan, "link_existing": link_existing, "link_input_errors": link_input_errors,
                "link_peers": link_peers, "link_cluster_findings": link_cluster_findings,
                "link_finding_line": link_finding_line}
