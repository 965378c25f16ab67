#!/usr/bin/python
# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: maintenance_facts
short_description: What a box runs and what an update would change on it, read without changing anything
version_added: 0.1.0
author: sparkfleet maintainers (@sparkfleet)
description:
  - A snapshot of the box - the OS release (C(/etc/os-release)), DGX OS's version (C(/etc/dgx-release)), the running
    kernel, the loaded NVIDIA kernel module and the CUDA version its branch runs, the installed kernel and NVIDIA
    packages, the firmware versions C(fwupdmgr) reports - and the plan of an update - what C(apt-get -s) (a
    simulation) would upgrade, which of it the O(upgrade) mode allows, the firmware updates offered, whether the box
    asks for a reboot (C(/var/run/reboot-required)).
  - The CUDA version the images of O(images) need (C(NVIDIA_REQUIRE_CUDA), else C(CUDA_VERSION), from
    C(docker image inspect)), which the driver policy (M(sparkfleet.serving.driver_policy)) checks against the driver
    before and after the update.
  - The simulation reads apt's current index; refresh it first for a plan of what the mirrors offer today.
options:
  upgrade:
    description:
      - Which upgrades the plan holds. V(security) - the packages whose new version comes from a security pocket (an
        archive ending in C(-security), as Ubuntu's C(noble-security)), upgraded in place (C(apt-get install
        --only-upgrade)); V(all) - everything C(apt-get dist-upgrade) would do; V(none) - no package.
    type: str
    default: security
    choices: [security, all, none]
  firmware:
    description:
      - Whether to ask C(fwupdmgr) for the devices' firmware versions and the updates offered. A box without
        C(fwupdmgr) reports that it has none.
    type: bool
    default: false
  images:
    description:
      - Image references or ids on the box whose CUDA requirement is read. An image that is not on the box is listed
        in RV(images) with an error.
    type: list
    elements: str
    default: []
  os_release_path:
    description: The os-release file.
    type: path
    default: /etc/os-release
  dgx_release_path:
    description: DGX OS's release file (absent on other systems).
    type: path
    default: /etc/dgx-release
  driver_version_file:
    description: The NVIDIA kernel module's version file.
    type: path
    default: /proc/driver/nvidia/version
  dpkg_status_file:
    description: dpkg's status database.
    type: path
    default: /var/lib/dpkg/status
  reboot_required_path:
    description: The flag file packages touch when the box needs a reboot (its C(.pkgs) beside it names them).
    type: path
    default: /var/run/reboot-required
seealso:
  - module: sparkfleet.serving.driver_policy
  - name: os-release(5)
    description: The format of the OS release file.
    link: https://www.freedesktop.org/software/systemd/man/latest/os-release.html
extends_documentation_fragment:
  - sparkfleet.serving.checks.READ_ONLY
"""

EXAMPLES = r"""
- name: Read the box and what a security update would change
  sparkfleet.serving.maintenance_facts:
    upgrade: security
    images: [vllm/vllm-openai:v0.34.0]
  register: maintenance
"""

RETURN = r"""
snapshot:
  description: What the box runs.
  returned: always
  type: dict
  contains:
    os:
      description: C(/etc/os-release)'s C(PRETTY_NAME), C(VERSION_ID) and C(ID).
      type: dict
    dgx_os:
      description:
        - DGX OS's C(version) (the last OTA update's, else the installed build's) and the release file's values.
        - C({}) on other systems.
      type: dict
    kernel:
      description: The running kernel (C(uname -r)).
      type: str
    driver:
      description: The loaded NVIDIA module - C(loaded), C(version), C(flavour), C(branch), C(cuda_version).
      type: dict
    packages:
      description: The installed kernel and NVIDIA packages, name to version.
      type: dict
    firmware:
      description:
        - The devices C(fwupdmgr get-devices) lists (C(name), C(device_id), C(version)).
        - Null when not asked or without C(fwupdmgr).
      type: list
      elements: dict
plan:
  description: What the update would change.
  returned: always
  type: dict
  contains:
    upgrades:
      description:
        - The changes the O(upgrade) mode allows (C(action), C(package), C(from), C(to), C(archives), C(security)).
      type: list
      elements: dict
    held_back:
      description: The upgrades C(apt-get -s dist-upgrade) offers that the mode leaves out.
      type: list
      elements: dict
    simulation:
      description:
        - The output of the simulated update of RV(plan.upgrades), for M(sparkfleet.serving.driver_policy)'s
          C(upgrade_output).
      type: str
    firmware:
      description:
        - The firmware updates offered (C(name), C(device_id), C(version), C(releases)); C([]) when none or not asked.
      type: list
      elements: dict
    reboot:
      description: C(required) (the reboot flag is there now) and the C(packages) that asked for it.
      type: dict
    error:
      description: Why the simulation or C(fwupdmgr) could not be had; C('') when they ran.
      type: str
images:
  description: Each image of O(images) with the CUDA version it needs (C(image), C(cuda), C(error)).
  returned: always
  type: list
  elements: dict
