# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter: which cluster (a child group of `clusters`) a host belongs to, its members in rank order, its head,
and the host's rank and role."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ansible.errors import AnsibleFilterError

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).


def cluster_of(groups: object, group_names: object, host: object) -> dict:
    """groups, group_names, host -> {"name", "members", "head", "rank", "role", "size"} or {}
    (see plugins/plugin_utils/cluster.py)."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils import cluster

    if not isinstance(groups, Mapping):
        raise AnsibleFilterError(f"cluster_of: expected the groups variable (a dict), found {type(groups).__name__}")
    if not isinstance(group_names, Sequence) or isinstance(group_names, str):
        raise AnsibleFilterError(
            f"cluster_of: expected the host's group_names (a list), found {type(group_names).__name__}")
    if not isinstance(host, str) or not host:
        raise AnsibleFilterError(f"cluster_of: expected the host's name (inventory_hostname), found {host!r}")
    try:
        return cluster.cluster_of(groups, list(group_names), host)
    except cluster.ClusterError as exc:
        raise AnsibleFilterError(f"cluster_of: {exc}") from exc


class FilterModule:
    def filters(self) -> dict:
        return {"cluster_of": cluster_of}
