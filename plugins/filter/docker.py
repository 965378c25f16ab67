# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter of the docker roles: would merging keys into daemon.json change it?

The same merge the sparkfleet.serving.docker_daemon_config module makes (module_utils), on
the controller, so that a role that has read the file in this run skips the module call
when nothing would change.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.module_utils.docker_daemon_config import (
    DaemonJsonError,
    apply_changes,
    changed_keys,
    check_keys,
    parse_daemon_json,
)


def daemon_config_unchanged(current: object, settings: Mapping, remove: list | None = None) -> bool:
    """True when merging settings into current (daemon.json's text, '' for no file, or its parsed
    object) and removing the keys of remove would change no key, and the module would not refuse
    the settings. False when the module must run: to change the file, or to say what is wrong."""
    if not isinstance(settings, Mapping):
        raise AnsibleFilterError(f"daemon_config_unchanged: settings must be a dict, found {type(settings).__name__}")
    try:
        before = dict(current) if isinstance(current, Mapping) else parse_daemon_json(str(current or ""), "daemon.json")
        after = apply_changes(before, dict(settings), list(remove or []))
    except DaemonJsonError:
        return False
    problems, _warnings = check_keys(dict(settings))
    return not problems and not changed_keys(before, after)


class FilterModule:
    def filters(self) -> dict:
        return {"daemon_config_unchanged": daemon_config_unchanged}
