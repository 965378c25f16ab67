# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the maintenance role and playbooks/maintain.yml: what changed on a box, and the run's summary."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).


def maintenance_changes(before: object, after: object) -> list:
    """Two snapshots of the maintenance_facts module -> what differs, one phrase each."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.filter_errors import as_filter
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.maintenance import changes

    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        raise AnsibleFilterError("maintenance_changes expects two snapshots (dicts), "
                                 f"got {type(before).__name__} and {type(after).__name__}")
    return as_filter("maintenance_changes", changes, dict(before), dict(after))


def maintenance_summary(outcomes: object, hosts: object) -> dict:
    """{host: outcome} and the hosts in order -> the summary of a maintenance run."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.filter_errors import as_filter
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.maintenance import summarize

    if not isinstance(outcomes, Mapping) or not all(isinstance(o, Mapping) for o in outcomes.values()):
        raise AnsibleFilterError("maintenance_summary expects a dict of each host's outcome (a dict), "
                                 f"got {type(outcomes).__name__}")
    if not isinstance(hosts, (list, tuple)) or not all(isinstance(h, str) for h in hosts):
        raise AnsibleFilterError(f"maintenance_summary: hosts must be a list of host names, got {hosts!r}")
    return as_filter("maintenance_summary", summarize, {str(k): dict(v) for k, v in outcomes.items()}, list(hosts))


class FilterModule:
    def filters(self) -> dict:
        return {"maintenance_changes": maintenance_changes, "maintenance_summary": maintenance_summary}