image_cuda_version:
  description: The highest CUDA version the images need; null when none says.
  returned: always
  type: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.serving.plugins.module_utils.driver_policy import read_file
from ansible_collections.sparkfleet.serving.plugins.module_utils.maintenance import (
    ARGUMENT_SPEC,
    dgx_os_version,
    driver_snapshot,
    image_cuda,
    installed_watched,
    newest_cuda,
    parse_fwupd,
    parse_key_values,
    parse_simulation,
    reboot_required,
    select_upgrades,
)

# apt translates its messages; the parsers read the untranslated action lines. NoLocking lets the simulation run
# beside apt and unprivileged.
APT_ENV = {"LC_ALL": "C"}


def run(module: AnsibleModule, argv: list[str]) -> tuple[str | None, str]:
    """A command's output, or None and why it failed."""
    rc, out, err = module.run_command(argv, environ_update=APT_ENV)
    if rc != 0:
        first = next((line for line in (err or out).splitlines() if line.strip()), "(no output)")
        return None, f"`{' '.join(argv)}` failed (exit code {rc}): {first.strip()}"
    return out, ""


def simulate(module: AnsibleModule, mode: str) -> tuple[list[dict], list[dict], str, str]:
    """(allowed changes, held back, the simulation of the allowed ones, error)."""
    apt_get = module.get_bin_path("apt-get")
    if not apt_get:
        return [], [], "", "apt-get not found"
    base = [apt_get, "-s", "-o", "Debug::NoLocking=1"]
    text, error = run(module, [*base, "dist-upgrade"])
    if text is None:
        return [], [], "", error
    offered = parse_simulation(text)
    allowed = select_upgrades(offered, mode)
    held_back = [change for change in offered if change not in allowed]
    if mode == "all" or not allowed:
        return allowed, held_back, text if allowed else "", ""
    # What installing only those would do (their dependencies included), for the driver policy.
    names = [change["package"] for change in allowed]
    subset, error = run(module, [*base, "install", "--only-upgrade", *names])
    return allowed, held_back, subset or "", error


def firmware(module: AnsibleModule) -> tuple[list[dict] | None, list[dict], str]:
    """(devices, updates offered, error) from fwupdmgr (fwupd 1.9, src/fu-util.c): its metadata refreshed first,
    as apt's index is; exit code 2 is "nothing to do" (no device, metadata already fresh), not a failure."""
    fwupdmgr = module.get_bin_path("fwupdmgr")
    if not fwupdmgr:
        return None, [], "fwupdmgr not found: the box has no fwupd to report or update firmware with"
    answers = []
    for argv in (["refresh", "--force"], ["get-devices", "--json"], ["get-updates", "--json"]):
        rc, out, err = module.run_command([fwupdmgr, *argv], environ_update=APT_ENV)
        if rc not in (0, 2):
            why = (err or out).strip()
            return None, [], f"`fwupdmgr {' '.join(argv)}` failed (exit code {rc}): {why}"
        answers.append(out if rc == 0 else "")
    # get-updates --json lists only the devices with an update (an empty list when there is none).
    return parse_fwupd(answers[1]), [d for d in parse_fwupd(answers[2]) if d["releases"]], ""


def images(module: AnsibleModule, refs: list[str]) -> list[dict]:
    docker = module.get_bin_path("docker")
    found = []
    for ref in refs:
        if not docker:
            found.append({"image": ref, "cuda": None, "error": "docker not found"})
            continue
        text, error = run(module, [docker, "image", "inspect", "--format", "{{json .Config.Env}}", ref])
        env = json.loads(text) if text else None
        found.append({"image": ref, "cuda": image_cuda(env) if text else None, "error": error})
    return found


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    os_release = parse_key_values(read_file(params["os_release_path"])[0])
    dgx_text = read_file(params["dgx_release_path"])[0]
    dgx = parse_key_values(dgx_text)
    upgrades, held_back, simulation, error = simulate(module, params["upgrade"]) if params["upgrade"] != "none" \
        else ([], [], "", "")
    devices, offered, firmware_error = firmware(module) if params["firmware"] else (None, [], "")
    flag = params["reboot_required_path"]
    found_images = images(module, params["images"])
    module.exit_json(
        changed=False,
        snapshot={
            "os": {key.lower(): os_release.get(key) for key in ("PRETTY_NAME", "VERSION_ID", "ID")},
            "dgx_os": {"version": dgx_os_version(dgx), "release": dgx} if dgx_text is not None else {},
            "kernel": os.uname().release,
            "driver": driver_snapshot(read_file(params["driver_version_file"])[0]),
            "packages": installed_watched(read_file(params["dpkg_status_file"])[0]),
            "firmware": devices,
        },
        plan={
            "upgrades": upgrades,
            "held_back": held_back,
            "simulation": simulation,
            "firmware": offered,
            "reboot": reboot_required(os.path.exists(flag), read_file(flag + ".pkgs")[0]),
            "error": "; ".join(e for e in (error, firmware_error) if e),
        },
        images=found_images,
        image_cuda_version=newest_cuda([image["cuda"] for image in found_images]),
    )


if __name__ == "__main__":
    main()
