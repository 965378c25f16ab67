# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The module end to end on a temporary daemon.json, unit directory and fake dockerd."""

from __future__ import annotations

import json
import stat

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.sparkfleet.serving.plugins.modules import docker_daemon_config

SEEDED = '{\n  "data-root": "/var/lib/docker",\n  "log-opts": {"tag": "{{.Name}}"}\n}\n'
NVIDIA = {"path": "nvidia-container-runtime", "args": []}


class Exited(Exception):
    pass


class Failed(Exception):
    pass


@pytest.fixture(autouse=True)
def capture_results(monkeypatch):
    def exit_json(_module, **kwargs):
        raise Exited(kwargs)

    def fail_json(_module, **kwargs):
        raise Failed(kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)


@pytest.fixture
def units(tmp_path, monkeypatch):
    etc, lib = tmp_path / "etc-systemd", tmp_path / "lib-systemd"
    lib.mkdir()
    (lib / "docker.service").write_text(
        "[Service]\nEnvironmentFile=-/nonexistent/default/docker\nExecStart=/usr/sbin/dockerd -H fd:// $DOCKER_OPTS\n"
    )
    monkeypatch.setattr(docker_daemon_config, "UNIT_DIRS", (str(etc), str(lib)))
    return etc


def fake_dockerd(tmp_path, validate: bool, reject: str = "") -> str:
    """A dockerd stand-in: 20.10 (no --validate) or 27 (--validate, refusing a word)."""
    path = tmp_path / ("dockerd-27" if validate else "dockerd-20")
    help_text = "  --validate   Validate daemon configuration and exit" if validate else "  --version"
    path.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --help) echo "{help_text}";; '
        '--version) echo "Docker version 20.10.24+dfsg1, build 297e128";; '
        f'--validate) if grep -q "{reject or "@@never@@"}" "$3"; then '
        'echo "unable to configure the Docker daemon with file $3: bad" >&2; exit 1; fi; '
        'echo "configuration OK";; esac\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def run_module(args: dict, check: bool = False, diff: bool = False) -> dict:
    if check:
        args = {**args, "_ansible_check_mode": True}
    if diff:
        args = {**args, "_ansible_diff": True}
    with patch_module_args(args), pytest.raises((Exited, Failed)) as outcome:
        docker_daemon_config.main()
    result = outcome.value.args[0]
    result["failed"] = outcome.type is Failed
    return result


@pytest.fixture
def daemon_json(tmp_path):
    path = tmp_path / "docker" / "daemon.json"
    path.parent.mkdir()
    path.write_text(SEEDED)
    return path


def test_merges_keeps_foreign_keys_and_backs_up(daemon_json, units, tmp_path):
    settings = {"log-opts": {"max-size": "50m"}, "runtimes": {"nvidia": NVIDIA}}
    result = run_module({"path": str(daemon_json), "settings": settings, "dockerd_path": fake_dockerd(tmp_path, False)})
    assert not result["failed"], result
    assert result["changed"]
    assert result["changed_keys"] == ["log-opts", "runtimes"]
    assert result["restart_needed"] and not result["reload_sufficient"]
    written = json.loads(daemon_json.read_text())
    assert written == {
        "data-root": "/var/lib/docker",
        "log-opts": {"tag": "{{.Name}}", "max-size": "50m"},
        "runtimes": {"nvidia": NVIDIA},
    }
    with open(result["backup_file"], encoding="utf-8") as backup:
        assert backup.read() == SEEDED
    assert "dockerd 20.10.24+dfsg1 has no --validate" in result["validation"]
    assert not result["validated"]


def test_second_run_changes_nothing(daemon_json, units, tmp_path):
    args = {"path": str(daemon_json), "settings": {"registry-mirrors": ["https://m.example"]}, "validate": False}
    first = run_module(args)
    assert first["changed"] and first["reload_sufficient"] and not first["restart_needed"]
    content = daemon_json.read_bytes()
    second = run_module(args)
    assert not second["changed"] and not second["reload_sufficient"] and not second["restart_needed"]
    assert daemon_json.read_bytes() == content


