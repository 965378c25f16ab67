# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU clock caps: the setting's checks, and the caps a box applied compared with the setting."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from ansible_collections.sparkfleet.serving.plugins.filter.gpu_clocks import FilterModule
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.gpu_clocks import (
    applied,
    clock_caps,
    highest_clock,
    limit_errors,
    wanted,
)
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.probe import parse_sections

GB10 = "0000000F:01:00.0"
ACTIVE = "LoadState=loaded\nActiveState=active\nSubState=exited\n"
SET_LOG = (
    "Starting sparkfleet-gpu-clocks.service - Cap the GPU clocks...\n"
    f'GPU clocks set to "(gpuClkMin 600, gpuClkMax 1800)" for GPU {GB10}\n'
    "All done.\n"
    "Finished sparkfleet-gpu-clocks.service - Cap the GPU clocks.\n"
)
WANT = {"min_mhz": 600, "max_mhz": 1800}


@pytest.mark.parametrize("setting", [None, "", {}, {"min_mhz": None, "max_mhz": None}])
def test_empty_leaves_the_clocks_alone(setting):
    assert limit_errors(setting) == []
    assert wanted(setting) == {}


def test_a_right_setting_and_strings_of_digits():
    assert limit_errors(WANT) == []
    assert wanted({"min_mhz": "600", "max_mhz": " 1800"}) == WANT


@pytest.mark.parametrize(("setting", "words"), [
    ({"min_mhz": 1800, "max_mhz": 600}, "min_mhz=1800 is above max_mhz=600"),
    ({"min_mhz": 600.5, "max_mhz": 1800}, "min_mhz=600.5 is not a whole number"),
    ({"min_mhz": "fast", "max_mhz": 1800}, "is not a whole number"),
    ({"min_mhz": True, "max_mhz": 1800}, "is not a whole number"),
    ({"min_mhz": -5, "max_mhz": 1800}, "is not a whole number"),
    ({"max_mhz": 1800}, "min_mhz is missing"),
    ({"min_mhz": 0, "max_mhz": 0}, "at least 1 MHz"),
    ({"min_mhz": 600, "max_mhz": 1800, "mem_mhz": 1}, "unknown key(s) mem_mhz"),
    ("600,1800", "is not a mapping"),
])
def test_wrong_settings_are_explained(setting, words):
    errors = limit_errors(setting)
    assert any(words in error for error in errors), errors
    assert wanted(setting) == {}


def test_the_gpus_highest_clock_bounds_the_maximum_when_known():
    assert limit_errors(WANT, 1980) == []
    [error] = limit_errors({"min_mhz": 600, "max_mhz": 2100}, 1980)
    assert "above this GPU's highest graphics clock, 1980 MHz" in error
    assert limit_errors({"min_mhz": 600, "max_mhz": 2100}, None) == []


@pytest.mark.parametrize(("output", "highest"), [("1980\n", 1980), ("[N/A]\n", None), ("", None),
                                                 ("2100\n1980\n", 1980)])
def test_highest_clock(output, highest):
    assert highest_clock(output) == highest


def test_applied_reads_the_drivers_answers():
    assert applied(SET_LOG) == ([{"gpu": GB10, "min_mhz": 600, "max_mhz": 1800}], [])
    log = ("Setting locked GPU clocks is not supported for GPU 00000000:05:00.0.\n"
           "Treating as warning and moving on.\nAll done.\n")
    assert applied(log) == ([], ["Setting locked GPU clocks is not supported for GPU 00000000:05:00.0"])


def test_caps_in_force_as_set():
    caps = clock_caps(WANT, ACTIVE, SET_LOG)
    assert caps["differs"] == ""
    assert (caps["wanted_text"], caps["applied_text"], caps["unit"]) == ("600-1800 MHz", "600-1800 MHz", "active")


def test_the_last_answer_counts_after_a_restart_of_the_unit():
    log = SET_LOG.replace("600, gpuClkMax 1800", "300, gpuClkMax 900") + SET_LOG
    assert clock_caps(WANT, ACTIVE, log)["differs"] == ""


def test_caps_the_driver_lowered_differ():
    log = SET_LOG.replace("gpuClkMax 1800", "gpuClkMax 1500")
    assert clock_caps(WANT, ACTIVE, log)["differs"] == (
        f"GPU {GB10} runs with 600-1500 MHz, the setting asks 600-1800 MHz")


def test_a_reboot_without_the_unit_is_flagged():
    caps = clock_caps(WANT, "LoadState=not-found\nActiveState=inactive\n", "")
    assert caps["unit"] == "not installed" and caps["applied_text"] == "none"
    assert "is not installed: nothing caps the clocks at boot (600-1800 MHz wanted)" in caps["differs"]


