"""Helpers shared by the preflight scenario's tests (records written by converge.yml)."""

from __future__ import annotations

import difflib
import json
import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
RECORDS = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "preflight-records"
SIM = "/var/lib/sparkfleet-sim/proc"
MARKER = "/etc/sparkfleet-preflight-passed"


def name(host) -> str:
    return host.backend.get_hostname()


def outcome(host) -> list[str]:
    return (RECORDS / f"{name(host)}.outcome").read_text(encoding="utf-8").splitlines()


def snapshot_now(host) -> list[str]:
    result = host.run((HERE / "snapshot.sh").read_text(encoding="utf-8"))
    assert result.rc == 0, result.stderr
    return result.stdout.splitlines()


def snapshot_before(host) -> list[str]:
    return (RECORDS / f"{name(host)}.before").read_text(encoding="utf-8").splitlines()


def changes(host) -> list[str]:
    diff = difflib.unified_diff(snapshot_before(host), snapshot_now(host), lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def gpu_facts(host) -> dict:
    args = f"driver_version_file={SIM}/driver/nvidia/version meminfo_path={SIM}/meminfo"
    return host.ansible("sparkfleet.serving.gpu_facts", args, check=True)["ansible_facts"]["sparkfleet_gpu"]


def networks(host) -> list[str]:
    """The Docker networks the host's container is attached to (asked on the controller)."""
    inspect = subprocess.run(
        ["docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", name(host)],
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(json.loads(inspect.stdout))
