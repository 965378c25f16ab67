# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""docker_daemon_json, fed the docker role probe's base64 copy of daemon.json, must read the file as
sparkfleet.serving.docker_daemon_config reads it on the box: the same configuration, or a refusal with
the same message. Each case runs both on the same bytes."""

from __future__ import annotations

import base64

import pytest
from ansible.errors import AnsibleFilterError
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.sparkfleet.serving.plugins.filter.docker import docker_daemon_json
from ansible_collections.sparkfleet.serving.plugins.modules import docker_daemon_config

CASES = {
    "usable": b'{\n  "log-driver": "local",\n  "log-opts": {"max-size": "10m"},\n  "debug": false\n}\n',
    "numbers as written": b'{"max-concurrent-downloads": 3, "shutdown-timeout": 1.10, "x-big": 1e400}',
    "not JSON": b'{"live-restore": true,,}',
    "a key twice": b'{"debug": true, "debug": false}',
    "a key twice, nested": b'{"log-opts": {"max-size": "1m", "max-size": "2m"}}',
    "NaN": b'{"x-ratio": NaN}',
    "not an object": b"[1, 2]",
    "a number": b"42",
    "not UTF-8": b'{"data-root": "/srv/d\xe9ocker"}',
    "a byte-order mark": b'\xef\xbb\xbf{"debug": true}',
    "deeply nested": b'{"a": ' * 5000 + b"1" + b"}" * 5000,
}


class Exited(Exception):
    pass


class Failed(Exception):
    pass


def read_with_module(monkeypatch: pytest.MonkeyPatch, path: str) -> dict:
    """What the module returns when it only reads (the docker role's fallback task): config or msg."""

    def exit_json(_module: object, **kwargs: object) -> None:
        raise Exited(kwargs)

    def fail_json(_module: object, **kwargs: object) -> None:
        raise Failed(kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    with patch_module_args({"path": path, "check_flag_conflicts": False}), pytest.raises((Exited, Failed)) as caught:
        docker_daemon_config.main()
    result = caught.value.args[0]
    return {"error": result["msg"]} if isinstance(caught.value, Failed) else {"config": result["config"]}


@pytest.mark.parametrize("name", sorted(CASES))
def test_reads_the_probe_copy_as_the_module_reads_the_file(name, tmp_path, monkeypatch):
    path = tmp_path / "daemon.json"
    path.write_bytes(CASES[name])
    copied = base64.b64encode(CASES[name]).decode()
    assert docker_daemon_json(copied, str(path)) == read_with_module(monkeypatch, str(path))


def test_a_usable_file_gives_its_keys():
    copied = base64.b64encode(CASES["usable"]).decode()
    config = docker_daemon_json(copied, "/etc/docker/daemon.json")["config"]
    assert config == {"log-driver": "local", "log-opts": {"max-size": "10m"}, "debug": False}


def test_a_refused_file_names_the_file_and_the_fault():
    copied = base64.b64encode(CASES["not JSON"]).decode()
    error = docker_daemon_json(copied, "/etc/docker/daemon.json")["error"]
    assert error.startswith("/etc/docker/daemon.json is not valid JSON: Expecting property name")


@pytest.mark.parametrize("value", ["not base64!", 42, None])
def test_a_garbled_copy_is_an_error_not_an_empty_file(value):
    with pytest.raises(AnsibleFilterError):
        docker_daemon_json(value, "/etc/docker/daemon.json")
