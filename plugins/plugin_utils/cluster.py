# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which cluster a host belongs to: boxes that serve one model together (vLLM's multi-node mode).

The inventory's shape: a cluster is a child group of the group `clusters` (itself under `spark`);
its members are that group's hosts, in the inventory's order, rank 0 (the head) first. A host is
in at most one cluster.

Ansible's variables give each group's hosts (`groups`) and a host's groups (`group_names`), not
which group is a child of which. A cluster group is therefore recognised by its hosts: a group of
the host, other than `all`, `ungrouped`, `spark` and `clusters`, whose every host is in `clusters`.
A second group that holds only cluster hosts (a rack, say) is indistinguishable from a cluster:
the host is then reported in two and refused, with both names, rather than guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

PARENT = "clusters"
NOT_CLUSTERS = frozenset({"all", "ungrouped", "spark", PARENT})


class ClusterError(ValueError):
    """The host is in more than one cluster group."""


def cluster_groups(groups: Mapping[str, Sequence[str]], group_names: Sequence[str]) -> list[str]:
    """The host's groups that look like clusters (see the module's docstring), sorted."""
    clustered = set(groups.get(PARENT) or [])
    return sorted(
        name for name in group_names
        if name not in NOT_CLUSTERS and groups.get(name) and set(groups[name]) <= clustered
    )


def cluster_of(groups: Mapping[str, Sequence[str]], group_names: Sequence[str]) -> dict:
    """{"name": the cluster group, "members": its hosts in rank order} or {} when the host is in none.

    Raises ClusterError when the host is in two or more.
    """
    found = cluster_groups(groups, group_names)
    if not found:
        return {}
    if len(found) > 1:
        raise ClusterError(
            f"the host is in {len(found)} cluster groups ({', '.join(found)}); expected at most one child group "
            f"of '{PARENT}' per host: take it out of all but one (a group that holds only cluster hosts but is not "
            f"a cluster must also hold a host outside '{PARENT}', or not be a group of this host)"
        )
    name = found[0]
    return {"name": name, "members": list(groups[name])}
