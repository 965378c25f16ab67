#!/usr/bin/python
# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather NVIDIA GPU, driver, CUDA, memory and container toolkit facts
version_added: 0.1.0
author: sparkfleet maintainers (@sparkfleet)
description:
  - Reads what a box says about its NVIDIA GPUs without changing anything (check mode too).
  - Runs C(nvidia-smi) (the table for the CUDA version the driver supports, and
    C(--query-gpu) for index, name, UUID, driver, compute capability, memory and PCI bus id).
  - Finds C(nvcc) on E(PATH) or under C(/usr/local/cuda*/bin) (where it lives on a DGX Spark,
    not on E(PATH) for non-login SSH) and reports the newest toolkit.
  - Reads the kernel module's version file for the module flavour (open or proprietary),
    C(/proc/meminfo) for the memory the GPU shares on unified-memory boxes (GB10), the
    architecture, and whether the NVIDIA Container Toolkit is installed.
  - On a box without a working GPU it does not fail; it returns O(ignore:present=false) with
    the reason (nvidia-smi missing, driver not loaded, no device, ...).
  - The facts are returned as C(ansible_facts.sparkfleet_gpu), next to the Ansible facts
    O(gather_subset) asks for.
options:
  nvidia_smi:
    description:
      - Path of C(nvidia-smi). Looked up on E(PATH) when not given.
    type: path
  cuda_search_globs:
    description:
      - Where to look for C(nvcc) besides E(PATH).
    type: list
    elements: str
    default: ['/usr/local/cuda*/bin/nvcc']
  driver_version_file:
    description:
      - The NVIDIA kernel module's version file.
      - The simulated Spark of the test bed keeps it at
        C(/var/lib/sparkfleet-sim/proc/driver/nvidia/version) because procfs cannot be faked.
    type: path
    default: /proc/driver/nvidia/version
  meminfo_path:
    description:
      - The meminfo file to read MemTotal and MemAvailable from.
    type: path
    default: /proc/meminfo
  command_timeout:
    description:
      - Seconds to wait for each C(nvidia-smi) or C(nvcc) call (a hung driver must not hang the play).
    type: int
    default: 30
  gather_subset:
    description:
      - Also collect these subsets of Ansible's own facts, with the collectors and the meaning
        M(ansible.builtin.setup) gives O(ansible.builtin.setup#module:gather_subset) (for example
        V(min) and V(network)), in the same call.
      - A play that needs no more than these can set C(gather_facts) to V(false) and saves one
        round trip per host.
      - Empty (the default) collects none of them.
    type: list
    elements: str
    default: []
  gather_timeout:
    description:
      - Seconds each fact collector of O(gather_subset) may take, as in M(ansible.builtin.setup).
    type: int
    default: 10
  fact_path:
    description:
      - Where the V(local) collector of O(gather_subset) (part of V(min)) reads C(*.fact) files, as in
        M(ansible.builtin.setup).
    type: path
    default: /etc/ansible/facts.d
attributes:
  facts:
    support: full
    description: Returns C(ansible_facts.sparkfleet_gpu).
notes:
  - On GB10 C(nvidia-smi) reports memory as C([N/A]) / C(Not Supported); the module then
    sets O(ignore:unified_memory=true) and the only meaningful memory figures are those of meminfo.
seealso:
  - module: sparkfleet.serving.gpu_requirements
  - module: sparkfleet.serving.serving_plan
extends_documentation_fragment:
  - sparkfleet.serving.checks.READ_ONLY
"""

EXAMPLES = r"""
- name: Gather GPU facts
  sparkfleet.serving.gpu_facts:

- name: Gather GPU facts and, in the same call, what gather_subset [min, network] of setup gathers
  sparkfleet.serving.gpu_facts:
    gather_subset: [min, network]

- name: Show the driver and the CUDA version it supports
  ansible.builtin.debug:
    msg: >-
      {{ ansible_facts['sparkfleet_gpu']['driver_version'] }} /
      CUDA {{ ansible_facts['sparkfleet_gpu']['cuda_driver_version'] }}
