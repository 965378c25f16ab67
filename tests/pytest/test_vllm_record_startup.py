"""The known-good record keeps how its deployment started: the health gate's `startup` (time to ready, the first
completion's TTFT, each start-up phase's seconds). Runs the role's records and record task files with
ansible-playbook on this machine, on a state directory in a temporary directory (as test_vllm_records.py does).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_vllm_records import ROOT, changed

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: sparkfleet.serving.vllm
        tasks_from: records
    - ansible.builtin.include_role:
        name: sparkfleet.serving.vllm
        tasks_from: record
      vars:
        __vllm_spec: "{{ spec }}"
        __vllm_record_env: {}
        __vllm_health_result: "{{ gate }}"
"""
SPEC = {"format": 1, "container": "vllm", "image": "vllm/vllm-openai:v0.34.0", "image_id": "", "argv": ["/model"]}
STARTUP = {"container_started_at": "2026-12-04T14:00:00.000000Z", "time_to_ready_s": 1446.0, "ttft_s": 0.412,
           "ttft_note": "", "phases_s": {"start": 5.0, "weights": 45.0, "autotune": 1375.0}, "vllm_version": "0.34.0"}


def deploy(state: Path, spec: dict, startup: dict) -> subprocess.CompletedProcess[str]:
    playbook = state.parent / "record.yml"
    playbook.write_text(PLAY, encoding="utf-8")
    variables = {"vllm_state_dir": str(state), "__vllm_legacy_files": {}, "ansible_python_interpreter": sys.executable,
                 "spec": spec, "gate": {"state": "ready", "startup": startup}}
    return subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", "-e", json.dumps(variables),
                           str(playbook)], cwd=ROOT, text=True, capture_output=True, check=False)


def record(state: Path, name: str = "known-good.json") -> dict:
    return json.loads((state / name).read_text())


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def test_a_watched_start_is_recorded_with_its_figures(state: Path):
    result = deploy(state, SPEC, STARTUP)
    assert result.returncode == 0, result.stdout[-3000:]
    kept = record(state)
    assert kept["startup"] == STARTUP
    assert kept["startup"]["time_to_ready_s"] == 1446.0 and kept["startup"]["ttft_s"] == 0.412
    assert {k: v for k, v in kept.items() if k not in ("startup", "deployed_at")} == SPEC


def test_a_rerun_that_watched_no_start_keeps_the_figures_and_changes_nothing(state: Path):
    assert deploy(state, SPEC, STARTUP).returncode == 0
    before = (state / "known-good.json").read_text()
    again = deploy(state, SPEC, {})
    assert again.returncode == 0, again.stdout[-3000:]
    assert changed(again) == 0
    assert (state / "known-good.json").read_text() == before


def test_the_same_deployment_started_anew_keeps_its_first_starts_figures(state: Path):
    # A rollback or a restart of the known-good deployment is no first start: the record stays as it is.
    assert deploy(state, SPEC, STARTUP).returncode == 0
    before = (state / "known-good.json").read_text()
    faster = {**STARTUP, "time_to_ready_s": 240.5, "phases_s": {"start": 5.0, "weights": 45.0, "autotune": 60.0}}
    result = deploy(state, SPEC, faster)
    assert result.returncode == 0, result.stdout[-3000:]
    assert changed(result) == 0
    assert (state / "known-good.json").read_text() == before


def test_a_record_of_an_earlier_release_gets_the_figures_and_no_previous(state: Path):
    state.mkdir()
    (state / "known-good.json").write_text(json.dumps({**SPEC, "deployed_at": "2026-11-30T08:00:00Z"}))
    result = deploy(state, SPEC, STARTUP)
    assert result.returncode == 0, result.stdout[-3000:]
    assert changed(result) > 0
    assert record(state)["startup"] == STARTUP
    # The known-good deployment is the same one: it does not become its own previous.
    assert not (state / "previous.json").exists()


def test_another_deployment_not_watched_starts_with_no_figures_and_the_old_one_becomes_previous(state: Path):
    assert deploy(state, SPEC, STARTUP).returncode == 0
    other = {**SPEC, "argv": ["/model", "--max-num-seqs", "8"]}
    result = deploy(state, other, {})
    assert result.returncode == 0, result.stdout[-3000:]
    assert record(state)["startup"] == {}
    assert record(state, "previous.json")["startup"] == STARTUP
