# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of playbooks/rollout.yml: its batches as Ansible's serial, and its summary."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).


def _groups(groups: object, what: str) -> dict:
    if not isinstance(groups, Mapping) or not all(isinstance(v, (list, tuple)) for v in groups.values()):
        raise AnsibleFilterError(f"{what}: groups must be Ansible's groups variable (a dict of host lists), "
                                 f"got {type(groups).__name__}")
    return {str(k): [str(h) for h in v] for k, v in groups.items()}


def _hosts(hosts: object, what: str) -> list:
    if not isinstance(hosts, (list, tuple)) or not all(isinstance(h, str) for h in hosts):
        raise AnsibleFilterError(f"{what}: hosts must be a list of host names, got {hosts!r}")
    return list(hosts)


def rollout_serial(batches: object, hosts: object, groups: object) -> list:
    """rollout_batches (in units: a box or a whole cluster), the play's hosts in order and the
    groups -> Ansible's serial (hosts per batch), every batch ending between units."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.filter_errors import as_filter
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.rollout import serial_counts

    return as_filter("rollout_serial", serial_counts, batches, _hosts(hosts, "rollout_serial"),
                     _groups(groups, "rollout_serial"))


def rollout_summary(outcomes: object, hosts: object = None, groups: object = None) -> dict:
    """{host: outcome} (and the hosts in their order, and the groups: one line per cluster) -> the summary."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.filter_errors import as_filter
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.rollout import summarize

    if not isinstance(outcomes, Mapping) or not all(isinstance(o, Mapping) for o in outcomes.values()):
        raise AnsibleFilterError("rollout_summary expects a dict of each host's outcome (a dict), "
                                 f"got {type(outcomes).__name__}")
    order = _hosts(list(outcomes) if hosts is None else hosts, "rollout_summary")
    return as_filter("rollout_summary", summarize, {str(k): dict(v) for k, v in outcomes.items()}, order,
                     None if groups is None else _groups(groups, "rollout_summary"))


class FilterModule:
    def filters(self) -> dict:
        return {"rollout_serial": rollout_serial, "rollout_summary": rollout_summary}
