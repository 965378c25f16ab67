"""The vllm role's records: one state directory, and the records of earlier releases moved
into it (roles/vllm/tasks/records.yml, migrate.yml) or read where they are (tasks_from: facts).

Runs the role's own task files with ansible-playbook on this machine, on files in a temporary
directory: the legacy paths (vars/main.yml, __vllm_legacy_files) are pointed there with extra
vars, which outrank role vars.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: sparkfleet.serving.vllm
        tasks_from: {entry}
    - ansible.builtin.copy:
        content: "{{{{ vllm_deployment | default({{}}) | to_json }}}}"
        dest: "{out}"
        mode: "0600"
      changed_when: false
"""
RECORD = {"format": 1, "container": "vllm", "image": "vllm/vllm-openai:v0.19.1-cu130", "argv": ["/model"]}
OLD_LAST_RUN = {"container": "vllm", "command": ["/model"], "model_dir": "/srv/models/x"}


def run(tmp: Path, entry: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    playbook = tmp / f"{entry}.yml"
    out = tmp / "published.json"
    out.unlink(missing_ok=True)
    playbook.write_text(PLAY.format(entry=entry, out=out), encoding="utf-8")
    legacy = {str(tmp / "etc/deployed.json"): str(tmp / "state/last-run.json"),
              str(tmp / "lib/deployment.json"): str(tmp / "state/known-good.json"),
              str(tmp / "lib/deployment-env.json"): str(tmp / "state/known-good-env.json")}
    variables = {"vllm_state_dir": str(tmp / "state"), "__vllm_legacy_files": legacy,
                 "ansible_python_interpreter": sys.executable}
    result = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", "-e", json.dumps(variables),
                             *extra, str(playbook)], cwd=ROOT, text=True, capture_output=True, check=False)
    return result, json.loads(out.read_text()) if out.exists() else {}


def changed(result: subprocess.CompletedProcess[str]) -> int:
    return int(re.findall(r"changed=(\d+)", result.stdout.rsplit("PLAY RECAP", 1)[-1])[0])


@pytest.fixture
def legacy(tmp_path: Path) -> Path:
    (tmp_path / "etc").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "etc/deployed.json").write_text(json.dumps(OLD_LAST_RUN))
    (tmp_path / "lib/deployment.json").write_text(json.dumps(RECORD))
    (tmp_path / "lib/deployment-env.json").write_text(json.dumps({"VLLM_API_KEY": "sk-x"}))
    return tmp_path


def test_facts_read_the_records_of_an_earlier_release_where_they_are(legacy: Path):
    result, published = run(legacy, "facts")
    assert result.returncode == 0, result.stdout[-3000:]
    assert changed(result) == 0
    assert published["known_good"] == RECORD and published["last_run"] == OLD_LAST_RUN
    assert (legacy / "lib/deployment.json").exists() and not (legacy / "state").exists()


def test_check_mode_moves_nothing(legacy: Path):
    result = run(legacy, "records", "--check")[0]
    assert result.returncode == 0, result.stdout[-3000:]
    left = sorted(p.name for p in legacy.rglob("*.json"))
    assert left == ["deployed.json", "deployment-env.json", "deployment.json"]


def test_a_deploy_moves_them_into_the_state_directory_once(legacy: Path):
    result = run(legacy, "records")[0]
    assert result.returncode == 0, result.stdout[-3000:]
    state = legacy / "state"
    assert json.loads((state / "known-good.json").read_text()) == RECORD
    assert json.loads((state / "last-run.json").read_text()) == OLD_LAST_RUN
    assert json.loads((state / "known-good-env.json").read_text()) == {"VLLM_API_KEY": "sk-x"}
    assert not list((legacy / "lib").iterdir()) and not list((legacy / "etc").iterdir())
    again, published = run(legacy, "facts")
    assert changed(again) == 0 and published["known_good"] == RECORD
    rerun = run(legacy, "records")[0]
    assert rerun.returncode == 0 and changed(rerun) == 0


def test_a_record_already_at_its_new_place_wins_over_the_old_one(legacy: Path):
    (legacy / "state").mkdir()
    newer = {**RECORD, "argv": ["/model", "--max-num-seqs", "8"]}
    (legacy / "state/known-good.json").write_text(json.dumps(newer))
    result = run(legacy, "records")[0]
    assert result.returncode == 0, result.stdout[-3000:]
    assert json.loads((legacy / "state/known-good.json").read_text()) == newer
    assert not (legacy / "lib/deployment.json").exists()


def test_the_legacy_paths_are_the_ones_earlier_releases_wrote():
    legacy = yaml.safe_load((ROOT / "roles/vllm/vars/main.yml").read_text())["__vllm_legacy_files"]
    assert set(legacy) == {"/etc/sparkfleet/vllm/deployed.json", "/var/lib/sparkfleet/vllm/deployment.json",
                           "/var/lib/sparkfleet/vllm/deployment-env.json", "/var/lib/sparkfleet/vllm/previous.json",
                           "/var/lib/sparkfleet/vllm/previous-env.json"}
