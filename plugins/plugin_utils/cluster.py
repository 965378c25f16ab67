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

The one place that says who a cluster's head is and what a member's rank and role are (head():
rank 0; place()): the roles, playbooks and plugins read them from cluster_of() rather than work
them out again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

PARENT = "clusters"
NOT_CLUSTERS = frozenset({"all", "ungrouped", "spark", PARENT})
# A member's role: the head is the only one with an API server; the workers run vLLM --headless.
HEAD = "head"
WORKER = "worker"


class ClusterError(ValueError):
    """The host is in more than one cluster group, or not among its cluster's members."""


def cluster_groups(groups: Mapping[str, Sequence[str]], group_names: Sequence[str]) -> list[str]:
    """The host's groups that look like clusters (see the module's docstring), sorted."""
    clustered = set(groups.get(PARENT) or [])
    return sorted(
        name for name in group_names
        if name not in NOT_CLUSTERS and groups.get(name) and set(groups[name]) <= clustered
    )


def head(members: Sequence[str]) -> str:
    """The head of a cluster whose members are in rank order: rank 0."""
    return members[0]


def place(members: Sequence[str], host: str) -> dict[str, Any]:
    """The host's place among the members (rank order): {"head", "rank", "role", "size"}.

    Raises ClusterError when the host is not one of them.
    """
    if host not in members:
        raise ClusterError(f"{host} is not a member of the cluster ({', '.join(members)}); expected one of them")
    rank = list(members).index(host)
    return {"head": head(members), "rank": rank, "role": WORKER if rank else HEAD, "size": len(members)}


def cluster_of(groups: Mapping[str, Sequence[str]], group_names: Sequence[str], host: str) -> dict[str, Any]:
    """The host's cluster: {"name", "members" (rank order), "head", "rank", "role", "size"}, or {}
    when the host is in none (group_names are the host's groups).

    Raises ClusterError when the host is in two or more, or is not in its cluster group's hosts
    (group_names of another host).
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
    members = list(groups[name])
    return {"name": name, "members": members, **place(members, host)}


def cluster_of_host(groups: Mapping[str, Sequence[str]], host: str) -> dict[str, Any]:
    """cluster_of() for a caller that has the inventory's groups but not the host's group_names
    (a controller-side plugin that looks at every host): the host's groups are read from groups."""
    return cluster_of(groups, [name for name, hosts in groups.items() if host in hosts], host)
