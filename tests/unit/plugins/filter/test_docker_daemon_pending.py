# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""docker_daemon_probe_script and docker_daemon_pending: the probe's lines, run for real on files
in a temporary root, and the module's no-change decision made from them."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.filter.docker import (
    docker_daemon_pending,
    docker_daemon_probe_script,
)
from ansible_collections.sparkfleet.serving.plugins.module_utils.docker_daemon_config import UNIT_DIRS
from ansible_collections.sparkfleet.serving.plugins.plugin_utils import docker_daemon_probe

SETTINGS = {"live-restore": True, "registry-mirrors": ["https://mirror.example.com"]}
HELD = {"data-root": "/var/lib/docker", **SETTINGS}
UNIT = "[Service]\nEnvironmentFile=-/etc/default/docker\nExecStart=/usr/sbin/dockerd -H fd:// $DOCKER_OPTS\n"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def probe(daemon: dict | None = None, units: dict[str, str] | None = None,
          env: dict[str, str | None] | None = None) -> str:
    lines = [] if daemon is None else [f"json\t{b64(json.dumps(daemon))}"]
    for path, text in (units if units is not None else {"/lib/systemd/system/docker.service": UNIT}).items():
        lines.append(f"unit\t{path}\t{b64(text)}")
    for path, text in (env if env is not None else {"/etc/default/docker": "# nothing set\n"}).items():
        lines.append(f"env\t{path}\t{'-' if text is None else b64(text)}")
    return "\n".join(lines)


def pending(output: str, settings: dict | None = None, remove: list | None = None) -> list[str]:
    return docker_daemon_pending(output, "/etc/docker/daemon.json", SETTINGS if settings is None else settings,
                                 remove or [])


def test_a_file_that_holds_the_settings_leaves_the_module_nothing_to_do():
    assert pending(probe(HELD)) == []


def test_a_missing_key_or_value_is_a_reason():
    assert pending(probe({"live-restore": True})) == ["/etc/docker/daemon.json lacks: registry-mirrors"]
    assert pending(probe({**HELD, "live-restore": False})) == ["/etc/docker/daemon.json lacks: live-restore"]


def test_a_key_to_remove_that_is_there_is_a_reason():
    assert pending(probe(HELD), remove=["data-root"]) == ["/etc/docker/daemon.json lacks: data-root"]


def test_a_key_the_module_warns_of_is_a_reason():
    found = pending(probe({**HELD, "brand-new-key": 1}), {**SETTINGS, "brand-new-key": 1})
    assert found and "is not a daemon.json key" in found[0]


def test_a_flag_of_the_unit_that_conflicts_is_found():
    dropin = "[Service]\nExecStart=\nExecStart=/usr/sbin/dockerd -H fd:// --registry-mirror=https://flag.example.com\n"
    units = {"/lib/systemd/system/docker.service": UNIT, "/etc/systemd/system/docker.service.d/zz.conf": dropin}
    found = pending(probe(HELD, units))
    assert found == ["'registry-mirrors' is set in daemon.json and as the dockerd flag --registry-mirror in the "
                     "service's ExecStart"]


def test_a_flag_from_the_environment_file_conflicts_too():
    found = pending(probe(HELD, env={"/etc/default/docker": 'DOCKER_OPTS="--live-restore"\n'}))
    assert found and "'live-restore'" in found[0]


def test_an_unreadable_environment_file_is_skipped_as_the_module_skips_it():
    assert pending(probe(HELD, env={"/etc/default/docker": None})) == []


def test_an_environment_file_the_probe_did_not_read_is_a_reason():
    assert pending(probe(HELD, env={})) == ["the probe did not read the environment file /etc/default/docker"]


def test_no_copy_or_an_unreadable_copy_is_a_reason():
    assert "did not copy" in pending(probe(None))[0]
    assert "not valid JSON" in pending("json\t" + b64("{,}") + "\n" + probe(units={}, env={}))[0]
    assert pending("json\t%%%") == ["the probe's copy of /etc/docker/daemon.json is not base64"]
    assert "could not read" in pending(probe(HELD) + "\nsomething else")[0]


def test_the_script_refuses_a_name_that_is_not_a_service():
    with pytest.raises(AnsibleFilterError, match="not a systemd service name"):
        docker_daemon_probe_script('docker"; rm -rf /; ".service')


@pytest.mark.skipif(shutil.which("base64") is None, reason="needs coreutils' base64")
def test_the_script_copies_what_the_module_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # The module's unit directories, moved under tmp_path: the same lines and reading, another root.
    dirs = tuple(f"{tmp_path}{directory}" for directory in UNIT_DIRS)
    monkeypatch.setattr(docker_daemon_probe, "UNIT_DIRS", dirs)
    script = docker_daemon_probe_script("docker.service")
    unit_dir = Path(dirs[3])
    dropins = Path(dirs[0]) / "docker.service.d"
    dropins.mkdir(parents=True)
    unit_dir.mkdir(parents=True)
    env_file = tmp_path / "default-docker"
    env_file.write_text('DOCKER_OPTS="--live-restore"\n')
    (unit_dir / "docker.service").write_text(UNIT.replace("/etc/default/docker", str(env_file)))
    (dropins / "10-extra.conf").write_text("[Service]\nEnvironmentFile=-/nonexistent/file\n")
    daemon = tmp_path / "daemon.json"
    daemon.write_text(json.dumps(HELD))
    done = subprocess.run(["/bin/sh", "-c", script, "probe", str(daemon)], capture_output=True, text=True, check=True)
    kinds = [line.split("\t")[0] for line in done.stdout.splitlines()]
    assert kinds.count("json") == 1 and kinds.count("unit") == 2 and kinds.count("env") == 2, done.stdout
    found = docker_daemon_pending(done.stdout, str(daemon), SETTINGS, [])
    assert found and "'live-restore'" in found[0], found
    env_file.write_text("# nothing set\n")
    done = subprocess.run(["/bin/sh", "-c", script, "probe", str(daemon)], capture_output=True, text=True, check=True)
    assert docker_daemon_pending(done.stdout, str(daemon), SETTINGS, []) == []
    # A link is not copied: the module reads (and keeps) it itself.
    daemon.rename(tmp_path / "target.json")
    daemon.symlink_to(tmp_path / "target.json")
    done = subprocess.run(["/bin/sh", "-c", script, "probe", str(daemon)], capture_output=True, text=True, check=True)
    assert "did not copy" in docker_daemon_pending(done.stdout, str(daemon), SETTINGS, [])[0]
