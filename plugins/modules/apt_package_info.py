#!/usr/bin/python
# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_package_info
short_description: Which apt packages are missing, and whether apt's index can be trusted to install them
version_added: 0.1.0
author: sparkfleet maintainers (@sparkfleet)
description:
  - Asks dpkg which of the packages are installed (one C(dpkg-query) call) and, for those that are not, whether apt
    knows a version to install (one C(apt-cache policy) call), and how old apt's index is.
  - RV(refresh) says whether the index must be refreshed before the missing packages are installed - when apt knows
    none of the lists it would read (an emptied C(/var/lib/apt/lists), as container images and fresh cloud images
    ship), when it does not know a missing package, or when the newest list is older than O(max_age). The age is
    read from the lists themselves, never from the directory's time, which an image build that empties the directory
    sets to the build's time (M(ansible.builtin.apt)'s C(cache_valid_time) trusts that time and then finds no
    package at all).
  - Changes nothing. The common role's C(packages) entry point installs with it (sparkfleet.serving.common,
    C(tasks_from=packages)).
options:
  names:
    description:
      - Packages as M(ansible.builtin.apt) takes them, C(name) or C(name=version); the version may end in C(*), as apt
        matches it. A package is installed when dpkg has it installed (at a matching version, when one is given).
    type: list
    elements: str
    required: true
  max_age:
    description:
      - Seconds after which apt's index is too old to install from (a mirror drops the files of superseded versions).
        C(0) refreshes it before every install.
    type: int
    default: 86400
  lists_dir:
    description:
      - apt's lists directory (C(Dir::State::Lists)).
    type: path
    default: /var/lib/apt/lists
seealso:
  - module: ansible.builtin.apt
extends_documentation_fragment:
  - sparkfleet.serving.checks.READ_ONLY
"""

EXAMPLES = r"""
- name: Ask which packages are missing
  sparkfleet.serving.apt_package_info:
    names: [nginx, docker-registry]
  register: packages

- name: Install them, with a fresh index when the one on the box cannot be trusted
  ansible.builtin.apt:
    name: "{{ packages.missing }}"
    update_cache: "{{ packages.refresh }}"
  when: packages.missing | length > 0
"""

RETURN = r"""
installed:
  description: The packages of O(names) that are installed.
  returned: always
  type: list
  elements: str
  sample: [nginx]
missing:
  description: The packages of O(names) to install, as given.
  returned: always
  type: list
  elements: str
  sample: [docker-registry]
unknown:
  description: The packages of RV(missing) that apt knows no version of with its current index.
  returned: always
  type: list
  elements: str
  sample: [docker-registry]
index_age:
  description: Seconds since apt's newest package list was written; null when there is none.
  returned: always
  type: int
  sample: 420
refresh:
  description: Whether the index must be refreshed before RV(missing) is installed (never when nothing is missing).
  returned: always
  type: bool
  sample: true
reason:
  description: Why the index must be refreshed, for a message; empty when it need not be.
  returned: always
  type: str
  sample: "apt's index is empty (no package lists in /var/lib/apt/lists)"
"""

import fnmatch
import os
import re
import time

from ansible.module_utils.basic import AnsibleModule

# dpkg's status abbreviation: desired action, package status, error flag (dpkg-query(1), "db:Status-Abbrev");
# a package is installed when its status is "i".
DPKG_FORMAT = "${Package}\t${db:Status-Abbrev}\t${Version}\n"
# Package lists as apt stores them: <source>_<suite>_<component>_binary-<arch>_Packages[.lz4|.gz|...].
LIST_NAME = re.compile(r"_Packages(\.[a-z0-9]+)?$")


def split_spec(spec: str) -> tuple[str, str]:
    """'name=version' -> (name, version); a plain name has the version ''."""
    name, _sep, version = spec.partition("=")
    return name.strip(), version.strip()


def installed_versions(module: AnsibleModule, names: list[str]) -> dict[str, str]:
    """name -> installed version, for the names dpkg has installed (it says nothing of the ones it never saw)."""
    _rc, out, _err = module.run_command(
        [module.get_bin_path("dpkg-query", required=True), "-W", f"-f={DPKG_FORMAT}", *names])
    versions = {}
    for line in out.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[1][1:2] == "i":
            versions[fields[0]] = fields[2]
    return versions


def candidates(module: AnsibleModule, names: list[str]) -> set[str]:
    """The names apt has a version to install of (`apt-cache policy` prints no block for a name it does not know)."""
    _rc, out, _err = module.run_command([module.get_bin_path("apt-cache", required=True), "policy", *names])
    known, current = set(), None
    for line in out.splitlines():
        block = re.match(r"^(\S+):$", line)
        if block:
            current = block.group(1)
            continue
        candidate = re.match(r"^\s+Candidate:\s+(\S+)", line)
        if candidate and current is not None and candidate.group(1) != "(none)":
            known.add(current)
    return known


def index_age(lists_dir: str, now: float) -> int | None:
    """Seconds since the newest package list was written, or None when the directory holds none."""
    try:
        times = [entry.stat().st_mtime for entry in os.scandir(lists_dir)
                 if entry.is_file() and LIST_NAME.search(entry.name)]
    except FileNotFoundError:
        return None
    return max(0, int(now - max(times))) if times else None


def refresh_reason(missing: list[str], unknown: list[str], age: int | None, max_age: int, lists_dir: str) -> str:
    if not missing:
        return ""
    if age is None:
        return f"apt's index is empty (no package lists in {lists_dir})"
    if unknown:
        return f"apt does not know {', '.join(unknown)}"
    if age >= max_age:
        return f"apt's index is {age} s old (limit {max_age} s)"
    return ""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "names": {"type": "list", "elements": "str", "required": True},
            "max_age": {"type": "int", "default": 86400},
            "lists_dir": {"type": "path", "default": "/var/lib/apt/lists"},
        },
        supports_check_mode=True,
    )
    specs = [spec for spec in module.params["names"] if spec.strip()]
    if module.params["max_age"] < 0:
        module.fail_json(msg=f"max_age is {module.params['max_age']}; expected seconds, 0 or more")
    names = sorted({split_spec(spec)[0] for spec in specs})
    versions = installed_versions(module, names) if names else {}
    installed, missing = [], []
    for spec in specs:
        name, version = split_spec(spec)
        have = versions.get(name)
        ok = have is not None and (not version or fnmatch.fnmatchcase(have, version))
        (installed if ok else missing).append(spec)
    missing_names = sorted({split_spec(spec)[0] for spec in missing})
    known = candidates(module, missing_names) if missing_names else set()
    unknown = [name for name in missing_names if name not in known]
    age = index_age(module.params["lists_dir"], time.time())
    reason = refresh_reason(missing, unknown, age, module.params["max_age"], module.params["lists_dir"])
    module.exit_json(changed=False, installed=installed, missing=missing, unknown=unknown, index_age=age,
                     refresh=bool(reason), reason=reason)


if __name__ == "__main__":
    main()
