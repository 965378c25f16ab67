# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the GPU clock caps (the nvidia_runtime role's nvidia_runtime_gpu_clock_limits): the setting's
errors, and the caps a box applied compared with the setting (plugins/plugin_utils/gpu_clocks.py)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).


def gpu_clock_limit_errors(setting: object, highest_query: object = "") -> list:
    """The setting (and `nvidia-smi --query-gpu=clocks.max.graphics --format=csv,noheader,nounits`'s output,
    when the box was asked) -> the errors, as sentences ([] when right)."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.gpu_clocks import highest_clock, limit_errors

    if not isinstance(highest_query, str):
        raise AnsibleFilterError(f"gpu_clock_limit_errors: highest_query must be nvidia-smi's output (a string), "
                                 f"found {type(highest_query).__name__}")
    return limit_errors(setting, highest_clock(highest_query))


def gpu_clock_caps(sections: object, setting: object) -> dict:
    """A probe's sections gpu_clocks_unit (systemctl show of the unit) and gpu_clocks_log (its journal since
    its last start), and the setting -> wanted, applied and how they differ."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.gpu_clocks import clock_caps

    if not isinstance(sections, Mapping):
        raise AnsibleFilterError(f"gpu_clock_caps expects the probe's sections (sparkfleet.serving.probe_sections),"
                                 f" found {type(sections).__name__}")
    unit = sections.get("gpu_clocks_unit") if isinstance(sections.get("gpu_clocks_unit"), Mapping) else {}
    log = sections.get("gpu_clocks_log") if isinstance(sections.get("gpu_clocks_log"), Mapping) else {}
    unit_read = unit.get("rc") == 0
    return clock_caps(setting, str(unit.get("output") or ""),
                      str(log.get("output") or "") if log.get("rc") == 0 else "", unit_read)


class FilterModule:
    def filters(self) -> dict:
        return {"gpu_clock_limit_errors": gpu_clock_limit_errors, "gpu_clock_caps": gpu_clock_caps}
