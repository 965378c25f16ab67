# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet filters refuse what is not a box's answers, rows or results, with a clear error."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.filter.fleet import FilterModule

FILTERS = FilterModule().filters()


@pytest.mark.parametrize("value", [None, "text", 3, ["host"]])
def test_status_row_needs_a_dict(value: object):
    with pytest.raises(AnsibleFilterError, match="fleet_status_row expects a dict"):
        FILTERS["fleet_status_row"](value)


def test_table_kind_and_rows_are_checked():
    with pytest.raises(AnsibleFilterError, match="kind must be one of status, benchmark"):
        FILTERS["fleet_table"]([], kind="speed")
    with pytest.raises(AnsibleFilterError, match="expects a list of rows"):
        FILTERS["fleet_table"](["spark-1"])
    assert FILTERS["fleet_table"]([{"host": "spark-1", "reachable": True}]).splitlines()[2].startswith("spark-1")


def test_benchmark_filters():
    with pytest.raises(AnsibleFilterError, match="as text or a dict"):
        FILTERS["fleet_benchmark_row"](3, "spark-1")
    with pytest.raises(AnsibleFilterError, match="dict of host -> result"):
        FILTERS["fleet_benchmark_summary"](["x"])
    assert FILTERS["fleet_benchmark_row"](None, "spark-1", "no result") == {"host": "spark-1", "error": "no result"}
    assert FILTERS["fleet_benchmark_summary"]({})["boxes"] == 0


def test_status_units_filter():
    groups = {"spark": ["a", "b"], "clusters": ["a", "b"], "pair": ["a", "b"]}
    rows = [FILTERS["fleet_status_row"]({"host": h, "reachable": False}) for h in ("a", "b")]
    assert [u["host"] for u in FILTERS["fleet_status_units"](rows, groups)] == ["pair"]
    with pytest.raises(AnsibleFilterError, match="list of status rows"):
        FILTERS["fleet_status_units"]([{"x": 1}], groups)
    with pytest.raises(AnsibleFilterError, match="groups variable"):
        FILTERS["fleet_status_units"](rows, ["pair"])
    with pytest.raises(AnsibleFilterError, match="fleet_status_units: the host is in 2 cluster groups"):
        FILTERS["fleet_status_units"](rows, {**groups, "pair2": ["a"]})
