# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter of playbooks/rollout.yml: the rollout's summary."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).


def rollout_summary(outcomes: object, hosts: object = None) -> dict:
    """{host: outcome} (and the hosts in their order) -> the summary."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.rollout import summarize

    if not isinstance(outcomes, Mapping) or not all(isinstance(o, Mapping) for o in outcomes.values()):
        raise AnsibleFilterError("rollout_summary expects a dict of each host's outcome (a dict), "
                                 f"got {type(outcomes).__name__}")
    order = list(outcomes) if hosts is None else hosts
    if not isinstance(order, (list, tuple)) or not all(isinstance(h, str) for h in order):
        raise AnsibleFilterError(f"rollout_summary: hosts must be a list of host names, got {order!r}")
    return summarize({str(k): dict(v) for k, v in outcomes.items()}, list(order))


class FilterModule:
    def filters(self) -> dict:
        return {"rollout_summary": rollout_summary}
