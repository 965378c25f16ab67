#!/usr/bin/python
# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: driver_policy
short_description: Check a box's NVIDIA driver, and what an apt upgrade would do to it, against a driver policy
version_added: 0.1.0
author: sparkfleet maintainers (@sparkfleet)
description:
  - Reads the loaded kernel module (C(/proc/driver/nvidia/version)), the NVIDIA packages and their holds in dpkg's
    database (C(/var/lib/dpkg/status)), traces of NVIDIA's C(.run) installer, and what C(apt-get -s) (a simulation,
    which changes nothing) would install or remove.
  - Checks them against a policy and reports B(every) problem at once, each with what was found, what is required
    and how to fix it. The loaded module must be the O(branch) open kernel module (proprietary modules never
    initialise Blackwell GPUs such as GB10), no driver from the C(.run) installer, no NVIDIA package of another
    branch or flavour installed now or by the upgrade, no open module removed by it, a new kernel only with NVIDIA
    modules for it, and the image's CUDA version (O(image_cuda_version)) no newer than the driver runs, now and
    after the upgrade.
  - The CUDA version a driver runs comes from its branch, per the table "CUDA Toolkit and Corresponding Driver
    Versions" of NVIDIA's CUDA release notes (U(https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html)),
    so 580 runs CUDA 13.0, 590 runs 13.1 and 595 runs 13.2. The container runtime refuses to start an image that
    requires a newer CUDA than the driver's (it reports an unsatisfied condition C(cuda>=13.1)).
  - The simulation reads apt's current index; refresh it first (M(ansible.builtin.apt) with C(update_cache)) for
    a plan of what the mirror offers today.
  - Fails when a problem is found, unless O(fail_on_error=false), in which case the problems are only returned.
options:
  branch:
    description:
      - The driver branch the fleet is pinned to (the major version, C(580) for 580.142).
    type: str
    default: "580"
  require_open:
    description:
      - Whether the kernel modules must be the open flavour, now and after the upgrade.
    type: bool
    default: true
  refuse_run_installer:
    description:
      - Whether a driver installed by NVIDIA's C(.run) installer (C(nvidia-uninstall) present) is a problem.
    type: bool
    default: true
  require_hold:
    description:
      - Whether the branch's installed packages must be held (C(apt-mark hold)). Otherwise an unheld package is a
        warning, and only what the simulated upgrade would do to it is checked.
    type: bool
    default: false
  image_cuda_version:
    description:
      - The CUDA version the vLLM image is built for (its C(CUDA_VERSION) environment or C(NVIDIA_REQUIRE_CUDA)),
        for example C(13.0). Empty to not check.
    type: str
  upgrade:
    description:
      - Which upgrade to simulate with C(apt-get -s -o Debug::NoLocking=1), or C(none) to check only what is
        installed. C(dist-upgrade) is what installs a new branch's packages; C(upgrade) keeps them back.
    type: str
    default: dist-upgrade
    choices: [none, upgrade, dist-upgrade]
  upgrade_output:
    description:
      - The output of C(apt-get -s upgrade) or C(apt-get -s dist-upgrade) taken elsewhere; nothing is run when
        given.
    type: str
  driver_version_file:
    description:
      - The kernel module's version file.
    type: path
    default: /proc/driver/nvidia/version
  dpkg_status_file:
    description:
      - dpkg's status database.
    type: path
    default: /var/lib/dpkg/status
  run_uninstaller_path:
    description:
      - The uninstaller NVIDIA's C(.run) installer leaves while its driver is installed.
    type: path
    default: /usr/bin/nvidia-uninstall
  run_installer_log_path:
    description:
      - The C(.run) installer's log; alone it is a warning (the driver it installed was removed).
    type: path
    default: /var/log/nvidia-installer.log
seealso:
  - module: sparkfleet.serving.gpu_facts
  - module: sparkfleet.serving.gpu_requirements
  - name: CUDA Toolkit release notes, CUDA Toolkit and Corresponding Driver Versions
    description: The oldest Linux driver of each CUDA release.
    link: https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html
extends_documentation_fragment:
  - sparkfleet.serving.checks.READ_ONLY
  - sparkfleet.serving.checks.FAIL_ON_ERROR
  - sparkfleet.serving.checks.REPORT_WARNINGS
"""

EXAMPLES = r"""
- name: Refresh apt's index, so that the simulation sees what the mirror offers
  ansible.builtin.apt:
    update_cache: true

- name: Check the driver policy before changing the box
  sparkfleet.serving.driver_policy:
    branch: "580"
    image_cuda_version: "13.0"
  register: driver

- name: Collect the problems with other checks instead of failing here
  sparkfleet.serving.driver_policy:
    upgrade: none
    fail_on_error: false
  register: driver_now
"""

RETURN = r"""
passed:
  description: Whether the box meets the policy.
  returned: always
  type: bool
  sample: false
