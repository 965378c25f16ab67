# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the firewall role: its variables -> ufw rules (sparkfleet.serving.firewall_plan) or,
without the box, what is wrong with them (firewall_input_errors), its one read of the box
(firewall_probe) and the managed-block check (managed_block_in_place)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).
from ansible.module_utils.parsing.convert_bool import boolean


def _planner(name: str, data: object, what: str) -> Any:
    """Calls plugins/plugin_utils/firewall_plan.py's function `name` with the role's inputs."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils import firewall_plan as planner

    if not isinstance(data, Mapping):
        raise AnsibleFilterError(f"{what}: expected a dict of the role's inputs, found {type(data).__name__}")
    try:
        return getattr(planner, name)(dict(data))
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise AnsibleFilterError(f"{what}: {exc}") from exc


def firewall_plan(data: object) -> dict:
    """The role's inputs -> {"errors": [...]} or the plan (see plugins/plugin_utils/firewall_plan.py)."""
    return _planner("plan", data, "firewall_plan")


def firewall_input_errors(data: object) -> list[str]:
    """The role's variables alone -> what firewall_plan would refuse in them, whatever the box says."""
    return _planner("input_errors", data, "firewall_input_errors")


def firewall_probe(stdout: object) -> dict:
    """The output of roles/firewall/files/probe.sh -> its sections (plugins/plugin_utils/firewall_state.py)."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.firewall_state import parse_probe

    if not isinstance(stdout, str):
        found = type(stdout).__name__
        raise AnsibleFilterError(f"firewall_probe: expected the probe's output as a string, found {found}")
    try:
        return parse_probe(stdout)
    except ValueError as exc:
        raise AnsibleFilterError(f"firewall_probe: {exc}") from exc


def managed_block_in_place(text: object, name: object, block: object, wanted: object) -> bool:
    """Whether ansible.builtin.blockinfile with marker "# {mark} NAME" would leave the text as it is."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.firewall_state import block_in_place

    if not all(isinstance(value, str) for value in (text, name, block)):
        raise AnsibleFilterError("managed_block_in_place: the text, the marker name and the block must be strings")
    try:
        wanted_bool = boolean(wanted, strict=True)
    except TypeError as exc:
        raise AnsibleFilterError(f"managed_block_in_place: wanted: {exc}") from exc
    return block_in_place(str(text), str(name), str(block), wanted_bool)


class FilterModule:
    def filters(self) -> dict:
        return {
            "firewall_plan": firewall_plan,
            "firewall_input_errors": firewall_input_errors,
            "firewall_probe": firewall_probe,
            "managed_block_in_place": managed_block_in_place,
        }
