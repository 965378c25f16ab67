# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The link role's plan and the doctor's view of a whole cluster, on the controller.

plan(): the role's variables, the host's place in its cluster (the cluster_of filter's answer: members,
rank) and what link_facts read on the box ->
either {"errors": [...]} (nothing on the box has changed yet) or the netplan document to write, the
addresses it gives and the netplan files it replaces.

peers() and cluster_findings(): from what link_facts read on every member, the addresses each member
pings on each link and the findings no single box can make (the two ends of a link differ in MTU, a
link with nobody at the other end).

Defaults follow NVIDIA's connect-two-sparks playbook (updated 7/21/2026,
https://github.com/NVIDIA/dgx-spark-playbooks/blob/main/nvidia/connect-two-sparks/README.md, "Step 3"): one
static /24 per interface, 192.168.100.0/24 for enp1s0f1np1 and 192.168.101.0/24 for enP2p1s0f1np1, node 1
at .10 and node 2 at .11, in /etc/netplan/40-cx7.yaml with mode 0600.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from ansible_collections.sparkfleet.serving.plugins.plugin_utils import cluster

MIN_MTU = 1500
# Netplan reads only files that root alone can read without a warning (netplan 0.106+: "Permissions
# ... are too open"); NVIDIA's playbook sets 0600 too.
NETPLAN_MODE = "0600"


def _cluster_errors(data: Mapping[str, Any]) -> list[str]:
    host, cluster = data["host"], data.get("cluster") or {}
    if not cluster:
        return [f"{host} is in no cluster: expected it in a child group of 'clusters' (under 'spark'), "
                "with the other boxes cabled to it, e.g. clusters: {children: {pair1: {hosts: {spark-a: {}, "
                "spark-b: {}}}}}; add it to one, or leave it out of this play"]
    return []


def subnets(data: Mapping[str, Any], errors: list[str]) -> list[ipaddress.IPv4Network]:
    found = []
    for value in data["subnets"]:
        try:
            network = ipaddress.ip_network(str(value).strip(), strict=True)
        except ValueError as exc:
            errors.append(f"link_subnets: {value!r} is not a network in CIDR notation ({exc}); expected a /24 such "
                          "as 192.168.100.0/24")
            continue
        if network.version != 4 or network.prefixlen != 24:
            errors.append(f"link_subnets: {value} is not an IPv4 /24; expected one /24 per link interface, such as "
                          "192.168.100.0/24 (NVIDIA's connect-two-sparks playbook)")
            continue
        found.append(network)
    return found


def host_numbers(data: Mapping[str, Any], errors: list[str]) -> dict[str, int]:
    """Every member's host number: its link_host_number, or link_first_host_number + its rank."""
    members = data["cluster"]["members"]
    numbers = {}
    for member in members:
        rank = cluster.place(members, member)["rank"]
        explicit = int(data["host_numbers"].get(member) or 0)
        number = explicit or int(data["first_host_number"]) + rank
        if not 1 <= number <= 254:
            how = f"link_host_number {explicit}" if explicit else \
                f"link_first_host_number {data['first_host_number']} + rank {rank}"
            errors.append(f"{member}: host number {number} ({how}) is not a host of a /24; expected 1 to 254: "
                          "set link_host_number for it or a smaller link_first_host_number")
        numbers[member] = number
    clashes: dict[int, list[str]] = {}
    for member, number in numbers.items():
        clashes.setdefault(number, []).append(member)
    for number, hosts in clashes.items():
        if len(hosts) > 1:
            errors.append(f"{' and '.join(hosts)} would both have host number {number} (the same address on every "
                          f"link of cluster {data['cluster']['name']}); expected one number per member: set a "
                          "different link_host_number on one of them")
    return numbers