problems:
  description: Every problem found.
  returned: always
  type: list
  elements: dict
  contains:
    requirement:
      description: What was checked.
      type: str
      sample: Driver branch after the upgrade
    found:
      description: What the box has or the upgrade would do.
      type: str
      sample: would install nvidia-driver-590-open 590.48.01-0ubuntu0.24.04.1
    required:
      description: What the policy requires.
      type: str
      sample: the 580 branch only
    fix:
      description: How to fix it.
      type: str
      sample: hold the 580 packages before upgrading (`sudo apt-mark hold ...`) ...
    message:
      description: The whole sentence.
      type: str
      sample: "Driver branch after the upgrade: found would install nvidia-driver-590-open ..., required ..."
warnings_found:
  description: Conditions accepted with a warning (also emitted as Ansible warnings).
  returned: always
  type: list
  elements: str
  sample: ["not held: nvidia-driver-580-open; an upgrade may move them (the simulated one is checked)"]
driver:
  description: What the box runs and has installed.
  returned: always
  type: dict
  contains:
    branch:
      description: The driver branch, from the loaded module (or the driver package when none is loaded).
      type: str
      sample: "580"
    version:
      description: The driver version, from the loaded module (or the driver package).
      type: str
      sample: "580.142"
    open:
      description: Whether the kernel modules are the open flavour; null when nothing says.
      type: bool
      sample: true
    module:
      description: The loaded kernel module (C(loaded), C(version), C(flavour), and C(error) when the file could not
        be read).
      type: dict
      sample: {loaded: true, version: "580.142", flavour: open, error: null}
    package_version:
      description: The upstream version of the installed nvidia-driver-<branch> package.
      type: str
      sample: "580.142"
    packages:
      description: The NVIDIA packages dpkg knows (C(name), C(version), C(state), C(held), C(branch), C(open)).
      type: list
      elements: dict
    held:
      description: The NVIDIA packages on hold.
      type: list
      elements: str
      sample: [nvidia-driver-580-open]
    run_installer:
      description: Traces of the C(.run) installer (C(present), C(uninstaller), C(log)).
      type: dict
      sample: {present: false, uninstaller: null, log: null}
    cuda_version:
      description: The newest CUDA the driver runs; null for a branch the table does not list.
      type: str
      sample: "13.0"
upgrade:
  description: What the simulated upgrade would do to the driver.
  returned: always
  type: dict
  contains:
    simulated:
      description: The simulated command (O(upgrade)), or C(upgrade_output) when O(upgrade_output) was given.
      type: str
      sample: dist-upgrade
    error:
      description: Why the simulation could not be had; null when it ran.
      type: str
      sample: null
    changes:
      description: The planned changes to NVIDIA packages and kernels (C(action) install, upgrade, remove or purge,
        C(package), C(from), C(to), C(branch), C(open)).
      type: list
      elements: dict
      sample: [{action: upgrade, package: nvidia-driver-580-open, from: 580.95.05-0ubuntu0.24.04.2,
                to: 580.142-0ubuntu0.24.04.1, branch: "580", open: true}]
    driver_version_after:
      description: The driver version after the upgrade.
      type: str
      sample: "580.142"
    cuda_version_after:
      description: The newest CUDA the driver runs after the upgrade.
      type: str
      sample: "13.0"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.serving.plugins.module_utils.driver_policy import (
    ARGUMENT_SPEC,
    evaluate,
    read_file,
    run_installer_evidence,
)


def simulate(module: AnsibleModule) -> tuple[str | None, str]:
    """apt-get's plan as (text, '') or (None, why there is none). NoLocking lets it run beside apt and unprivileged."""
    if module.params["upgrade_output"] is not None:
        return module.params["upgrade_output"], ""
    if module.params["upgrade"] == "none":
        return None, ""
    apt_get = module.get_bin_path("apt-get")
    if not apt_get:
        return None, "apt-get not found"
    command = [apt_get, "-s", "-o", "Debug::NoLocking=1", module.params["upgrade"]]
    # apt translates its messages; the parser reads the untranslated action lines.
    rc, out, err = module.run_command(command, environ_update={"LC_ALL": "C"})
    if rc != 0:
        first = next((line for line in (err or out).splitlines() if line.strip()), "(no output)")
        return None, f"`{' '.join(command)}` failed (exit code {rc}): {first.strip()}"
    return out, ""


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    output, error, warnings = evaluate(
        params,
        version_file=read_file(params["driver_version_file"]),
        status_file=read_file(params["dpkg_status_file"]),
        run_installer=run_installer_evidence(params["run_uninstaller_path"], params["run_installer_log_path"]),
        simulation=simulate(module),
    )
    for warning in warnings:
        module.warn(warning)
    if error:
        module.fail_json(msg=error, **output)
    module.exit_json(**output)


if __name__ == "__main__":
    main()
