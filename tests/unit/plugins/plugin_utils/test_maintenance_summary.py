# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What changed on a box between two snapshots, and the summary of a maintenance run
(plugins/plugin_utils/maintenance.py)."""

from __future__ import annotations

from ansible_collections.sparkfleet.serving.plugins.plugin_utils.maintenance import changes, summarize

BEFORE = {"dgx_os": {"version": "7.3.1"}, "os": {"pretty_name": "Ubuntu 24.04.3 LTS"}, "kernel": "6.14.0-1015-nvidia",
          "driver": {"version": "580.142", "cuda_version": "13.0"},
          "packages": {"nvidia-driver-580-open": "580.142-0ubuntu0.24.04.1", "linux-image-6.14.0-1015-nvidia": "1"},
          "firmware": [{"name": "EC", "device_id": "ec", "version": "1.2"}]}
AFTER = {**BEFORE, "kernel": "6.17.0-1008-nvidia", "driver": {"version": "580.159.03", "cuda_version": "13.0"},
         "packages": {"nvidia-driver-580-open": "580.159.03-0ubuntu0.24.04.1", "linux-image-6.14.0-1015-nvidia": "1",
                      "linux-image-6.17.0-1008-nvidia": "2"},
         "firmware": [{"name": "EC", "device_id": "ec", "version": "1.3"}]}


def test_changes_name_the_kernel_the_driver_each_package_and_the_firmware():
    assert changes(BEFORE, AFTER) == [
        "kernel 6.14.0-1015-nvidia -> 6.17.0-1008-nvidia",
        "driver 580.142 -> 580.159.03",
        "linux-image-6.17.0-1008-nvidia (not installed) -> 2",
        "nvidia-driver-580-open 580.142-0ubuntu0.24.04.1 -> 580.159.03-0ubuntu0.24.04.1",
        "firmware EC 1.2 -> 1.3",
    ]
    assert changes(BEFORE, BEFORE) == []


def record(**extra: object) -> dict:
    history = [{"state": s, "at": f"2026-12-05T01:00:{i * 5:02d}Z"}
               for i, s in enumerate(["begun", "drained", "stopped", "updated", "rebooted", "serving", "restored",
                                      "done"])]
    return {"started_at": "2026-12-05T01:00:00Z", "finished_at": "2026-12-05T01:00:35Z", "history": history,
            "changes": ["driver 580.142 -> 580.159.03"], "rebooted": True, **extra}


def test_a_run_stopped_by_a_failed_box():
    outcomes = {
        "fleet-2": {"state": "failed", "batch": 1, "record": record(),
                    "failure": {"task": "Start vLLM", "message": "driver not loaded"}},
        "fleet-3": {"state": "planned", "planned": [{"package": "linux-image-x", "from": None, "to": "2"}]},
        "fleet-4": {"state": "unchanged"},
    }
    summary = summarize(outcomes, ["fleet-2", "fleet-3", "fleet-4"])
    assert summary["complete"] is False
    assert summary["failed"] == ["fleet-2"] and summary["not_reached"] == ["fleet-3"]
    assert "FAILED" in summary["lines"][0] and "'Start vLLM': driver not loaded" in summary["lines"][0]
    assert summary["lines"][1].startswith("fleet-3: not reached") and "would install linux-image-x -> 2" in \
        summary["lines"][1]
    assert summary["lines"][2] == "fleet-4: nothing to do: no update allowed, no reboot asked for"


def test_a_done_box_says_what_changed_how_long_it_took_and_was_out():
    summary = summarize({"b": {"state": "done", "batch": 2, "record": record()}}, ["b"])
    entry = summary["hosts"][0]
    assert summary["complete"] is True and summary["done"] == ["b"]
    assert (entry["took_s"], entry["out_of_service_s"]) == (35.0, 25.0)
    assert entry["line"] == ("b: maintained and back in service (batch 2); changed: driver 580.142 -> 580.159.03; "
                             "rebooted; took 35 s, out of the gateways' rotation 25 s")
    assert summary["box_short_s"] == 25.0


def test_a_lost_box_and_an_unplanned_one_leave_the_run_incomplete():
    summary = summarize({"a": {"state": "maintaining"}}, ["a", "b"])
    assert summary["complete"] is False and summary["failed"] == ["a"]
    assert summary["hosts"][1]["state"] == "not_planned"
