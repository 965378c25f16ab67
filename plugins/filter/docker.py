# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter of the docker role: daemon.json as its probe copied it -> the configuration, or why it is unusable."""

from __future__ import annotations

import base64
import binascii

from ansible.errors import AnsibleFilterError

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).


def docker_daemon_json(encoded: object, path: object) -> dict:
    """Base64 of daemon.json's bytes -> {"config": ...} as sparkfleet.serving.docker_daemon_config reads
    it, or {"error": ...} with that module's message (the same checks: UTF-8, JSON, one object, no key twice)."""
    from ansible_collections.sparkfleet.serving.plugins.module_utils.docker_daemon_config import (
        DAEMON_JSON_WHAT,
        DaemonJsonError,
        parse_daemon_json,
        plain,
    )
    from ansible_collections.sparkfleet.serving.plugins.module_utils.inputs import InputError, decode_text

    if not isinstance(encoded, str) or not isinstance(path, str):
        raise AnsibleFilterError("docker_daemon_json: expected the file's bytes as base64 text and its path")
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise AnsibleFilterError(f"docker_daemon_json: the probe's copy of {path} is not base64: {exc}") from exc
    try:
        return {"config": plain(parse_daemon_json(decode_text(data, path, "path", DAEMON_JSON_WHAT), path))}
    except (InputError, DaemonJsonError) as exc:
        return {"error": str(exc)}


class FilterModule:
    def filters(self) -> dict:
        return {"docker_daemon_json": docker_daemon_json}
