"""What the roles make of a box's vLLM deployments (the vllm role's `vllm_deployments` setting) without the boxes:
the monitoring role's scrape targets (one per deployment, its `deployment` label) and the firewall role's API ports
(`firewall_api_ports`). Renders the roles' own vars and defaults with ansible-playbook on this machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = {"all": {"children": {"spark": {"hosts": {
    # One deployment, as before: vllm_container_name on vllm_port, their defaults or set.
    "plain": {"ansible_host": "10.0.0.1"},
    "renamed": {"vllm_port": 8100, "vllm_container_name": "serve"},
    # Two deployments, each its port.
    "two": {"vllm_deployments": [{"name": "chat", "port": 8000}, {"name": "code", "port": 8001}]},
    # One item without a port: the box's vllm_port.
    "one-item": {"vllm_port": 8200, "vllm_deployments": [{"name": "only"}]},
}}}}}
PLAY = """
- name: Render the roles' settings for every box
  hosts: spark
  gather_facts: false
  vars_files:
    - {root}/roles/firewall/defaults/main.yml
    - {root}/roles/monitoring/vars/main.yml
  tasks:
    - name: Keep each box's ports (the play's vars_files are not in hostvars)
      ansible.builtin.set_fact:
        ports: "{{{{ firewall_api_ports }}}}"

    - name: Write them
      ansible.builtin.copy:
        dest: "{out}"
        content: >-
          {{{{ {{'firewall_api_ports': dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars)
                                                                  | map(attribute='ports'))),
               'monitoring_vllm_targets': __monitoring_vllm_targets}} | to_json }}}}
        mode: "0644"
      delegate_to: localhost
      run_once: true
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict:
    where = tmp_path_factory.mktemp("deployments")
    (where / "inventory.yml").write_text(yaml.safe_dump(INVENTORY, sort_keys=False), encoding="utf-8")
    out = where / "out.json"
    (where / "play.yml").write_text(PLAY.format(root=ROOT, out=out), encoding="utf-8")
    done = subprocess.run(["ansible-playbook", "-i", str(where / "inventory.yml"), "-c", "local",
                           "-e", json.dumps({"ansible_python_interpreter": sys.executable}), str(where / "play.yml")],
                          cwd=ROOT, text=True, capture_output=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return json.loads(out.read_text(encoding="utf-8"))


def test_a_scrape_target_per_deployment_with_its_name_on_every_series(rendered: dict):
    assert rendered["monitoring_vllm_targets"] == [
        {"targets": ["10.0.0.1:8000"], "labels": {"box": "plain", "deployment": "vllm"}},
        {"targets": ["renamed:8100"], "labels": {"box": "renamed", "deployment": "serve"}},
        {"targets": ["two:8000"], "labels": {"box": "two", "deployment": "chat"}},
        {"targets": ["two:8001"], "labels": {"box": "two", "deployment": "code"}},
        {"targets": ["one-item:8200"], "labels": {"box": "one-item", "deployment": "only"}},
    ]


def test_the_firewall_opens_each_deployments_port_and_a_single_deployments_as_before(rendered: dict):
    """Empty: firewall_api_port alone, the rules of a box serving one deployment as they were."""
    assert rendered["firewall_api_ports"] == {"plain": [], "renamed": [], "two": [8000, 8001], "one-item": [8200]}