@pytest.mark.parametrize("state", ["failed", "inactive"])
def test_a_unit_that_did_not_run_since_boot_applied_nothing(state):
    caps = clock_caps(WANT, f"LoadState=loaded\nActiveState={state}\n", SET_LOG)
    assert caps["applied"] == [] and caps["applied_text"] == "none since boot"
    assert f"is {state}: the caps were not applied since the box started" in caps["differs"]


def test_an_active_unit_without_the_drivers_word_is_flagged():
    log = "Setting locked GPU clocks is not supported for GPU 0000000F:01:00.0.\nAll done.\n"
    caps = clock_caps(WANT, ACTIVE, log)
    assert caps["applied_text"] == "none (Setting locked GPU clocks is not supported for GPU 0000000F:01:00.0)"
    assert caps["differs"].startswith("the driver did not confirm the caps")


def test_no_setting_and_no_unit_says_nothing():
    caps = clock_caps({}, "LoadState=not-found\nActiveState=inactive\n", "")
    assert (caps["differs"], caps["wanted_text"], caps["unit"]) == ("", "leave alone", "not installed")


def test_no_setting_and_a_unit_left_is_flagged():
    assert "though the setting leaves the clocks alone" in clock_caps({}, ACTIVE, SET_LOG)["differs"]


def test_a_box_that_could_not_be_read():
    caps = clock_caps(WANT, "", "", unit_read=False)
    assert caps["unit"] == "unknown" and caps["applied_text"] == "unknown"
    assert caps["differs"].endswith("could not be read")
    assert clock_caps({}, "", "", unit_read=False)["differs"] == ""


def test_the_filters():
    filters = FilterModule().filters()
    sections = {"gpu_clocks_unit": {"rc": 0, "output": ACTIVE}, "gpu_clocks_log": {"rc": 0, "output": SET_LOG}}
    assert filters["gpu_clock_caps"](sections, WANT)["differs"] == ""
    # A journal that could not be read confirms nothing.
    sections["gpu_clocks_log"]["rc"] = 1
    assert filters["gpu_clock_caps"](sections, WANT)["differs"].startswith("the driver did not confirm")
    assert filters["gpu_clock_limit_errors"]({"min_mhz": 1, "max_mhz": 2500}, "1980\n")
    assert filters["gpu_clock_limit_errors"]({"min_mhz": 1, "max_mhz": 2500}, "[N/A]\n") == []


# --- the role's probe (roles/nvidia_runtime/vars/main.yml), run by a real /bin/sh against a fake systemd ---

ROOT = Path(__file__).resolve().parents[4]
FAKE_SYSTEMCTL = """#!/bin/sh
case "$*" in
  *--property=InactiveExitTimestamp*) [ "$FAKE_STATE" = not-found ] || echo @1764879000 ;;
  *) if [ "$FAKE_STATE" = not-found ]; then printf 'LoadState=not-found\\nActiveState=inactive\\n'
     else printf 'LoadState=loaded\\nActiveState=%s\\nSubState=exited\\nUnitFileState=enabled\\n' "$FAKE_STATE"; fi ;;
esac
"""
# Prints its arguments, so that the test sees what the probe asked, and the driver's answer.
FAKE_JOURNALCTL = f"""#!/bin/sh
echo "journalctl $*"
printf '%s\\n' '{SET_LOG.splitlines()[1]}'
"""


def run_probe(tmp_path: Path, state: str) -> dict:
    script = yaml.safe_load((ROOT / "roles/nvidia_runtime/vars/main.yml").read_text())["__nvidia_runtime_clocks_probe"]
    script = script.replace("{{ __nvidia_runtime_gpu_clocks_unit }}", "sparkfleet-gpu-clocks.service")
    for name, text in (("systemctl", FAKE_SYSTEMCTL), ("journalctl", FAKE_JOURNALCTL)):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=True,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin", "FAKE_STATE": state})
    return parse_sections(done.stdout, ["gpu_clocks_unit", "gpu_clocks_log"])


def test_the_probe_reads_the_journal_since_the_units_last_start(tmp_path):
    sections = run_probe(tmp_path, "active")
    assert sections["gpu_clocks_log"]["lines"][0] == (
        "journalctl --no-pager --output=cat --unit=sparkfleet-gpu-clocks.service --since=@1764879000")
    assert FilterModule().filters()["gpu_clock_caps"](sections, WANT)["applied_text"] == "600-1800 MHz"


def test_the_probe_of_a_box_without_the_unit_asks_no_journal(tmp_path):
    sections = run_probe(tmp_path, "not-found")
    assert sections["gpu_clocks_log"]["output"] == ""
    caps = FilterModule().filters()["gpu_clock_caps"](sections, WANT)
    assert caps["unit"] == "not installed" and "is not installed" in caps["differs"]