"""

RETURN = r"""
ansible_facts:
  description: Facts about the box's NVIDIA GPUs.
  returned: always
  type: dict
  contains:
    sparkfleet_gpu:
      description: GPU, driver, CUDA, memory and container toolkit facts.
      returned: always
      type: dict
      contains:
        present:
          description: Whether a working NVIDIA GPU answered.
          type: bool
          sample: true
        reason:
          description: Why no GPU is usable; empty when O(ignore:present=true).
          type: str
          sample: NVIDIA driver not loaded (nvidia-smi could not communicate with the driver)
        count:
          description: Number of GPUs.
          type: int
          sample: 1
        gpus:
          description: One entry per GPU (index, name, uuid, driver_version, compute_cap, memory_total_mib, pci_bus_id).
          type: list
          elements: dict
          sample:
            - index: 0
              name: NVIDIA GB10
              uuid: GPU-00000000-0000-0000-0000-000000000000
              driver_version: '580.142'
              compute_cap: '12.1'
              memory_total_mib: null
              pci_bus_id: '0000000F:01:00.0'
        names:
          description: Distinct GPU names.
          type: list
          elements: str
          sample: [NVIDIA GB10]
        compute_caps:
          description: Distinct compute capabilities.
          type: list
          elements: str
          sample: ['12.1']
        driver_version:
          description: NVIDIA driver version, as nvidia-smi reports it.
          type: str
          sample: '580.142'
        cuda_driver_version:
          description: Newest CUDA version the driver supports (nvidia-smi header), not the installed toolkit.
          type: str
          sample: '13.0'
        toolkit:
          description: The newest CUDA toolkit found (present, version, full_version, path, candidates).
          type: dict
          sample: {present: true, version: '13.0', full_version: 13.0.88, path: /usr/local/cuda-13.0/bin/nvcc,
                   candidates: [/usr/local/cuda-13.0/bin/nvcc]}
        kernel_module:
          description: >-
            From the kernel module's version file (readable, path, version, flavour open/proprietary,
            architecture).
          type: dict
          sample: {readable: true, path: /proc/driver/nvidia/version, version: '580.142', flavour: open,
                   architecture: aarch64}
        architecture:
          description: Machine architecture of the box.
          type: str
          sample: aarch64
        unified_memory:
          description: Whether the GPU shares system memory (GB10).
          type: bool
          sample: true
        memory:
          description: >-
            From meminfo, in bytes (total_bytes, available_bytes, free_bytes,
            used_bytes = total - available, source).
          type: dict
          sample: {total_bytes: 130663677952, available_bytes: 126743767040, free_bytes: 124130443264,
                   used_bytes: 3919910912, source: /proc/meminfo}
        container_toolkit:
          description: Whether the NVIDIA Container Toolkit is installed (present, evidence, package_version).
          type: dict
          sample: {present: true, evidence: [nvidia-ctk at /usr/bin/nvidia-ctk], package_version: 1.18.0-1}
        nvidia_smi:
          description: Path of the nvidia-smi that was run, or null.
          type: str
          sample: /usr/bin/nvidia-smi
