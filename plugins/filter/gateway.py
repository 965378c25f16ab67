# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter: the gateway's routes (one vllm-router per served model) from the inventory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ansible.errors import AnsibleFilterError

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).


def checked(what: str, hosts: object, hostvars: object, settings: object) -> tuple[list, Mapping, Mapping]:
    if not isinstance(hosts, Sequence) or isinstance(hosts, str):
        raise AnsibleFilterError(f"{what}: expected a list of hosts, found {type(hosts).__name__}")
    if not isinstance(hostvars, Mapping) or not isinstance(settings, Mapping):
        raise AnsibleFilterError(f"{what}: expected hostvars and the settings (dicts)")
    return list(hosts), hostvars, settings


def gateway_routes(hosts: object, hostvars: object, settings: object) -> dict:
    """hosts, hostvars, settings -> {"routes", "errors"} (see plugins/plugin_utils/gateway.py)."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils import gateway
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.filter_errors import as_filter

    return as_filter("gateway_routes", gateway.routes, *checked("gateway_routes", hosts, hostvars, settings))


def gateway_input_errors(hosts: object, hostvars: object, settings: object) -> list:
    """hosts, hostvars, settings -> the mistakes found without the boxes' deployments."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils import gateway
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.filter_errors import as_filter

    return as_filter("gateway_input_errors", gateway.input_errors,
                     *checked("gateway_input_errors", hosts, hostvars, settings))


class FilterModule:
    def filters(self) -> dict:
        return {"gateway_routes": gateway_routes, "gateway_input_errors": gateway_input_errors}
