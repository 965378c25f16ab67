# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the firewall role: its variables and its probe of the box -> the ufw rules and the steps
left to apply (sparkfleet.serving.firewall_plan) or, without the box, what is wrong with the variables
(firewall_input_errors); the rules another role publishes -> what to add and delete
(firewall_published_plan)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).


def _planner(name: str, data: object, what: str, module: str = "firewall_plan") -> Any:
    """Calls the function `name` of plugins/plugin_utils/<module>.py with the role's inputs."""
    from importlib import import_module

    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.filter_errors import as_filter

    if not isinstance(data, Mapping):
        raise AnsibleFilterError(f"{what}: expected a dict of the role's inputs, found {type(data).__name__}")
    planner = import_module(f"ansible_collections.sparkfleet.serving.plugins.plugin_utils.{module}")
    return as_filter(what, getattr(planner, name), dict(data))


def firewall_plan(data: object) -> dict:
    """The role's inputs -> {"errors": [...]} or the plan (see plugins/plugin_utils/firewall_plan.py)."""
    return _planner("plan", data, "firewall_plan")


def firewall_input_errors(data: object) -> list[str]:
    """The role's variables alone -> what firewall_plan would refuse in them, whatever the box says."""
    return _planner("input_errors", data, "firewall_input_errors")


def firewall_published_plan(data: object) -> dict:
    """{owner, rules, probe} -> {"errors": [...]} or what to add and delete (plugin_utils/firewall_published.py)."""
    return _planner("plan", data, "firewall_published_plan", "firewall_published")


class FilterModule:
    def filters(self) -> dict:
        return {"firewall_plan": firewall_plan, "firewall_input_errors": firewall_input_errors,
                "firewall_published_plan": firewall_published_plan}