"""

import ast
import glob
import inspect
import os
import platform
import textwrap

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.facts import ansible_collector, compat, default_collectors
from ansible.module_utils.facts.collector import CollectorNotFoundError, CycleFoundInFactDeps, UnresolvedFactDep
from ansible.module_utils.facts.namespace import PrefixFactNamespace

from ansible_collections.sparkfleet.serving.plugins.module_utils.gpu_facts import (
    QUERY_FIELDS,
    build_facts,
    choose_toolkit,
    cuda_dir_version,
    parse_meminfo,
    parse_nvcc_version,
    summarize_container_toolkit,
)
from ansible_collections.sparkfleet.serving.plugins.module_utils.inputs import InputError, check_range, read_text_file

CONTAINER_TOOLKIT_TOOLS = ("nvidia-container-runtime", "nvidia-ctk", "nvidia-container-cli")


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def run(module: AnsibleModule, argv: list[str]) -> tuple[int | None, str, str]:
    """Run a tool with a time limit; rc None when it cannot be started at all."""
    if not (os.path.isfile(argv[0]) and os.access(argv[0], os.X_OK)):
        return None, "", f"{argv[0]}: not an executable file"
    # A hung driver must not hang the play; without coreutils' timeout, run it plainly.
    limit = module.get_bin_path("timeout")
    prefix = [limit, str(module.params["command_timeout"])] if limit else []
    rc, out, err = module.run_command([*prefix, *argv], environ_update={"LC_ALL": "C"})
    return rc, out, err


def find_toolkits(module: AnsibleModule) -> list[dict]:
    """nvcc on PATH first, then the globs; each with the version it reports."""
    paths: list[str] = []
    on_path = module.get_bin_path("nvcc")
    if on_path:
        paths.append(on_path)
    for pattern in module.params["cuda_search_globs"]:
        paths.extend(sorted(glob.glob(pattern)))
    # /usr/local/cuda is a symlink to one of the versioned directories: run each nvcc once.
    seen: set[str] = set()
    candidates = []
    for path in paths:
        real = os.path.realpath(path)
        if real in seen or not os.access(path, os.X_OK):
            continue
        seen.add(real)
        rc, out, _err = run(module, [path, "--version"])
        parsed = parse_nvcc_version(out) if rc == 0 else {"version": None, "full_version": None}
        version = parsed["version"] or cuda_dir_version(path)
        if version is not None:
            candidates.append({"path": path, "version": version, "full_version": parsed["full_version"]})
    return candidates


def container_toolkit(module: AnsibleModule) -> dict:
    binaries = {name: module.get_bin_path(name) for name in CONTAINER_TOOLKIT_TOOLS}
    dpkg_status = None
    dpkg = module.get_bin_path("dpkg-query")
    if dpkg:
        rc, out, _err = module.run_command([dpkg, "-W", "-f", "${Status} ${Version}", "nvidia-container-toolkit"])
        dpkg_status = out.strip() if rc == 0 else None
    return summarize_container_toolkit(binaries, dpkg_status)


def read_meminfo(path: str) -> str | None:
    """meminfo text; None when absent; InputError when it is not a meminfo file."""
    expected = "a /proc/meminfo file with a 'MemTotal: <n> kB' line"
    text = read_text_file(path, "meminfo_path", expected)
    if text is not None and parse_meminfo(text)["total_bytes"] is None:
        raise InputError(f"meminfo_path {path} has no usable MemTotal line; expected {expected}")
    return text


def check_options(params: dict) -> str | None:
    """The meminfo text, after checking the options AnsibleModule cannot."""
    check_range(params["command_timeout"], "command_timeout", low=1)
    smi = params["nvidia_smi"]
    # A path that does not exist is a fact (nvidia-smi not installed); one that exists and cannot run is a mistake.
    if smi and os.path.exists(smi) and not (os.path.isfile(smi) and os.access(smi, os.X_OK)):
        raise InputError(f"nvidia_smi {smi} exists but is not an executable file; expected the nvidia-smi binary")
    return read_meminfo(params["meminfo_path"])


def setup_minimal_subset() -> frozenset[str]:
    """The collectors ansible.builtin.setup gathers for "min", as this ansible-core defines them.

    ansible-core keeps that set in one expression, minimal_gather_subset, written the same in
    setup's main() and in module_utils.facts.compat.ansible_facts; the module reads it from the
    latter's source (shipped with every module that imports it) so that it follows the
    ansible-core release on the controller instead of a copy that could drift.
    """
    tree = ast.parse(textwrap.dedent(inspect.getsource(compat.ansible_facts)))
    for node in ast.walk(tree):
        names = [getattr(target, "id", "") for target in getattr(node, "targets", [])]
        if isinstance(node, ast.Assign) and "minimal_gather_subset" in names:
            return frozenset(ast.literal_eval(node.value.args[0]))
    raise InputError(
        "gather_subset: this ansible-core has no minimal_gather_subset in module_utils.facts.compat, so "
        "setup's min subset is unknown here; expected an ansible-core whose compat module defines it, as "
        "2.19 does. Leave gather_subset empty and let the play gather its facts"
    )


def ansible_facts(module: AnsibleModule) -> dict:
    """The facts setup would return for this gather_subset, from the same collectors and names."""
    subset = module.params["gather_subset"]
    if not subset:
        return {}
    try:
        collector = ansible_collector.get_ansible_collector(
            all_collector_classes=default_collectors.collectors,
            namespace=PrefixFactNamespace(namespace_name="ansible", prefix="ansible_"),
            filter_spec=[],
            gather_subset=subset,
            gather_timeout=module.params["gather_timeout"],
            minimal_gather_subset=setup_minimal_subset(),
        )
    except (TypeError, CollectorNotFoundError, CycleFoundInFactDeps, UnresolvedFactDep) as err:
        raise InputError(f"gather_subset {subset}: {err}; expected what setup takes, such as min or network") from err
    return collector.collect(module=module)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi": {"type": "path"},
            "cuda_search_globs": {"type": "list", "elements": "str", "default": ["/usr/local/cuda*/bin/nvcc"]},
            "driver_version_file": {"type": "path", "default": "/proc/driver/nvidia/version"},
            "meminfo_path": {"type": "path", "default": "/proc/meminfo"},
            "command_timeout": {"type": "int", "default": 30},
            "gather_subset": {"type": "list", "elements": "str", "default": []},
            "gather_timeout": {"type": "int", "default": 10},
            "fact_path": {"type": "path", "default": "/etc/ansible/facts.d"},
        },
        supports_check_mode=True,
    )
    try:
        meminfo_text = check_options(module.params)
        setup_facts = ansible_facts(module)
    except InputError as exc:
        module.fail_json(msg=str(exc), changed=False)
    smi = module.params["nvidia_smi"] or module.get_bin_path("nvidia-smi")
    smi_rc, smi_query, smi_table, smi_err = None, "", "", ""
    if smi:
        query = f"--query-gpu={','.join(QUERY_FIELDS)}"
        smi_rc, smi_query, smi_err = run(module, [smi, query, "--format=csv,noheader,nounits"])
        if smi_rc == 0:
            _rc, smi_table, _err = run(module, [smi])

    candidates = find_toolkits(module)
    facts = build_facts(
        smi_rc=smi_rc,
        smi_query=smi_query,
        smi_table=smi_table,
        smi_stderr=smi_err,
        toolkit=choose_toolkit(candidates),
        toolkit_candidates=candidates,
        driver_version_text=read_text(module.params["driver_version_file"]),
        driver_version_path=module.params["driver_version_file"],
        meminfo_text=meminfo_text,
        meminfo_path=module.params["meminfo_path"],
        architecture=platform.machine(),
        container_toolkit=container_toolkit(module),
        nvidia_smi_path=smi,
    )
    module.exit_json(changed=False, ansible_facts=setup_facts | {"sparkfleet_gpu": facts})


if __name__ == "__main__":
    main()
