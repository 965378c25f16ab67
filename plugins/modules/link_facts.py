#!/usr/bin/python
# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: link_facts
short_description: The box's network interfaces, the ConnectX-7 ones with a link, their addresses and the netplan files
version_added: 0.1.0
author: sparkfleet maintainers (@sparkfleet)
description:
  - Reads every network interface from C(/sys/class/net) (driver, PCI address, operstate, MTU, RoCE devices) and its
    IPv4 addresses (C(ip -j addr show)), and which devices each file of the netplan directory configures.
  - RV(discovered) lists the ConnectX-7 interfaces with a link (driver C(mlx5_core), operstate C(up)) in PCI order,
    the order in which NVIDIA's connect-two-sparks playbook gives them their subnets
    (U(https://github.com/NVIDIA/dgx-spark-playbooks/blob/main/nvidia/connect-two-sparks/README.md)).
  - The link role reads this before it changes anything; changes nothing.
options:
  netplan_dir:
    description: The netplan directory whose C(*.yaml) files to read.
    type: path
    default: /etc/netplan
  sys_root:
    description: Where sysfs is mounted (tests point it at a tree of their own).
    type: path
    default: /sys
requirements:
  - C(ip) from iproute2.
  - PyYAML on the box to read netplan files (netplan itself depends on it).
extends_documentation_fragment:
  - sparkfleet.serving.checks.READ_ONLY
"""

EXAMPLES = r"""
- name: Read the interfaces and the netplan files
  sparkfleet.serving.link_facts:
  register: link
"""

RETURN = r"""
interfaces:
  description: Every network interface, by name.
  returned: always
  type: list
  elements: dict
  sample:
    - {name: enp1s0f1np1, driver: mlx5_core, pci: "0000:01:00.1", operstate: up, mtu: 9000,
       roce_devices: [rocep1s0f1], ipv4: [192.168.100.10/24]}
discovered:
  description: The ConnectX-7 interfaces with a link, in PCI order.
  returned: always
  type: list
  elements: str
  sample: [enp1s0f1np1, enP2p1s0f1np1]
netplan_files:
  description: For each C(*.yaml) file of O(netplan_dir), the devices it configures; C(error) when it cannot be read.
  returned: always
  type: dict
  sample:
    /etc/netplan/40-cx7.yaml: {devices: [enP2p1s0f1np1, enp1s0f1np1]}
    /etc/netplan/01-network-manager-all.yaml: {devices: []}
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule

try:
    import yaml
except ImportError:  # reported per file: netplan itself needs PyYAML, so a box without it has no netplan to read
    yaml = None

from ansible_collections.sparkfleet.serving.plugins.module_utils.link import (
    discover,
    netplan_devices,
    parse_ip_addr,
    read_interfaces,
)


def read_netplan(netplan_dir: str) -> dict[str, dict]:
    if yaml is None:
        return {path: {"error": "PyYAML is not installed on the box"}
                for path in sorted(glob.glob(os.path.join(netplan_dir, "*.yaml")))}
    files: dict[str, dict] = {}
    for path in sorted(glob.glob(os.path.join(netplan_dir, "*.yaml"))):
        try:
            with open(path, encoding="utf-8") as handle:
                files[path] = {"devices": netplan_devices(yaml.safe_load(handle))}
        except (OSError, yaml.YAMLError) as exc:
            files[path] = {"error": str(exc).splitlines()[0]}
    return files


def ipv4_addresses(module: AnsibleModule) -> dict[str, list[str]]:
    ip = module.get_bin_path("ip", required=True)
    rc, out, err = module.run_command([ip, "-j", "addr", "show"])
    if rc != 0:
        module.fail_json(msg=f"`ip -j addr show` failed (rc {rc}): {err.strip()}; expected iproute2 4.14 or later")
    return parse_ip_addr(out)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "netplan_dir": {"type": "path", "default": "/etc/netplan"},
            "sys_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    interfaces = read_interfaces(module.params["sys_root"])
    addresses = ipv4_addresses(module)
    for interface in interfaces:
        interface["ipv4"] = addresses.get(interface["name"], [])
    module.exit_json(changed=False, interfaces=interfaces, discovered=discover(interfaces),
                     netplan_files=read_netplan(module.params["netplan_dir"]))


if __name__ == "__main__":
    main()
