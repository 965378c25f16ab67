"""The docker_runtime scenario's tests run converge.yml again with other input."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from spark_testinfra import run_playbook

CONVERGE = Path(__file__).resolve().parents[1] / "converge.yml"


def run_converge(host: str, extra_vars: dict | None = None) -> subprocess.CompletedProcess:
    """ansible-playbook converge.yml on one host, as Molecule runs it."""
    return run_playbook(CONVERGE, extra_vars, limit=host)


@pytest.fixture
def converge():
    return run_converge
