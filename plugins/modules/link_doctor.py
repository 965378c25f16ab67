#!/usr/bin/python
# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: link_doctor
short_description: What is wrong with a DGX Spark's ConnectX-7 link to the other boxes of its cluster, and the fix
version_added: 0.1.0
author: sparkfleet maintainers (@sparkfleet)
description:
  - For each link interface, read now - the link is up (C(operstate)), its MTU is O(mtu), it has an IPv4 address, it has
    a RoCE device (C(/sys/class/net/IF/device/infiniband/*)) and the RoCE v2 GID index of its address
    (C(/sys/class/infiniband/DEV/ports/1/gids/*) and C(gid_attrs/types/*), as the kernel documents them in
    C(Documentation/ABI/stable/sysfs-class-infiniband)).
  - Which files of O(netplan_dir) configure each link interface - two is an error (netplan merges them, the addresses
    of both on the port), none a warning (what is in force does not survive a reboot) - named in each finding about
    the interface and in RV(report).
  - Then a don't-fragment ping filling one frame (C(ping -M do -s MTU-28 -c 1 -W 1 -I IF PEER)) to every peer
    address of O(peers) - a link whose two ends differ in MTU passes small packets and fails this one, as NCCL's large
    transfers fail (C(IBV_WC_RETRY_EXC_ERR)).
  - Each problem is a finding with its severity, what was found, what was expected and the fix. The module never fails
    on findings; the caller decides. Changes nothing.
options:
  interfaces:
    description: The link interfaces to examine. Empty examines the ConnectX-7 interfaces with a link (driver
      C(mlx5_core), operstate C(up)).
    type: list
    elements: str
    default: []
  mtu:
    description: The MTU the link needs.
    type: int
    default: 9000
  peers:
    description: The addresses to ping, each C(interface) (from which), C(host) (the peer's inventory name, for the
      messages) and C(address).
    type: list
    elements: dict
    default: []
  require_roce:
    description: Whether an interface without a RoCE device is an error (V(true)) or a warning.
    type: bool
    default: true
  host:
    description: This box's name in the messages; the node name by default.
    type: str
    default: ""
  netplan_dir:
    description: The netplan directory whose C(*.yaml) files to read.
    type: path
    default: /etc/netplan
  sys_root:
    description: Where sysfs is mounted (tests point it at a tree of their own).
    type: path
    default: /sys
requirements:
  - C(ip) from iproute2 and C(ping) from iputils (C(-M do)).
  - PyYAML on the box to read netplan files (netplan itself depends on it).
extends_documentation_fragment:
  - sparkfleet.serving.checks.READ_ONLY
"""

EXAMPLES = r"""
- name: Examine the link
  sparkfleet.serving.link_doctor:
    interfaces: [enp1s0f1np1]
    peers:
      - {interface: enp1s0f1np1, host: spark-b, address: 192.168.100.11}
  register: doctor
"""

RETURN = r"""
findings:
  description: The problems found, each with its fix; empty when the link is ready. A finding about an interface has
    C(configured_by), the netplan files that configure it.
  returned: always
  type: list
  elements: dict
  sample:
    - severity: error
      interface: enp1s0f1np1
      check: mtu
      found: MTU 1500 on spark-b enp1s0f1np1
      expected: "9000"
      fix: run the link role (playbooks/link.yml) on spark-b, or `sudo ip link set enp1s0f1np1 mtu 9000` there now ...
      configured_by: [/etc/netplan/40-sparkfleet-link.yaml]
interfaces:
  description: What was read of each examined interface (as M(sparkfleet.serving.link_facts) returns it), with
    C(gid_index) (by IPv4 address, the RoCE v2 GID index or null) and C(configured_by).
  returned: always
  type: list
  elements: dict
pings:
  description: Each ping made, C(interface), C(host), C(address) and C(ok).
  returned: always
  type: list
  elements: dict
report:
  description: One line for each examined interface - the netplan files that configure it - then one for each peer
    pinged - whether it answered the don't-fragment ping (a cluster through a switch has a peer per other member).
  returned: always
  type: list
  elements: str
  sample: ["enp1s0f1np1: configured by /etc/netplan/40-cx7.yaml",
           "enp1s0f1np1 -> spark-b 192.168.100.11: don't-fragment ping of 8972 bytes answered"]
"""

import os
import platform

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.serving.plugins.module_utils.link import (
    configured_by,
    discover,
    finding,
    local_findings,
    netplan_findings,
    parse_ip_addr,
    peer_line,
    ping_command,
    ping_finding,
    port_line,
    read_interface,
    read_interfaces,
    read_netplan,
)


def with_files(findings: list[dict], netplan: dict[str, dict]) -> list[dict]:
    """Each finding about an interface, with the netplan files that configure it (what to look at or edit)."""
    return [{**found, "configured_by": configured_by(netplan, found["interface"])} if found["interface"] else found
            for found in findings]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "interfaces": {"type": "list", "elements": "str", "default": []},
            "mtu": {"type": "int", "default": 9000},
            "peers": {"type": "list", "elements": "dict", "default": []},
            "require_roce": {"type": "bool", "default": True},
            "host": {"type": "str", "default": ""},
            "netplan_dir": {"type": "path", "default": "/etc/netplan"},
            "sys_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    params = module.params
    host = params["host"] or platform.node()
    sys_root = params["sys_root"]
    names = params["interfaces"] or discover(read_interfaces(sys_root))
    ip = module.get_bin_path("ip", required=True)
    rc, out, err = module.run_command([ip, "-j", "addr", "show"])
    if rc != 0:
        module.fail_json(msg=f"`ip -j addr show` failed (rc {rc}): {err.strip()}")
    addresses = parse_ip_addr(out)
    netplan = read_netplan(params["netplan_dir"])
    settings = {"mtu": params["mtu"], "require_roce": params["require_roce"], "sys_root": sys_root}
    findings: list[dict] = []
    examined: list[dict] = []
    if not names:
        findings.append(finding("error", "", "link", (
            f"no ConnectX-7 interface with a link on {host}", "an mlx5_core interface whose operstate is up",
            "connect the QSFP cable (the same port on both boxes) and check `ibdev2netdev`")))
    for name in names:
        if not os.path.isdir(os.path.join(sys_root, "class", "net", name)):
            findings.append(finding("error", name, "link", (
                f"no interface {name} on {host}", "the link interface",
                "name an interface that `ip link` shows in link_interfaces")))
            continue
        interface = read_interface(sys_root, name)
        interface["ipv4"] = addresses.get(name, [])
        files = configured_by(netplan, name)
        found, gids = local_findings(host, interface, settings)
        findings.extend(found + netplan_findings(host, name, files, params["netplan_dir"]))
        examined.append({**interface, "gid_index": gids, "configured_by": files})
    pings = []
    ping = module.get_bin_path("ping")
    if params["peers"] and not ping:
        module.fail_json(msg=(
            f"ping is not installed on {host}: the doctor sends a don't-fragment ping of a full frame to every "
            "other member (ping -M do, from iputils); install the iputils-ping package (DGX OS has it) and run "
            "again"), findings=with_files(findings, netplan), interfaces=examined)
    for peer in params["peers"]:
        rc, out, err = module.run_command(ping_command(ping, peer["interface"], peer["address"], params["mtu"]))
        pings.append({**peer, "ok": rc == 0})
        problem = ping_finding(host, peer, params["mtu"], (rc, out + err))
        if problem:
            findings.append(problem)
    report = [port_line(i["name"], i["configured_by"]) for i in examined]
    report += [peer_line(peer, params["mtu"], peer["ok"]) for peer in pings]
    module.exit_json(changed=False, findings=with_files(findings, netplan), interfaces=examined, pings=pings,
                     report=report)


if __name__ == "__main__":
    main()
