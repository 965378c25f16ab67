"""Helpers for the docker_runtime scenario's tests: run the converge playbook again."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

SCENARIO = Path(__file__).resolve().parents[1]


def run_converge(host: str, extra_vars: dict | None = None) -> subprocess.CompletedProcess:
    """ansible-playbook converge.yml on one host, as Molecule runs it (its env and inventory)."""
    # One JSON line per result: error messages are not wrapped as in the YAML format.
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}
    command = ["ansible-playbook", "--limit", host, str(SCENARIO / "converge.yml")]
    if "MOLECULE_INVENTORY_FILE" in env:
        command[1:1] = ["--inventory", str(Path(env["MOLECULE_INVENTORY_FILE"]).parent)]
    if extra_vars:
        command[1:1] = ["--extra-vars", json.dumps(extra_vars)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)


@pytest.fixture
def converge():
    return run_converge
