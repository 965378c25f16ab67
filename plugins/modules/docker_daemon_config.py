#!/usr/bin/python
# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: docker_daemon_config
short_description: Manage keys of Docker's daemon.json without taking over the file
version_added: 0.1.0
author: sparkfleet maintainers (@sparkfleet)
description:
  - Sets and removes keys of C(/etc/docker/daemon.json) and keeps every other key as it is,
    so that the distribution, C(nvidia-ctk runtime configure) and the operator can all own
    parts of the file.
  - Objects are merged key by key (for example C(runtimes) and C(log-opts)); lists and
    scalars given in O(settings) replace the current value.
  - Refuses to touch a file that is not a JSON object (the error names the file and the
    parse error; the file is left byte for byte as it was).
  - Validates the result with C(dockerd --validate --config-file) when the installed engine
    has that option (Docker 23.0 and later) before putting it in place; older engines
    (for example Debian 12's docker.io 20.10) get the module's own checks of the values it
    knows, and the result says that C(dockerd) could not validate.
  - Fails when a key of the result is also given as a C(dockerd) flag in the service's
    systemd unit or drop-ins (C(dockerd) refuses to start with an option set in both places).
  - Refuses keys of O(settings) that look like mistakes, naming the key meant - a dockerd flag
    name such as C(registry-mirror) (dockerd ignores it in the file), a dotted key such as
    C(log-opts.max-size) (daemon.json nests objects), a near miss of a known key - and values of
    known keys of the wrong type (a number in C(log-opts), a string for C(live-restore)). The known
    keys are those of moby v20.10.24 and docker-v29.7.2; another unknown key is a warning.
  - Writes strict JSON only (no NaN or Infinity; the module refuses such a value). Keys it does
    not change are written back exactly as they were, numbers too large for a float and
    non-ASCII text included. A file that is not UTF-8 or not JSON is refused and left as it is.
  - Writes atomically (temporary file and rename) with an optional backup of the previous file.
  - Reports whether Docker must be restarted for the change or whether a reload
    (SIGHUP, C(systemctl reload docker)) applies it without touching running containers.
  - With no O(settings) and no O(remove) it only reads and checks the file (RV(config)).
attributes:
  check_mode:
    support: full
    description: Computes the result, validates it and reports the diff; writes nothing.
  diff_mode:
    support: full
    description: Shows the file before and after as indented JSON.
options:
  path:
    description:
      - The daemon configuration file.
      - When it is a symbolic link, the link is followed and its target is read and
        written (as editors do); the link itself stays in place.
    type: path
    default: /etc/docker/daemon.json
  settings:
    description:
      - Keys to set, as they appear in daemon.json. Objects are merged into the current
        objects; any other value replaces the current one.
    type: dict
    default: {}
  remove:
    description:
      - Keys to remove. A dotted path reaches into objects, for example C(runtimes.nvidia).
      - Removal happens after O(settings) are merged.
    type: list
    elements: str
    default: []
  backup:
    description: Keep a timestamped copy of the previous file next to it when it changes.
    type: bool
    default: true
  validate:
    description:
      - Run C(dockerd --validate --config-file) on the result before it is put in place, when
        the installed C(dockerd) supports it.
    type: bool
    default: true
  dockerd_path:
    description: The dockerd binary used for validation; looked up in C(PATH) and C(/usr/sbin) when not given.
    type: path
  service:
    description:
      - The systemd service whose unit and drop-ins are read for dockerd flags.
      - A unit name ending in C(.service) (letters, digits and C(:-_.\\@)); anything else is refused.
    type: str
    default: docker.service
  check_flag_conflicts:
    description: Fail when a key of the result is also set as a dockerd flag in the service's ExecStart.
    type: bool
    default: true
notes:
  - The systemd unit is read from the unit directories on disk (C(/etc/systemd/system),
    C(/run/systemd/system), C(/lib/systemd/system), ...) with their C(.d/*.conf) drop-ins, so
    a drop-in that is not yet loaded (no C(systemctl daemon-reload)) is seen too.
    C($VARIABLES) in ExecStart are expanded from C(Environment=) and C(EnvironmentFile=).
  - Removing a key, even one Docker reloads, needs a restart to take effect (Docker's reload
    only applies values that are set).
seealso:
  - name: dockerd reference, daemon configuration file and reload behaviour
    description: Which keys exist and which of them Docker applies on SIGHUP.
    link: https://docs.docker.com/reference/cli/dockerd/#daemon-configuration-file
"""

EXAMPLES = r"""
- name: Registry mirror and live restore, keeping every other key
  sparkfleet.serving.docker_daemon_config:
    settings:
      registry-mirrors:
        - https://mirror.example.com
      live-restore: true
  register: docker_config

- name: Register the NVIDIA runtime as nvidia-ctk writes it
  sparkfleet.serving.docker_daemon_config:
    settings:
      runtimes:
        nvidia:
          path: nvidia-container-runtime
          args: []

- name: Remove a runtime and a key
  sparkfleet.serving.docker_daemon_config:
    remove:
      - runtimes.old-runtime
      - debug

- name: Read and check the file only
  sparkfleet.serving.docker_daemon_config:
  register: docker_current
"""

RETURN = r"""
path:
  description: The file read and written (the target, when O(path) is a symbolic link).
  returned: always
  type: str
  sample: /etc/docker/daemon.json
config:
  description:
    - The configuration after the change (or as it is, when nothing changes).
    - A number no float can hold (for example C(1e400)) is returned as its text; the file keeps it as written.
  returned: always
  type: dict
  sample: {"live-restore": true, "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}
changed_keys:
  description: Top-level keys that were added, changed or removed.
  returned: always
  type: list
  elements: str
  sample: ["registry-mirrors"]
restart_needed:
  description: The change takes effect only after Docker is restarted.
  returned: always
  type: bool
reload_sufficient:
  description: The change takes effect on a reload (SIGHUP); running containers are not touched.
  returned: always
  type: bool
validation:
  description: How the result was validated, or why C(dockerd) could not validate it.
  returned: always
  type: str
  sample: "skipped: dockerd 20.10.24 has no --validate (Docker 23.0 and later); the module's own value checks passed"
validated:
  description: C(dockerd --validate) accepted the result.
  returned: always
  type: bool
backup_file:
  description: The copy of the previous file.
  returned: when a backup was made
  type: str
  sample: /etc/docker/daemon.json.2342.2026-11-29@23:59:59~
"""

import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule

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
    plain,
    reload_sufficient,
    render,
    unit_file_order,
)
from ansible_collections.sparkfleet.serving.plugins.module_utils.inputs import InputError, read_text_file

# systemd unit names: letters, digits and ":-_.\\@", at most 255 characters (systemd.unit(5)).
_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.\\@-]{1,247}\.service")


def read_text(path: str) -> str | None:
    """A unit or environment file's text (None when unreadable: systemd would skip it too)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def read_daemon_json(path: str) -> str | None:
    """daemon.json's text, None when it does not exist; InputError for anything unusable."""
    return read_text_file(path, "path", DAEMON_JSON_WHAT)


def target_path(path: str) -> str:
    """The file to read and write: a symlinked daemon.json is followed to its target, as editors do,
    so the link stays a link (replacing it by a file would cut off whatever manages the target)."""
    return os.path.realpath(path) if os.path.islink(path) else path


def check_writable_location(path: str) -> None:
    """The nearest existing ancestor of path must be a directory (not a file)."""
    directory = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(directory):
        directory = os.path.dirname(directory)
    if not os.path.isdir(directory):
        raise InputError(f"path {path}: {directory} is a file, not a directory; expected a file path")


def check_options(module: AnsibleModule) -> None:
    service = module.params["service"]
    if not _UNIT_NAME.fullmatch(service):
        raise InputError(
            f"service {service!r} is not a systemd service name; expected a unit name such as docker.service "
            "(letters, digits and :-_.\\@, ending in .service)"
        )
    dockerd = module.params["dockerd_path"]
    if dockerd and not (os.path.isfile(dockerd) and os.access(dockerd, os.X_OK)):
        raise InputError(f"dockerd_path {dockerd} is not an executable file; expected the dockerd binary")
    problems = json_problems(module.params["settings"], "settings")
    if problems:
        raise InputError("settings cannot be written as JSON: " + "; ".join(problems))


def unit_files(service: str) -> list[tuple[str, str]]:
    existing = []
    for directory in UNIT_DIRS:
        existing.append(os.path.join(directory, service))
        dropin_dir = os.path.join(directory, f"{service}.d")
        if os.path.isdir(dropin_dir):
            try:
                existing.extend(os.path.join(dropin_dir, name) for name in os.listdir(dropin_dir))
            except OSError:
                continue
    found = [path for path in existing if os.path.isfile(path)]
    return [(path, read_text(path) or "") for path in unit_file_order(service, found, UNIT_DIRS)]


def dockerd_argv(service: str) -> list[str]:
    exec_start, environment, env_files = effective_service(unit_files(service))
    if not exec_start:
        return []
    env = {}
    for spec in env_files:
        text = read_text(spec.lstrip("-"))
        if text is not None:
            env.update(parse_env_file(text))
    env.update(environment)
    return expand(exec_start[-1], env)


def validate_with_dockerd(module: AnsibleModule, text: str) -> tuple[bool, str]:
    """(validated, how): run dockerd --validate on text when dockerd has that option."""
    dockerd = module.params["dockerd_path"] or module.get_bin_path("dockerd", opt_dirs=["/usr/sbin", "/usr/bin"])
    if not dockerd:
        return False, "skipped: no dockerd found to validate with; the module's own value checks passed"
    rc, out, err = module.run_command([dockerd, "--help"])
    if "--validate" not in out + err:
        rc, out, err = module.run_command([dockerd, "--version"])
        found = re.search(r"version (\S+?),?\s", out)
        version = found.group(1) if found else "(unknown version)"
        return False, (
            f"skipped: dockerd {version} has no --validate (Docker 23.0 and later have it); "
            "the module's own value checks passed"
        )
    handle, candidate = tempfile.mkstemp(prefix="daemon.json.", suffix=".candidate", dir=module.tmpdir)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out_file:
            out_file.write(text)
        rc, out, err = module.run_command([dockerd, "--validate", "--config-file", candidate])
    finally:
        os.unlink(candidate)
    if rc != 0:
        module.fail_json(
            msg=f"dockerd refuses the resulting {module.params['path']}: {(err or out).strip()}. "
            "Nothing was written; correct the settings given to the module.",
            rejected_config=text,
        )
    return True, f"dockerd --validate accepted the result ({dockerd})"


def write_atomically(module: AnsibleModule, path: str, text: str, existed: bool) -> str | None:
    """Put text at path by rename (never a half-written file); return the backup path."""
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o755)
    backup = module.backup_local(path) if existed and module.params["backup"] else None
    handle, staged = tempfile.mkstemp(prefix=".daemon.json.", dir=directory)
    with os.fdopen(handle, "w", encoding="utf-8") as out_file:
        out_file.write(text)
        out_file.flush()
        os.fsync(out_file.fileno())
    if not existed:
        os.chmod(staged, 0o644)
    module.atomic_move(staged, path)
    return backup


def run(module: AnsibleModule) -> dict:  # noqa: PLR0912 - the steps read in order
    given = module.params["path"]
    path = target_path(given)
    check_options(module)
    check_writable_location(path)
    original = read_daemon_json(path)
    try:
        before = parse_daemon_json(original or "", path)
        after = apply_changes(before, module.params["settings"], module.params["remove"])
    except DaemonJsonError as err:
        raise InputError(str(err)) from err
    key_problems, key_warnings = check_keys(module.params["settings"])
    if key_problems:
        raise InputError(f"refusing to write {path}: " + "; ".join(key_problems))
    for warning in key_warnings:
        module.warn(warning)
    keys = changed_keys(before, after)
    result: dict = {
        "changed": bool(keys),
        "path": path,
        "config": plain(after),
        "changed_keys": keys,
        "restart_needed": bool(keys) and not reload_sufficient(before, after),
        "reload_sufficient": bool(keys) and reload_sufficient(before, after),
        "validated": False,
        "validation": "nothing to validate: no change",
    }
    problems = check_values(after, keys, before)
    if problems:
        module.fail_json(msg=f"refusing to write {path}: " + "; ".join(problems), path=path, problems=problems)
    if module.params["check_flag_conflicts"]:
        conflicts = find_flag_conflicts(after, dockerd_argv(module.params["service"]))
        if conflicts:
            module.fail_json(
                msg=f"{path} and the {module.params['service']} unit set the same option; dockerd would refuse to "
                f"start: {'; '.join(conflicts)}. Remove the flag from the unit/drop-in or the key from daemon.json.",
                path=path,
                conflicts=conflicts,
            )
    if not keys:
        return result
    text = render(after)
    if module._diff:
        result["diff"] = {
            "before": render(before) if original is not None else "",
            "after": text,
            "before_header": f"{path} (before)",
            "after_header": f"{path} (after)",
        }
    if module.params["validate"]:
        result["validated"], result["validation"] = validate_with_dockerd(module, text)
    else:
        result["validation"] = "skipped: validate=false"
    if not module.check_mode:
        try:
            backup = write_atomically(module, path, text, existed=original is not None)
        except OSError as err:
            raise InputError(f"could not write {path}: {err.strerror or err}; the file was left as it was") from err
        if backup:
            result["backup_file"] = backup
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": "/etc/docker/daemon.json"},
            "settings": {"type": "dict", "default": {}},
            "remove": {"type": "list", "elements": "str", "default": []},
            "backup": {"type": "bool", "default": True},
            "validate": {"type": "bool", "default": True},
            "dockerd_path": {"type": "path"},
            "service": {"type": "str", "default": "docker.service"},
            "check_flag_conflicts": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    try:
        result = run(module)
    except InputError as err:
        module.fail_json(msg=str(err), path=module.params["path"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
