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
    IPv4 addresses (C(ip -j addr show)), and which devices each file of the netplan directory configures, with the
    addresses and the MTU it gives each; each interface lists the netplan files that configure it.
  - The files another tool wrote for the link and the link role kept aside (O(backup_dir)) are read the same way (the
    role keeps their addresses when they are right for the cluster).
  - RV(discovered) lists the ConnectX-7 interfaces with a link (driver C(mlx5_core), operstate C(up)) in PCI order,
    the order in which NVIDIA's connect-two-sparks playbook gives them their subnets
    (U(https://github.com/NVIDIA/dgx-spark-playbooks/blob/main/nvidia/connect-two-sparks/README.md)).
  - The link role reads this before it changes anything; changes nothing.
options:
  netplan_dir:
    description: The netplan directory whose C(*.yaml) files to read.
    type: path
    default: /etc/netplan
  backup_dir:
    description: Where the link role keeps the netplan files it replaced (its C(link_backup_dir)); their C(*.yaml) files
      are read into RV(backup_netplan_files). Empty reads none.
    type: path
    default: ""
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
  description: Every network interface, by name; C(configured_by) lists the files of O(netplan_dir) that configure it.
  returned: always
  type: list
  elements: dict
  sample:
    - {name: enp1s0f1np1, driver: mlx5_core, pci: "0000:01:00.1", operstate: up, mtu: 9000,
       roce_devices: [rocep1s0f1], ipv4: [192.168.100.10/24], configured_by: [/etc/netplan/40-cx7.yaml]}
discovered:
  description: The ConnectX-7 interfaces with a link, in PCI order.
  returned: always
  type: list
  elements: str
  sample: [enp1s0f1np1, enP2p1s0f1np1]
netplan_files:
  description: For each C(*.yaml) file of O(netplan_dir), the devices it configures and, in C(settings), the addresses
    and the MTU (null when the file sets none) it gives each; C(error) when it cannot be read.
  returned: always
  type: dict
  sample:
    /etc/netplan/40-cx7.yaml:
      devices: [enp1s0f1np1]
      settings: {enp1s0f1np1: {addresses: [192.168.100.10/24], mtu: 9000}}
    /etc/netplan/01-network-manager-all.yaml: {devices: [], settings: {}}
backup_netplan_files:
  description: The C(*.yaml) files of O(backup_dir), read as RV(netplan_files); empty without O(backup_dir).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.serving.plugins.module_utils.link import (
    configured_by,
    discover,
    parse_ip_addr,
    read_interfaces,
    read_netplan,
)


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
            "backup_dir": {"type": "path", "default": ""},
            "sys_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    interfaces = read_interfaces(module.params["sys_root"])
    addresses = ipv4_addresses(module)
    netplan = read_netplan(module.params["netplan_dir"])
    for interface in interfaces:
        interface["ipv4"] = addresses.get(interface["name"], [])
        interface["configured_by"] = configured_by(netplan, interface["name"])
    backup_dir = module.params["backup_dir"]
    module.exit_json(changed=False, interfaces=interfaces, discovered=discover(interfaces), netplan_files=netplan,
                     backup_netplan_files=read_netplan(backup_dir) if backup_dir else {})


if __name__ == "__main__":
    main()
