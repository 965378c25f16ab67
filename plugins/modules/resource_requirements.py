#!/usr/bin/python
# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: resource_requirements
short_description: Check disk space and memory for a model's weights
version_added: 0.1.0
author: sparkfleet maintainers (@sparkfleet)
description:
  - "Disk: the free space of the filesystem where the weights go (the nearest existing
    parent of O(weights_dir) when it does not exist yet) must cover what is still to be
    downloaded (O(weights_bytes) minus the files already in O(weights_dir)) plus O(disk_margin_bytes)."
  - "Memory: MemTotal must cover O(weights_bytes) plus O(memory_headroom_bytes)."
  - Reports every unmet requirement at once with found / required / fix; fails unless
    O(fail_on_error=false). Changes nothing.
options:
  weights_dir:
    description:
      - Directory the weights are (or will be) in. It does not need to exist.
    type: path
    required: true
  weights_bytes:
    description:
      - Total size of the weights in bytes.
    type: int
    required: true
  disk_margin_bytes:
    description:
      - Free space to keep on top of the download.
    type: int
    default: 10737418240
  memory_headroom_bytes:
    description:
      - Memory that must remain on top of the weights (KV cache, activations, the OS). The default is the rule
        M(sparkfleet.serving.serving_plan) applies too (its C(min_free_after_weights_bytes)), 64 GiB, since on a
        128 GB Spark the BF16 Qwen3.5-35B-A3B left ~56 GiB and ran out of memory while profiling.
    type: int
    default: 68719476736
  mem_total_bytes:
    description:
      - Total memory in bytes; read from O(meminfo_path) when not given.
    type: int
  meminfo_path:
    description:
      - meminfo file to read MemTotal from.
    type: path
    default: /proc/meminfo
seealso:
  - module: sparkfleet.serving.serving_plan
extends_documentation_fragment:
  - sparkfleet.serving.checks.READ_ONLY
  - sparkfleet.serving.checks.FAIL_ON_ERROR
"""

EXAMPLES = r"""
- name: Room for Qwen3.5-35B-A3B-FP8 (34.2 GiB) on disk and in memory
  sparkfleet.serving.resource_requirements:
    weights_dir: /srv/models/Qwen3.5-35B-A3B-FP8
    weights_bytes: 36743445217
"""

RETURN = r"""
passed:
  description: Whether disk and memory suffice.
  returned: always
  type: bool
  sample: true
problems:
  description: Every unmet requirement (requirement, found, required, fix, message).
  returned: always
  type: list
  elements: dict
  sample: [{requirement: Disk space for the model weights, found: 12.0 GiB free at /srv, required: "44.2 GiB (...)",
            fix: free space on that filesystem or point the weights directory at a larger one, message: "..."}]
disk:
  description: >-
    The disk figures (weights_dir, checked_path, free_bytes, present_bytes, expected_bytes,
    to_download_bytes, required_free_bytes).
  returned: always
  type: dict
  sample: {weights_dir: /srv/models/m, checked_path: /srv, free_bytes: 80000000000, present_bytes: 0,
           expected_bytes: 36743445217, to_download_bytes: 36743445217, required_free_bytes: 47480863457}
memory:
  description: The memory figures (mem_total_bytes, required_bytes).
  returned: always
  type: dict
  sample: {mem_total_bytes: 130663677952, required_bytes: 71103183585}
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.serving.plugins.module_utils.inputs import InputError, check_range, meminfo_total
from ansible_collections.sparkfleet.serving.plugins.module_utils.resources import (
    MIN_FREE_AFTER_WEIGHTS_BYTES,
    check_disk,
    check_memory,
    is_partial,
)


def existing_parent(path: str) -> str:
    """The nearest existing directory at or above path; InputError when path is or lies under a file."""
    given = path
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        raise InputError(
            f"weights_dir {given}: {path} is a file, not a directory; expected the directory the weights are "
            "(or will be) in"
        )
    return path


def present_bytes(path: str) -> int:
    """Bytes of the finished files under path (not following symlinks)."""
    total = 0
    if not os.path.isdir(path):
        return 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            if is_partial(name) or os.path.islink(full):
                continue
            try:
                total += os.stat(full).st_size
            except OSError:
                continue
    return total


def mem_total(module: AnsibleModule) -> int | None:
    if module.params["mem_total_bytes"] is not None:
        return module.params["mem_total_bytes"]
    return meminfo_total(module.params["meminfo_path"])


def check_options(params: dict) -> None:
    check_range(params["weights_bytes"], "weights_bytes", low=1)
    check_range(params["mem_total_bytes"], "mem_total_bytes", low=1)
    check_range(params["disk_margin_bytes"], "disk_margin_bytes", low=0)
    check_range(params["memory_headroom_bytes"], "memory_headroom_bytes", low=0)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "weights_dir": {"type": "path", "required": True},
            "weights_bytes": {"type": "int", "required": True},
            "disk_margin_bytes": {"type": "int", "default": 10 * 1024**3},
            "memory_headroom_bytes": {"type": "int", "default": MIN_FREE_AFTER_WEIGHTS_BYTES},
            "mem_total_bytes": {"type": "int"},
            "meminfo_path": {"type": "path", "default": "/proc/meminfo"},
            "fail_on_error": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        check_options(params)
        checked = existing_parent(params["weights_dir"])
        total = mem_total(module)
    except InputError as exc:
        module.fail_json(msg=str(exc), changed=False)
    stat = os.statvfs(checked)
    disk = check_disk(
        weights_dir=params["weights_dir"],
        checked_path=checked,
        free_bytes=stat.f_bavail * stat.f_frsize,
        present_bytes=present_bytes(params["weights_dir"]),
        expected_bytes=params["weights_bytes"],
        margin_bytes=params["disk_margin_bytes"],
    )
    memory = check_memory(
        mem_total_bytes=total,
        weights_bytes=params["weights_bytes"],
        headroom_bytes=params["memory_headroom_bytes"],
    )
    problems = disk.pop("problems") + memory.pop("problems")
    output = {"changed": False, "passed": not problems, "problems": problems, "disk": disk, "memory": memory}
    if problems and params["fail_on_error"]:
        lines = [f"{len(problems)} disk/memory requirement(s) not met:", *(f"  - {p['message']}" for p in problems)]
        module.fail_json(msg="\n".join(lines), **output)
    module.exit_json(**output)


if __name__ == "__main__":
    main()
