# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the docker and nvidia_runtime roles: daemon.json as a probe copied it -> the configuration, or
why it is unusable; the probe's lines that copy what sparkfleet.serving.docker_daemon_config reads, and
whether that module has anything to do on the box they were read on."""

from __future__ import annotations

import base64
import binascii
import json

from ansible.errors import AnsibleFilterError

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).


def docker_daemon_json(encoded: object, path: object) -> dict:
    """Base64 of daemon.json's bytes -> {"config": ...} as sparkfleet.serving.docker_daemon_config reads
    it, or {"error": ...} with that module's message (the same checks: UTF-8, JSON, one object, no key twice)."""
    from ansible_collections.sparkfleet.serving.plugins.module_utils.docker_daemon_config import DaemonJsonError, plain
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.docker_daemon_probe import parse_copy

    if not isinstance(encoded, str) or not isinstance(path, str):
        raise AnsibleFilterError("docker_daemon_json: expected the file's bytes as base64 text and its path")
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise AnsibleFilterError(f"docker_daemon_json: the probe's copy of {path} is not base64: {exc}") from exc
    try:
        return {"config": plain(parse_copy(data, path))}
    except DaemonJsonError as exc:
        return {"error": str(exc)}


def docker_daemon_probe_script(service: object) -> str:
    """A docker service's name -> the shell lines a probe runs (with daemon.json's path as $1)."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.docker_daemon_probe import probe_script

    try:
        return probe_script(service)  # type: ignore[arg-type]
    except ValueError as exc:
        raise AnsibleFilterError(f"docker_daemon_probe_script: {exc}") from exc


def docker_daemon_pending(output: object, path: object, settings: object, remove: object = (),
                          service: object = "docker.service") -> list[str]:
    """The probe's output -> why docker_daemon_config must run with these settings (empty: it would
    find nothing to change, nothing to warn of and no flag of the unit that conflicts)."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.docker_daemon_probe import pending

    if not (isinstance(output, str) and isinstance(path, str) and isinstance(settings, dict)
            and isinstance(remove, (list, tuple)) and isinstance(service, str)):
        raise AnsibleFilterError(
            "docker_daemon_pending expects the probe's output (text), daemon.json's path, the settings (dict), "
            "the keys to remove (list) and the service name"
        )
    # Plain copies: the module's merge deep-copies its input, which for the templating engine's
    # lazy containers templates every value again (measured: 0.3-0.5 s a call instead of 1 ms).
    try:
        settings, remove = json.loads(json.dumps(settings)), json.loads(json.dumps(list(remove)))
    except (TypeError, ValueError) as exc:
        return [f"settings cannot be written as JSON: {exc}"]
    return pending(output, path, settings, remove, service)


class FilterModule:
    def filters(self) -> dict:
        return {
            "docker_daemon_json": docker_daemon_json,
            "docker_daemon_probe_script": docker_daemon_probe_script,
            "docker_daemon_pending": docker_daemon_pending,
        }
