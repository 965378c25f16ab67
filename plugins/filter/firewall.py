# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter of the firewall role: its variables and its probe of the box -> the ufw rules and the steps
left to apply (sparkfleet.serving.firewall_plan)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).


def firewall_plan(data: object) -> dict:
    """The role's inputs -> {"errors": [...]} or the plan (see plugins/plugin_utils/firewall_plan.py)."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.firewall_plan import plan

    if not isinstance(data, Mapping):
        raise AnsibleFilterError(f"firewall_plan: expected a dict of the role's inputs, found {type(data).__name__}")
    try:
        return plan(dict(data))
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise AnsibleFilterError(f"firewall_plan: {exc}") from exc


class FilterModule:
    def filters(self) -> dict:
        return {"firewall_plan": firewall_plan}