def test_check_mode_writes_nothing_and_shows_a_json_diff(daemon_json, units, tmp_path):
    args = {"path": str(daemon_json), "settings": {"live-restore": True}, "validate": False}
    result = run_module(args, check=True, diff=True)
    assert result["changed"]
    assert daemon_json.read_text() == SEEDED
    assert '"live-restore": true' in result["diff"]["after"]
    assert '"live-restore"' not in result["diff"]["before"]
    assert result["diff"]["before_header"].startswith(str(daemon_json))


def test_missing_file_is_created_with_mode_0644(tmp_path, units):
    path = tmp_path / "new" / "daemon.json"
    result = run_module({"path": str(path), "settings": {"live-restore": True}, "validate": False})
    assert result["changed"] and "backup_file" not in result
    assert json.loads(path.read_text()) == {"live-restore": True}
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_read_only_call_reports_the_config(daemon_json, units):
    result = run_module({"path": str(daemon_json)})
    assert not result["changed"]
    assert result["config"]["data-root"] == "/var/lib/docker"


def test_malformed_file_fails_with_file_and_error_and_is_untouched(daemon_json, units):
    broken = b'{\n  "data-root": "/var/lib/docker",\n  "live-restore": true,\n}\n'
    daemon_json.write_bytes(broken)
    result = run_module({"path": str(daemon_json), "settings": {"live-restore": True}})
    assert result["failed"]
    assert str(daemon_json) in result["msg"]
    assert "line 4 column 1" in result["msg"]
    assert daemon_json.read_bytes() == broken
    assert list(daemon_json.parent.iterdir()) == [daemon_json]


def test_flag_in_a_drop_in_conflicts(daemon_json, units):
    (units / "docker.service.d").mkdir(parents=True)
    (units / "docker.service.d" / "override.conf").write_text(
        "[Service]\nExecStart=\nExecStart=/usr/sbin/dockerd -H fd:// --registry-mirror=https://flag.example\n"
    )
    result = run_module({"path": str(daemon_json), "settings": {"registry-mirrors": ["https://m.example"]}})
    assert result["failed"]
    assert "'registry-mirrors' is set in daemon.json and as the dockerd flag --registry-mirror" in result["msg"]
    assert daemon_json.read_text() == SEEDED


def test_conflict_check_can_be_turned_off(daemon_json, units):
    (units / "docker.service.d").mkdir(parents=True)
    (units / "docker.service.d" / "override.conf").write_text("[Service]\nExecStart=\nExecStart=/x/dockerd --debug\n")
    args = {"path": str(daemon_json), "settings": {"debug": True}, "validate": False}
    assert run_module(args)["failed"]
    assert run_module({**args, "check_flag_conflicts": False})["changed"]


def test_dockerd_validate_rejection_leaves_the_file(daemon_json, units, tmp_path):
    dockerd = fake_dockerd(tmp_path, True, reject="bogus-key")
    result = run_module({"path": str(daemon_json), "settings": {"bogus-key": 1}, "dockerd_path": dockerd})
    assert result["failed"]
    assert "dockerd refuses the resulting" in result["msg"] and "bad" in result["msg"]
    assert daemon_json.read_text() == SEEDED


def test_dockerd_validate_acceptance_is_reported(daemon_json, units, tmp_path):
    dockerd = fake_dockerd(tmp_path, True)
    result = run_module({"path": str(daemon_json), "settings": {"debug": True}, "dockerd_path": dockerd})
    assert result["validated"] and "dockerd --validate accepted" in result["validation"]


def test_bad_mirror_is_refused_before_writing(daemon_json, units):
    result = run_module({"path": str(daemon_json), "settings": {"registry-mirrors": ["https://m.example/v2"]}})
    assert result["failed"] and "host only" in result["msg"]
    assert daemon_json.read_text() == SEEDED
