#!/usr/bin/python
# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_requirements
short_description: Check GPU facts against driver, CUDA, GPU model and architecture requirements
version_added: 0.1.0
author: sparkfleet maintainers (@sparkfleet)
description:
  - Compares the facts of M(sparkfleet.serving.gpu_facts) with requirements and reports
    B(every) unmet one at once, each with what was found, what is required and how to fix it.
  - Versions compare numerically per component (580.95.05 < 580.126.09 < 580.142).
  - Fails when a requirement is not met, unless O(fail_on_error=false), in which case the
    problems are only returned (the preflight role collects them with other checks).
options:
  facts:
    description:
      - The GPU facts, C(ansible_facts.sparkfleet_gpu) as returned by M(sparkfleet.serving.gpu_facts).
    type: dict
    required: true
  min_driver_version:
    description:
      - Oldest acceptable NVIDIA driver. Empty to not check.
    type: str
  min_cuda_version:
    description:
      - Oldest acceptable CUDA version B(supported by the driver) (the C(nvidia-smi) header),
        which is what a CUDA container image needs. Empty to not check.
    type: str
  min_toolkit_version:
    description:
      - Oldest acceptable installed CUDA toolkit (C(nvcc)). Empty to not check (a vLLM
        container brings its own CUDA libraries).
    type: str
  expected_gpu_names:
    description:
      - Every GPU's name must contain one of these (case-insensitive), for example C(GB10). Empty to accept any.
    type: list
    elements: str
    default: []
  expected_compute_capabilities:
    description:
      - Every GPU's compute capability must be one of these, for example C(12.1). Empty to accept any.
    type: list
    elements: str
    default: []
  min_gpu_count:
    description:
      - Fewest GPUs the box must show.
    type: int
    default: 1
  expected_architectures:
    description:
      - CPU architectures the configuration is made for. Empty to accept any.
    type: list
    elements: str
    default: []
  allowed_architectures:
    description:
      - Architectures accepted with a warning although not expected (for example C(x86_64) for a test box).
    type: list
    elements: str
    default: []
  require_container_toolkit:
    description:
      - Whether a missing NVIDIA Container Toolkit is an error (otherwise a warning).
    type: bool
    default: false
seealso:
  - module: sparkfleet.serving.gpu_facts
extends_documentation_fragment:
  - sparkfleet.serving.checks.READ_ONLY
  - sparkfleet.serving.checks.FAIL_ON_ERROR
  - sparkfleet.serving.checks.REPORT_WARNINGS
"""

EXAMPLES = r"""
- name: Gather GPU facts
  sparkfleet.serving.gpu_facts:

- name: Require a DGX Spark with driver 580 and CUDA 13.0
  sparkfleet.serving.gpu_requirements:
    facts: "{{ ansible_facts['sparkfleet_gpu'] }}"
    min_driver_version: "580"
    min_cuda_version: "13.0"
    expected_gpu_names: [GB10]
    expected_compute_capabilities: ["12.1"]
    expected_architectures: [aarch64]
    allowed_architectures: [x86_64]
"""

RETURN = r"""
passed:
  description: Whether every requirement is met.
  returned: always
  type: bool
  sample: false
problems:
  description: Every unmet requirement.
  returned: always
  type: list
  elements: dict
  contains:
    requirement:
      description: What was checked.
      type: str
      sample: NVIDIA driver
    found:
      description: What the box has.
      type: str
      sample: 535.247.01 (nvidia-smi)
    required:
      description: What is required.
      type: str
      sample: ">= 580"
    fix:
      description: How to fix it.
      type: str
      sample: upgrade the NVIDIA driver (...), then reboot
    message:
      description: The whole sentence.
      type: str
      sample: "NVIDIA driver: found 535.247.01 (nvidia-smi), required >= 580. Fix: upgrade the NVIDIA driver ..."
warnings_found:
  description: Conditions accepted with a warning (also emitted as Ansible warnings).
  returned: always
  type: list
  elements: str
  sample: ["architecture x86_64 is allowed but not the expected aarch64: ..."]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.serving.plugins.module_utils.gpu_requirements import ARGUMENT_SPEC, evaluate


def main() -> None:
    # The preflight role runs this check in the sparkfleet.serving.gpu_requirements action, on
    # the controller; this module is the same check for anyone calling it on a box.
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    output, error, warnings = evaluate(module.params)
    for warning in warnings:
        module.warn(warning)
    if error:
        module.fail_json(msg=error, **output)
    module.exit_json(**output)


if __name__ == "__main__":
    main()