def link_interfaces(data: Mapping[str, Any], errors: list[str]) -> list[str]:
    host, facts = data["host"], data["facts"]
    present = {i["name"]: i for i in facts.get("interfaces") or []}
    cx7 = ", ".join(f"{i['name']} ({i['operstate']})" for i in present.values() if i["driver"] == "mlx5_core")
    if data["interfaces"]:
        missing = [name for name in data["interfaces"] if name not in present]
        if missing:
            errors.append(
                f"link_interfaces names {', '.join(missing)}, which {host} does not have; found "
                f"{', '.join(sorted(present)) or 'no interface'} (ConnectX-7: {cx7 or 'none'}); expected the names "
                "`ip link` (or `ibdev2netdev`) shows for the cabled port: fix link_interfaces, or leave it empty to "
                "take the ConnectX-7 interfaces whose link is up")
        return list(data["interfaces"])
    if not facts.get("discovered"):
        errors.append(
            f"{host} has no ConnectX-7 interface with a link (driver mlx5_core, operstate up); found ConnectX-7: "
            f"{cx7 or 'none'}; expected the QSFP cable in the same port of both boxes (`ibdev2netdev` shows it Up): "
            "connect it, or name the interfaces in link_interfaces")
    return list(facts.get("discovered") or [])


def replaced_files(data: Mapping[str, Any], names: list[str], errors: list[str]) -> list[str]:
    """Other netplan files that configure the link interfaces: replaced (kept aside, restored on undo) when
    they configure nothing else, refused otherwise (they hold other devices' settings)."""
    replaced = []
    for path, read in sorted((data["facts"].get("netplan_files") or {}).items()):
        if path == data["netplan_path"]:
            continue
        if "error" in read:
            errors.append(f"{path} on {data['host']} cannot be read ({read['error']}); expected a netplan file: fix "
                          "it (`sudo netplan generate` says what is wrong) before the link role runs")
            continue
        mine = sorted(set(read["devices"]) & set(names))
        others = sorted(set(read["devices"]) - set(names))
        if mine and others:
            errors.append(
                f"{path} on {data['host']} configures {', '.join(mine)} (the link) together with "
                f"{', '.join(others)}; expected the link's interfaces in no other netplan file: move their settings "
                f"out of it (the role then writes them to {data['netplan_path']})")
        elif mine:
            replaced.append(path)
    return replaced


def netplan_document(addresses: dict[str, str], mtu: int) -> dict:
    """What netplan needs for a point-to-point link: a static address, no DHCP, no link-local address
    (a 169.254/16 address on each port would give NCCL a second, unroutable choice), the MTU."""
    return {"network": {"version": 2, "ethernets": {
        name: {"addresses": [address], "dhcp4": False, "dhcp6": False, "link-local": [], "mtu": mtu}
        for name, address in addresses.items()}}}


def drift(addresses: Mapping[str, str], mtu: int, facts: Mapping[str, Any]) -> list[str]:
    """How the runtime differs from the plan: an address not in force, another MTU."""
    present = {i["name"]: i for i in facts.get("interfaces") or []}
    found = []
    for name, address in addresses.items():
        interface = present.get(name, {})
        if address not in (interface.get("ipv4") or []):
            found.append(f"{name}: {address} not in force (found {', '.join(interface.get('ipv4') or []) or 'none'})")
        if interface.get("mtu") != mtu:
            found.append(f"{name}: MTU {interface.get('mtu')}, expected {mtu}")
    return found


def plan(data: Mapping[str, Any]) -> dict:
    """The role's inputs -> {"errors": [...]} or {"errors": [], "addresses", "netplan", "replaced", ...}."""
    errors = _cluster_errors(data)
    if errors:
        return {"errors": errors}
    if int(data["mtu"]) < MIN_MTU:
        errors.append(f"link_mtu is {data['mtu']}; expected at least {MIN_MTU} (9000 for the fast path: NCCL over "
                      "RoCE needs jumbo frames on both ends): set link_mtu to 9000")
    networks = subnets(data, errors)
    numbers = host_numbers(data, errors)
    names = link_interfaces(data, errors)
    if len(names) > len(data["subnets"]):
        errors.append(f"{data['host']} has {len(names)} link interfaces ({', '.join(names)}) and link_subnets "
                      f"{len(data['subnets'])}; expected a /24 for each: add one to link_subnets (e.g. "
                      "192.168.102.0/24) or name fewer in link_interfaces")
    replaced = replaced_files(data, names, errors)
    if errors:
        return {"errors": errors}
    number = numbers[data["host"]]
    addresses = {name: f"{network[number]}/24" for name, network in zip(names, networks, strict=False)}
    # The address every other member has on each of this host's link subnets (the firewall lets
    # them in on that interface): from the settings alone, so members outside the run count too.
    peers = {name: {member: str(network[numbers[member]]) for member in data["cluster"]["members"]
                    if member != data["host"]}
             for name, network in zip(names, networks, strict=False)}
    return {
        "errors": [],
        "addresses": addresses,
        "peers": peers,
        "netplan": netplan_document(addresses, int(data["mtu"])),
        "mode": NETPLAN_MODE,
        "replaced": replaced,
        "drift": drift(addresses, int(data["mtu"]), data["facts"]),
        "host_number": number,
        "rank": data["cluster"]["rank"],
    }


