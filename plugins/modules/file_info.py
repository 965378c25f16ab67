#!/usr/bin/python
# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: file_info
short_description: Type, mode, owner, group, SHA-1 and content of paths, file trees, free space and units, in one call
version_added: 0.1.0
author: sparkfleet maintainers (@sparkfleet)
description:
  - Reads what M(ansible.builtin.stat) reads of a path (without following a symbolic link) for
    every path given, in one module call instead of one per path.
  - A role that installs several files reads them all at once and, with the
    P(sparkfleet.serving.files_in_state#filter) filter, skips its M(ansible.builtin.copy),
    M(ansible.builtin.template) and M(ansible.builtin.file) tasks when every file already has the
    wanted content, type, mode and owner. Each of those tasks costs two module calls even when it
    changes nothing (a stat, then M(ansible.builtin.file) for the attributes), and a module call
    costs the box a Python start with Ansible's module library (about 0.3 s of CPU for
    ansible-core 2.19 on a 2-core x86 machine, measured with C(python3 -X importtime)).
  - With O(units), also whether systemd units are enabled and active, so that a role can skip its
    M(ansible.builtin.systemd_service) call (another module call) when the unit already is.
  - Changes nothing.
options:
  paths:
    description:
      - Absolute paths to read. They need not exist.
    type: list
    elements: path
    required: true
  checksum:
    description:
      - Whether to return the SHA-1 of regular files (the checksum M(ansible.builtin.copy) compares).
    type: bool
    default: true
  read:
    description:
      - Paths among O(paths) whose content to return too (base64, as M(ansible.builtin.slurp) returns it), for
        small files a role reads anyway, such as its own JSON records. Only regular files are read.
      - A file larger than 4 MiB fails the task; use M(ansible.builtin.slurp) or M(ansible.builtin.fetch) for those.
    type: list
    elements: path
    default: []
  tree:
    description:
      - Directories whose regular files to list in RV(trees), recursively and hidden files included, as
        M(ansible.builtin.find) lists them with C(recurse=true), C(file_type=file) and C(hidden=true) (links are
        not followed and not listed).
    type: list
    elements: path
    default: []
  free:
    description:
      - Paths whose free space to report in RV(free), as C(df -B1) reports it (the bytes available to
        unprivileged users), on the filesystem of the path or, when it does not exist yet, of its nearest
        existing parent.
    type: list
    elements: path
    default: []
  units:
    description:
      - systemd units to report in RV(units), for example C(docker.service).
    type: list
    elements: str
    default: []
seealso:
  - module: ansible.builtin.stat
extends_documentation_fragment:
  - sparkfleet.serving.checks.READ_ONLY
"""

EXAMPLES = r"""
- name: Read the service's files in one call
  sparkfleet.serving.file_info:
    paths:
      - /usr/local/lib/sparkfleet
      - /usr/local/lib/sparkfleet/sparkfleet_watchdog.py
      - /etc/systemd/system/sparkfleet-watchdog.service
    units: [sparkfleet-watchdog.service]
  register: installed
"""

RETURN = r"""
files:
  description: For each path given, what is there.
  returned: always
  type: dict
  sample:
    /usr/local/lib/sparkfleet: {type: directory, mode: "0755", owner: root, group: root, size: 4096, executable: true}
    /usr/local/lib/sparkfleet/sparkfleet_watchdog.py:
      type: file
      mode: "0644"
      owner: root
      group: root
      size: 18342
      executable: false
      checksum: 6b0c4d1c3c3c0a2b7b0a0f1b5e1c2d3e4f5a6b7c
    /usr/bin/python3: {type: link, mode: "0777", owner: root, group: root, size: 10, executable: true}
    /etc/sparkfleet/missing.json: {type: absent}
  contains:
    type:
      description: C(file), C(directory), C(link), C(other) (a socket, device or pipe) or C(absent).
      type: str
    mode:
      description: The permission bits, four octal digits as M(ansible.builtin.file) takes them.
      type: str
    owner:
      description: The owner's name, or the uid when it has no name.
      type: str
    group:
      description: The group's name, or the gid when it has no name.
      type: str
    size:
      description: Size in bytes.
      type: int
    checksum:
      description: SHA-1 of a regular file's content (with O(checksum)); absent otherwise or when it cannot be read.
      type: str
    executable:
      description: Whether the module's user may execute the path (following a link, as M(ansible.builtin.stat)'s
        C(executable) does).
      type: bool
    content:
      description: The file's content, base64-encoded (for a regular file of O(read) that could be read).
      type: str
trees:
  description: For each directory of O(tree), its regular files (none when it does not exist).
  returned: always
  type: dict
  sample:
    /var/lib/sparkfleet/models/Qwen3.5-35B-A3B-FP8:
      - {path: /var/lib/sparkfleet/models/Qwen3.5-35B-A3B-FP8/config.json, size: 4210, mtime: 1764500000.25}
