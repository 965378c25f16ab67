"""The role's preflight refuses thresholds the program would refuse, before anything on the
host changes (the role's tasks run against localhost, only the preflight)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: watchdog
        tasks_from: preflight
"""


def preflight(tmp_path: Path, **variables) -> subprocess.CompletedProcess:
    play = tmp_path / "play.yml"
    play.write_text(PLAY, encoding="utf-8")
    # The role uses the collection's own module and filter (file_info, files_in_state): the
    # checkout's link (`make link`) provides sparkfleet.serving.
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(ROOT / "roles"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
           "ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".ansible" / "collections")}
    return subprocess.run(["ansible-playbook", "-i", "localhost,", str(play), "-e", json.dumps(variables)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False)


@pytest.mark.parametrize(
    "variables",
    [
        {"watchdog_steady_threshold": 0.9, "watchdog_startup_threshold": 0.96, "watchdog_hard_ceiling": 0.98},
        {"watchdog_containers": [{"name": "vllm", "steady_threshold": 0.9}]},
        {"watchdog_steady_threshold": 30},
    ],
)
def test_thresholds_that_cannot_be_meant_stop_the_play(tmp_path, variables):
    done = preflight(tmp_path, **variables)
    assert done.returncode != 0
    assert "TASK [watchdog : Check the watchdog settings]" in done.stdout
    assert "expected numbers with 50 <= steady <= startup <= hard ceiling" in done.stdout, done.stdout[-3000:]


def test_the_default_thresholds_pass(tmp_path):
    done = preflight(tmp_path)
    # Past the settings check; a machine without systemd fails later, at the service check.
    assert "expected numbers with 50 <= steady" not in done.stdout
    assert "TASK [watchdog : Check the watchdog settings]" in done.stdout, done.stdout[-3000:]
    assert "TASK [watchdog : Read systemd's runtime directory" in done.stdout, done.stdout[-3000:]


def test_a_confirmation_interval_longer_than_the_fast_poll_stops_the_play(tmp_path):
    done = preflight(tmp_path, watchdog_confirm_interval_seconds=0.08)
    assert done.returncode != 0
    assert "TASK [watchdog : Check the watchdog settings]" in done.stdout
    assert "watchdog_confirm_interval_seconds between 0.001 and watchdog_poll_fast_seconds (0.08)" in done.stdout, \
        done.stdout[-3000:]


@pytest.mark.parametrize("priority", [1001, -1, 2.5, "7", True])
def test_a_priority_outside_0_to_1000_stops_the_play(tmp_path, priority):
    done = preflight(tmp_path, watchdog_containers=["vllm", {"name": "vllm-big", "priority": priority}])
    assert done.returncode != 0
    assert "TASK [watchdog : Check the watchdog settings]" in done.stdout
    assert "vllm-big: priority" in done.stdout and "expected a whole number from 0 to 1000" in done.stdout, \
        done.stdout[-3000:]


def test_priorities_in_range_pass(tmp_path):
    done = preflight(tmp_path, watchdog_containers=[{"name": "vllm", "priority": 0},
                                                    {"name": "vllm-big", "priority": 1000}, "vllm-small"])
    assert "expected a whole number from 0 to 1000" not in done.stdout
    assert "TASK [watchdog : Read systemd's runtime directory" in done.stdout, done.stdout[-3000:]
