# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the model role: what a box would download (sparkfleet.serving.model_plan) and whether
the box's manifest lists every file a selection needs (sparkfleet.serving.model_manifest_covers)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).


def model_plan(listing: object, commit: str, **box: object) -> dict:
    """The hub's listing + the box's manifest and files -> the plan (see module_utils/model_plan.py)."""
    from ansible_collections.sparkfleet.serving.plugins.module_utils.model_plan import plan
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.filter_errors import as_filter

    return as_filter("model_plan", plan, listing, str(commit), box)


def model_manifest_covers(manifest: object, include: object, exclude: object) -> bool:
    """The manifest, model_include, model_exclude -> whether the manifest covers the selection
    (module_utils/model_plan.py covers(), the download program's own rule)."""
    from ansible_collections.sparkfleet.serving.plugins.module_utils.model_plan import covers

    if not all(isinstance(value, list) for value in (include, exclude)):
        raise AnsibleFilterError("model_manifest_covers: include and exclude must be lists of patterns")
    return covers(manifest, include, exclude)  # type: ignore[arg-type]


class FilterModule:
    def filters(self) -> dict:
        return {"model_plan": model_plan, "model_manifest_covers": model_manifest_covers}