free:
  description: For each path of O(free), the free bytes of its filesystem.
  returned: always
  type: dict
  sample:
    /var/lib/sparkfleet/models/Qwen3.5-35B-A3B-FP8: 3011558313984
units:
  description: For each unit of O(units), what C(systemctl is-enabled) and C(systemctl is-active) print.
  returned: always
  type: dict
  sample:
    sparkfleet-watchdog.service: {enabled: enabled, active: active}
    missing.service: {enabled: "", active: inactive}
  contains:
    enabled:
      description: C(enabled), C(disabled), C(static), C(masked) and so on; empty when systemd does not know the unit,
        C(unknown) when there is no C(systemctl).
      type: str
    active:
      description: C(active), C(inactive), C(failed), C(activating) and so on; C(unknown) when there is no C(systemctl).
      type: str
"""

import base64
import grp
import hashlib
import os
import pwd
import stat
from collections.abc import Callable

from ansible.module_utils.basic import AnsibleModule

CHUNK = 1024 * 1024
# The largest file read returns: these are a role's small records, not data to transfer.
MAX_READ_BYTES = 4 * 1024 * 1024


def name_of(lookup: Callable[[int], tuple], ident: int) -> str:
    """The name for a uid or gid, or the number when the box has no name for it."""
    try:
        return lookup(ident)[0]
    except KeyError:
        return str(ident)


def kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def sha1_of(path: str) -> str | None:
    digest = hashlib.sha1()  # the checksum ansible.builtin.copy compares
    try:
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(CHUNK), b""):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def describe(path: str, checksum: bool) -> dict:
    """What M(ansible.builtin.stat) would say of the path, without following a link."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return {"type": "absent"}
    result = {
        "type": kind(info.st_mode),
        "mode": f"{stat.S_IMODE(info.st_mode):04o}",
        "owner": name_of(pwd.getpwuid, info.st_uid),
        "group": name_of(grp.getgrgid, info.st_gid),
        "size": info.st_size,
        "executable": os.access(path, os.X_OK),
    }
    if checksum and result["type"] == "file":
        digest = sha1_of(path)
        if digest is not None:
            result["checksum"] = digest
    return result


def tree_files(top: str) -> list[dict]:
    """Regular files under top, as ansible.builtin.find with recurse, file_type=file and hidden lists them."""
    files = []
    for root, _dirs, names in os.walk(top):
        for name in names:
            path = os.path.join(root, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                files.append({"path": path, "size": info.st_size, "mtime": info.st_mtime})
    return sorted(files, key=lambda item: item["path"])


def free_bytes(path: str) -> int:
    """Bytes available to unprivileged users where path is, or would be created (df -B1's Available)."""
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    info = os.statvfs(path)
    return info.f_bavail * info.f_frsize


def content_of(path: str) -> str | None:
    """The file's content in base64, or None when it cannot be read (as slurp would fail)."""
    try:
        with open(path, "rb") as handle:
            return base64.b64encode(handle.read()).decode("ascii")
    except OSError:
        return None


def unit_state(module: AnsibleModule, systemctl: str | None, unit: str) -> dict[str, str]:
    """What systemctl prints for the unit; their exit codes only repeat it (non-zero unless enabled/active)."""
    if systemctl is None:
        return {"enabled": "unknown", "active": "unknown"}
    return {
        key: module.run_command([systemctl, f"is-{key}", unit])[1].strip()
        for key in ("enabled", "active")
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "path", "required": True},
            "checksum": {"type": "bool", "default": True},
            "read": {"type": "list", "elements": "path", "default": []},
            "tree": {"type": "list", "elements": "path", "default": []},
            "free": {"type": "list", "elements": "path", "default": []},
            "units": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    given = module.params["paths"] + module.params["tree"] + module.params["free"]
    relative = [path for path in given if not os.path.isabs(path)]
    if relative:
        module.fail_json(msg=f"paths must be absolute; found {', '.join(relative)}: give the full path of each")
    stray = [path for path in module.params["read"] if path not in module.params["paths"]]
    if stray:
        module.fail_json(msg=f"read names paths that paths does not: {', '.join(stray)}; add them to paths too")
    files = {path: describe(path, module.params["checksum"]) for path in module.params["paths"]}
    for path in module.params["read"]:
        if files[path]["type"] != "file":
            continue
        if files[path]["size"] > MAX_READ_BYTES:
            module.fail_json(
                msg=f"{path} has {files[path]['size']} bytes; read returns at most {MAX_READ_BYTES}: "
                "read it with ansible.builtin.slurp instead",
            )
        content = content_of(path)
        if content is not None:
            files[path]["content"] = content
    systemctl = module.get_bin_path("systemctl") if module.params["units"] else None
    units = {unit: unit_state(module, systemctl, unit) for unit in module.params["units"]}
    trees = {top: tree_files(top) for top in module.params["tree"]}
    free = {path: free_bytes(path) for path in module.params["free"]}
    module.exit_json(changed=False, files=files, trees=trees, free=free, units=units)


if __name__ == "__main__":
    main()
