# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter of the model role: what a box would download (sparkfleet.serving.model_plan)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).


def model_plan(listing: object, commit: str, **box: object) -> dict:
    """The hub's listing + the box's manifest and files -> the plan (see module_utils/model_plan.py)."""
    from ansible_collections.sparkfleet.serving.plugins.module_utils.model_plan import plan

    try:
        return plan(listing, str(commit), box)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise AnsibleFilterError(f"model_plan: {exc}") from exc


class FilterModule:
    def filters(self) -> dict:
        return {"model_plan": model_plan}
