# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the fleet playbooks (status, benchmark): rows, the fleet's figures, one table."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).

TABLES = ("status", "benchmark")


def fleet_status_row(raw: object) -> dict:
    """One box's raw answers (a dict) -> its status row."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.fleet_report import status_row

    if not isinstance(raw, dict):
        raise AnsibleFilterError(f"fleet_status_row expects a dict of a box's answers, got {type(raw).__name__}")
    return status_row(raw)


def fleet_status_units(rows: object, groups: object) -> list:
    """The boxes' status rows and the groups -> one row per box or cluster."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.filter_errors import as_filter
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.fleet_report import status_units

    if not isinstance(rows, (list, tuple)) or not all(isinstance(r, dict) and "host" in r for r in rows):
        raise AnsibleFilterError("fleet_status_units expects a list of status rows (dicts with a host)")
    if not isinstance(groups, Mapping):
        raise AnsibleFilterError(f"fleet_status_units expects the groups variable (a dict), got "
                                 f"{type(groups).__name__}")
    return as_filter("fleet_status_units", status_units, list(rows), groups)


def fleet_image_flags(rows: object) -> list:
    """The boxes' status rows with image_differs set where a box's image ID is not the others'."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.fleet_report import flag_image_ids

    if not isinstance(rows, (list, tuple)) or not all(isinstance(r, dict) and "host" in r for r in rows):
        raise AnsibleFilterError("fleet_image_flags expects a list of status rows (dicts with a host)")
    return flag_image_ids([dict(row) for row in rows])


def fleet_table(rows: object, kind: str = "status") -> str:
    """Rows -> a text table; kind is status or benchmark."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.fleet_report import (
        BENCHMARK_COLUMNS,
        STATUS_COLUMNS,
        render_table,
        status_display,
    )

    if kind not in TABLES:
        raise AnsibleFilterError(f"fleet_table: kind must be one of {', '.join(TABLES)}, got {kind!r}")
    if not isinstance(rows, (list, tuple)) or not all(isinstance(r, dict) for r in rows):
        raise AnsibleFilterError("fleet_table expects a list of rows (dicts)")
    shown = [status_display(row) for row in rows] if kind == "status" else list(rows)
    return render_table(shown, STATUS_COLUMNS if kind == "status" else BENCHMARK_COLUMNS)


def fleet_benchmark_row(result: object, host: str, error: str = "") -> dict:
    """`vllm bench serve` result JSON (text or dict) of one box -> its row."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.fleet_report import benchmark_row

    if not isinstance(result, (str, dict)) and result is not None:
        raise AnsibleFilterError(f"fleet_benchmark_row expects the result JSON as text or a dict, got "
                                 f"{type(result).__name__}")
    return benchmark_row(str(host), result or "", str(error or ""))


def fleet_benchmark_summary(results: object) -> dict:
    """{host: result JSON} -> the fleet's row (throughput summed, percentiles over all requests)."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.fleet_report import benchmark_fleet

    if not isinstance(results, dict):
        raise AnsibleFilterError(f"fleet_benchmark_summary expects a dict of host -> result, got "
                                 f"{type(results).__name__}")
    return benchmark_fleet(results)


class FilterModule:
    def filters(self) -> dict:
        return {"fleet_status_row": fleet_status_row, "fleet_status_units": fleet_status_units,
                "fleet_image_flags": fleet_image_flags,
                "fleet_table": fleet_table,
                "fleet_benchmark_row": fleet_benchmark_row, "fleet_benchmark_summary": fleet_benchmark_summary}