def input_errors(data: Mapping[str, Any]) -> list[str]:
    """What plan() refuses in the variables alone, without the box (the check entry point)."""
    errors = _cluster_errors(data)
    if errors:
        return errors
    if int(data["mtu"]) < MIN_MTU:
        errors.append(f"link_mtu is {data['mtu']}; expected at least {MIN_MTU} (9000 for the fast path): set "
                      "link_mtu to 9000")
    subnets(data, errors)
    host_numbers(data, errors)
    return errors


# --- the doctor, across the cluster -----------------------------------------------------------------

def _networks(report: Mapping[str, Any]) -> list[tuple[ipaddress.IPv4Network, str, str, int]]:
    """(network, address, interface, mtu) of every IPv4 address on a member's link interfaces."""
    found = []
    for interface in report.get("interfaces") or []:
        for address in interface.get("ipv4") or []:
            iface = ipaddress.ip_interface(address)
            found.append((iface.network, str(iface.ip), interface["name"], int(interface.get("mtu") or 0)))
    return found


def peers(reports: Mapping[str, Mapping[str, Any]], host: str) -> list[dict]:
    """What `host` pings: every other member's address in a network of one of its link interfaces."""
    mine = _networks(reports.get(host) or {})
    found = []
    for other, report in reports.items():
        if other == host:
            continue
        for network, address, _name, _mtu in _networks(report):
            found.extend({"interface": name, "host": other, "address": address}
                         for own_network, _own, name, _m in mine if own_network == network)
    return found


def finding_line(finding: Mapping[str, Any]) -> str:
    """One finding as one line: severity, check, interface, found, expected, fix."""
    where = f" {finding['interface']}" if finding.get("interface") else ""
    return (f"{str(finding['severity']).upper()} {finding['check']}{where}: {finding['found']}; expected "
            f"{finding['expected']}; fix: {finding['fix']}")


def cluster_findings(reports: Mapping[str, Mapping[str, Any]], host: str, expected_mtu: int) -> list[dict]:
    """Findings about the links `host` is on that need the other ends: MTUs that differ, nobody at the other end."""
    findings = []
    everyone = {member: _networks(report) for member, report in reports.items()}
    for network, _address, name, _mtu in everyone.get(host, []):
        ends = [(member, ifname, mtu) for member, nets in everyone.items()
                for net, _a, ifname, mtu in nets if net == network]
        if len(ends) < 2:
            findings.append({
                "severity": "error", "interface": name, "check": "peer",
                "found": f"no other member of the cluster has an address in {network} ({host} {name})",
                "expected": f"each member of the cluster with an address in {network}",
                "fix": "run the link role on every member (they number themselves by rank), and check that the "
                       "cable is in the same port on both boxes"})
        if len({mtu for _m, _i, mtu in ends}) > 1:
            listed = ", ".join(f"{member} {ifname} {mtu}" for member, ifname, mtu in ends)
            findings.append({
                "severity": "error", "interface": name, "check": "mtu",
                "found": f"the ends of {network} differ in MTU: {listed}",
                "expected": f"MTU {expected_mtu} on every end",
                "fix": "run the link role on every member, or `sudo ip link set <interface> mtu "
                       f"{expected_mtu}` on the ends that differ (and set it in their netplan file)"})
    return findings


def call(name: str, data: object, *args: Any) -> Any:
    """One of this file's public functions by name, on a dict (the filters' entry)."""
    if not isinstance(data, Mapping):
        raise TypeError(f"expected a dict, found {type(data).__name__}")
    return globals()[name](dict(data), *args)
