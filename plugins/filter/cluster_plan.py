# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter of a vLLM cluster: its members, links, parallel sizes and model -> each member's rank, role,
extra `vllm serve` arguments and environment (sparkfleet.serving.vllm_cluster_plan)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

# The helper is imported where it is used, so that loading this file costs little: to find one
# filter of the collection, ansible-core imports every filter file of it (see ruff.toml).


def vllm_cluster_plan(data: object) -> dict:
    """The cluster's inputs -> {"errors": [...]} or the plan (see plugins/plugin_utils/cluster_plan.py)."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.cluster_plan import plan
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.filter_errors import as_filter

    if not isinstance(data, Mapping):
        raise AnsibleFilterError(f"vllm_cluster_plan: expected a dict of the cluster's inputs, found "
                                 f"{type(data).__name__}")
    return as_filter("vllm_cluster_plan", plan, dict(data))


class FilterModule:
    def filters(self) -> dict:
        return {"vllm_cluster_plan": vllm_cluster_plan}
