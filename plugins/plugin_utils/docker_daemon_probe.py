# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What sparkfleet.serving.docker_daemon_config would find on a box, read by a role's probe, and
whether that module has anything to do there.

The docker and nvidia_runtime roles merge keys into daemon.json with that module on every run.
On a re-run the file already holds them: the module reads the file and the docker unit, finds
no change, no warning and no flag conflict, and exits. Their probes (one shell call each, made
anyway) copy what the module would read: daemon.json when it is a regular file, the docker
unit and its drop-ins in the module's directories (UNIT_DIRS), and the environment files they
name. This module makes the module's no-change decision from that copy, with the module's own
functions; anything else (a change, a warning, a conflict, something the copy does not hold)
leaves the decision to the module, which then runs as before.
"""

from __future__ import annotations

import base64
import binascii
import re

from ansible_collections.sparkfleet.serving.plugins.module_utils.docker_daemon_config import (
    DAEMON_JSON_WHAT,
    UNIT_DIRS,
    DaemonJsonError,
    apply_changes,
    changed_keys,
    check_keys,
    check_values,
    effective_service,
    expand,
    find_flag_conflicts,
    json_problems,
    parse_daemon_json,
    parse_env_file,
    unit_file_order,
)
from ansible_collections.sparkfleet.serving.plugins.module_utils.inputs import InputError, decode_text

# A service name the script can hold between double quotes (systemd allows a backslash too).
_SERVICE = re.compile(r"[A-Za-z0-9:_.@-]{1,247}[.]service")


# What probe_script prints, given the daemon.json path as $1. One line per file, fields split by
# a tab: `json <base64>` (a regular file that is not a link and can be read: what the module
# reads itself otherwise), `unit <path> <base64>` for the unit and every file of its drop-in
# directories (the module lists them all; systemd reads the .conf ones), `env <path> <base64>` or
# `env <path> -` (cannot be read) for each EnvironmentFile= value, its leading "-" removed (as
# the module reads it).
def probe_script(service: str) -> str:
    """The shell lines that print what the module would read for service (the format above)."""
    if not isinstance(service, str) or not _SERVICE.fullmatch(service):
        raise ValueError(f"{service!r} is not a systemd service name such as docker.service")
    return "\n".join([
        'p=$1; tab=$(printf "\\t")',
        'if [ -f "$p" ] && [ ! -L "$p" ] && [ -r "$p" ]; then printf "json%s%s\\n" "$tab" "$(base64 -w 0 "$p")"; fi',
        f"for d in {' '.join(UNIT_DIRS)}; do",
        f'  for f in "$d/{service}" "$d/{service}.d/"*; do',
        '    [ -f "$f" ] || continue',
        '    printf "unit%s%s%s%s\\n" "$tab" "$f" "$tab" "$(base64 -w 0 "$f")"',
        "    sed -n 's/^[[:space:]]*EnvironmentFile[[:space:]]*=[[:space:]]*//p' \"$f\" | while IFS= read -r e; do",
        '      e=${e#-}',
        '      if [ -r "$e" ]; then printf "env%s%s%s%s\\n" "$tab" "$e" "$tab" "$(base64 -w 0 "$e")";',
        '      else printf "env%s%s%s-\\n" "$tab" "$e" "$tab"; fi',
        "    done",
        "  done",
        "done",
    ])


def _decode(encoded: str) -> bytes | None:
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None


def read_probe(output: str) -> tuple[str | None, list[tuple[str, str]], dict[str, str | None], list[str]]:
    """The probe's lines -> (daemon.json's base64 or None, unit files as (path, text), environment
    files {path: text, or None when unreadable}, what could not be read)."""
    copy: str | None = None
    units: list[tuple[str, str]] = []
    env: dict[str, str | None] = {}
    unread: list[str] = []
    for line in output.splitlines():
        fields = line.split("\t")
        kind = fields[0]
        if kind == "json" and len(fields) == 2:
            copy = fields[1]
        elif kind in ("unit", "env") and len(fields) == 3:
            path, encoded = fields[1], fields[2]
            data = None if kind == "env" and encoded == "-" else _decode(encoded)
            if data is None and kind == "unit":
                unread.append(f"unit file {path}")
                continue
            text = None if data is None else data.decode("utf-8", "replace")
            if kind == "unit":
                units.append((path, text or ""))
            else:
                env[path] = text
        elif line.strip():
            unread.append(f"probe line {line[:80]!r}")
    return copy, units, env, unread


def _dockerd_argv(service: str, units: list[tuple[str, str]],
                  env_files: dict[str, str | None]) -> tuple[list[str], list[str]]:
    """(dockerd's argv, environment files the probe did not read) as the module works them out."""
    texts = dict(units)
    ordered = [(path, texts[path]) for path in unit_file_order(service, texts, UNIT_DIRS)]
    exec_start, environment, files = effective_service(ordered)
    if not exec_start:
        return [], []
    env: dict[str, str] = {}
    missing = []
    for spec in files:
        path = spec.lstrip("-")
        if path not in env_files:
            missing.append(path)
        elif env_files[path] is not None:
            env.update(parse_env_file(env_files[path] or ""))
    env.update(environment)
    return expand(exec_start[-1], env), missing


def parse_copy(data: bytes, path: str) -> dict:
    """The bytes of a probe's copy of daemon.json -> as the module parses them (with its checks and
    messages: UTF-8, JSON, one object, no key twice); DaemonJsonError with the message."""
    try:
        return parse_daemon_json(decode_text(data, path, "path", DAEMON_JSON_WHAT), path)
    except InputError as err:
        raise DaemonJsonError(str(err)) from err


def _merge_findings(copy: str, path: str, settings: dict, remove: list) -> tuple[dict | None, list[str]]:
    """(daemon.json after the merge, why the module must run) from the probe's copy."""
    data = _decode(copy)
    if data is None:
        return None, [f"the probe's copy of {path} is not base64"]
    try:
        before = parse_copy(data, path)
        after = apply_changes(before, settings, remove)
    except DaemonJsonError as err:
        return None, [str(err)]
    key_problems, key_warnings = check_keys(settings)
    keys = changed_keys(before, after)
    reasons = key_problems + key_warnings + ([f"{path} lacks: {', '.join(keys)}"] if keys else [])
    return after, reasons + check_values(after, keys, before)


def pending(output: str, path: str, settings: dict, remove: list, service: str) -> list[str]:
    """Why docker_daemon_config must run on the box (empty: it would change nothing, warn of
    nothing and find no conflict with the unit's flags)."""
    copy, units, env_files, unread = read_probe(output)
    reasons = [f"the probe could not read {what}" for what in unread] + json_problems(settings, "settings")
    if copy is None:
        reasons.append(f"the probe did not copy {path} (missing, a link, or unreadable): the module reads it")
    if reasons or copy is None:
        return reasons
    after, reasons = _merge_findings(copy, path, settings, remove)
    if reasons or after is None:
        return reasons
    argv, missing = _dockerd_argv(service, units, env_files)
    if missing:
        return [f"the probe did not read the environment file {name}" for name in missing]
    return find_flag_conflicts(after, argv)
