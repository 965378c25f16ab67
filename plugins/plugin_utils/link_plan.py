# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The link role's plan and the doctor's view of a whole cluster, on the controller.

plan(): the role's variables, the host's place in its cluster (the cluster_of filter's answer: members,
rank) and what link_facts read on the box ->
either {"errors": [...]} (nothing on the box has changed yet) or the netplan document to write, the
addresses it gives and the netplan files it replaces.

existing() and adoption(): NVIDIA's tools often set the link up first - the connect-two-sparks playbook's
/etc/netplan/40-cx7.yaml (link above), the connect-multiple-sparks one's
(https://github.com/NVIDIA/dgx-spark-playbooks/blob/main/nvidia/playbook-connect-multiple-sparks/assets/cx7-netplan-example.yaml),
NVIDIA Sync's Cluster Assistant's /etc/netplan/99-nvidia-sync-cluster.yaml
(https://docs.nvidia.com/sync/latest/cluster-network-inspection.html). The role takes such a file over (it
configures only the link's ports: kept aside, put back by link_state: absent) and keeps the addresses it
gives when they are right for the whole cluster, so that a working cluster keeps its addresses and
nothing flaps; otherwise it gives its own, and says why.

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

from ansible_collections.sparkfleet.serving.plugins.module_utils.link import port_line
from ansible_collections.sparkfleet.serving.plugins.plugin_utils import cluster

MIN_MTU = 1500
# The MTU of an Ethernet interface whose netplan file sets none (the kernel's default, ETH_DATA_LEN).
DEFAULT_MTU = 1500
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


def _link_only(files: Mapping[str, Any], names: list[str], skip: str = "") -> list[str]:
    """The readable netplan files (but `skip`) that configure some of the link's ports and nothing else."""
    return sorted(path for path, read in files.items()
                  if path != skip and "error" not in read and read.get("devices")
                  and set(read["devices"]) <= set(names))


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


# --- the addresses another tool gave the link --------------------------------------------------------

def _one_ipv4(path: str, name: str, given: list[str]) -> tuple[str | None, list[str]]:
    """The single IPv4 address (with its prefix) a file gives a port, or why it is not usable."""
    found, problems = [], []
    for text in given:
        try:
            iface = ipaddress.ip_interface(text)
        except ValueError:
            problems.append(f"{path} gives {name} {text!r}, not an address with its prefix")
            continue
        if iface.version == 4:
            found.append(iface)
    if len(found) != 1:
        listed = f" ({', '.join(map(str, found))})" if found else " (link-local or DHCP only)"
        return None, [*problems, f"{path} gives {name} {len(found)} static IPv4 addresses{listed}; expected one"]
    iface = found[0]
    # A /31 is a point-to-point link with no network or broadcast address (RFC 3021).
    own = (iface.network.network_address, iface.network.broadcast_address)
    if iface.network.prefixlen == 32:
        problems.append(f"{path} gives {name} {iface}, a /32: no other member can be in its subnet")
    elif iface.network.prefixlen <= 30 and iface.ip in own:
        problems.append(f"{path} gives {name} {iface}, the subnet's own network or broadcast address")
    return str(iface), problems


def _port_settings(name: str, sources: list[str], files: Mapping[str, Any], mtu: int) -> tuple[str | None, list[str]]:
    """The address the source files give one link port, and why it is not usable (netplan would merge two
    files' addresses; a port without MTU mtu would drop NCCL's frames)."""
    given = [path for path in sources if name in files[path]["devices"]]
    if not given:
        return None, [f"{', '.join(sources)} gives {name} nothing"]
    if len(given) > 1:
        return None, [f"{name} is configured by {len(given)} files ({', '.join(given)}): netplan merges their "
                      "addresses"]
    path = given[0]
    settings = (files[path].get("settings") or {}).get(name) or {}
    address, problems = _one_ipv4(path, name, settings.get("addresses") or [])
    if settings.get("mtu") != mtu:
        found = (f"MTU {settings['mtu']}" if settings.get("mtu") is not None
                 else f"no MTU (the kernel's default, {DEFAULT_MTU})")
        problems.append(f"{path} gives {name} {found}; expected link_mtu {mtu}")
    return address, problems


def existing(data: Mapping[str, Any]) -> dict:
    """The addresses another netplan file gives this member's link ports: the files in the netplan
    directory that configure only the link's ports (those the role replaces), or, once the role has
    replaced them, the copies it keeps aside (link_backup_dir) - what adoption() keeps on later runs too.

    -> {} when there is none, else {"files", "addresses" (port -> "a.b.c.d/prefix", the usable ones),
    "problems" (why they cannot be kept as they are), "kept_aside"}."""
    names = link_interfaces(data, [])
    facts = data.get("facts") or {}
    files = facts.get("netplan_files") or {}
    sources = _link_only(files, names, data["netplan_path"])
    kept_aside = not sources
    if kept_aside:
        files = facts.get("backup_netplan_files") or {}
        sources = _link_only(files, names)
    if not sources:
        return {}
    addresses, problems = {}, []
    for name in names:
        address, found = _port_settings(name, sources, files, int(data["mtu"]))
        problems += found
        if address:
            addresses[name] = address
    subnets: dict[str, list[str]] = {}
    for name, address in addresses.items():
        subnets.setdefault(str(ipaddress.ip_interface(address).network), []).append(name)
    problems += [f"{' and '.join(ports)} are both in {network}; expected one subnet per port"
                 for network, ports in subnets.items() if len(ports) > 1]
    return {"files": sources, "addresses": addresses, "problems": problems, "kept_aside": kept_aside}


def _set_by_hand(data: Mapping[str, Any]) -> list[str]:
    """The address variables set away from the role's defaults: addresses set by hand win."""
    found = [f"link_host_number of {member}" for member, number in sorted(data["host_numbers"].items())
             if int(number or 0)]
    defaults = data.get("defaults") or {}
    if "subnets" in defaults and [str(s).strip() for s in data["subnets"]] != [str(s) for s in defaults["subnets"]]:
        found.append("link_subnets")
    if "first_host_number" in defaults and int(data["first_host_number"]) != int(defaults["first_host_number"]):
        found.append("link_first_host_number")
    return [f"addresses are set by hand ({', '.join(found)}), and they win"] if found else []


def _member_problems(members: list[str], known: Mapping[str, dict]) -> list[str]:
    found = []
    for member in members:
        if member in known and not known[member]:
            found.append(f"{member}: no netplan file but the role's gives its link ports their addresses")
        found += [f"{member}: {problem}" for problem in (known.get(member) or {}).get("problems", [])]
    return found


def _networks_of(candidate: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """network -> (port, address without prefix) of one member's candidate addresses."""
    return {str(iface.network): (name, str(iface.ip))
            for name, iface in ((n, ipaddress.ip_interface(a)) for n, a in candidate["addresses"].items())}


def _cluster_problems(found: Mapping[str, dict]) -> list[str]:
    """Across the members: the same subnets on all of them, no address twice in a subnet."""
    networks = {member: _networks_of(candidate) for member, candidate in found.items()}
    problems = []
    if len({frozenset(nets) for nets in networks.values()}) > 1:
        listed = "; ".join(f"{member} {', '.join(sorted(nets)) or 'none'}" for member, nets in networks.items())
        problems.append(f"the members' link subnets differ ({listed}); expected the same subnets on every member")
    holders: dict[tuple[str, str], list[str]] = {}
    for member, nets in networks.items():
        for network, (_name, ip) in nets.items():
            holders.setdefault((network, ip), []).append(member)
    problems += [f"{' and '.join(hosts)} both have {ip} in {network}; expected one address per member"
                 for (network, ip), hosts in holders.items() if len(hosts) > 1]
    return problems


def _listed(addresses: Mapping[str, str]) -> str:
    return ", ".join(f"{name} {address}" for name, address in addresses.items()) or "none"


def _adopted(data: Mapping[str, Any], found: Mapping[str, dict]) -> dict:
    host, mine = data["host"], found[data["host"]]
    networks = {member: _networks_of(candidate) for member, candidate in found.items() if member != host}
    peers = {name: {member: nets[str(ipaddress.ip_interface(address).network)][1]
                    for member, nets in networks.items()}
             for name, address in mine["addresses"].items()}
    where = " (kept aside by an earlier run)" if mine["kept_aside"] else ""
    return {"adopted": True, "files": mine["files"], "addresses": mine["addresses"], "peers": peers,
            "message": (f"kept the addresses {', '.join(mine['files'])}{where} gives the link: "
                        f"{_listed(mine['addresses'])}, MTU {data['mtu']} - right for cluster "
                        f"{data['cluster']['name']} (the same subnets on every member, one address each); "
                        f"{data['netplan_path']} gives the same, so nothing changes on the wire")}


def adoption(data: Mapping[str, Any], own: Mapping[str, str]) -> dict:
    """Whether the members keep the addresses other netplan files give their links (`own`: the role's).

    The same answer on every member, each reading every member's existing() (data["existing"], by host,
    from this run): all keep theirs or none does. {"adopted", "message" (what the run says; empty when no
    member has such a file), "error" (refused: this host's would differ from the role's and a member is
    not in the run to compare with)} and, when adopted, "addresses" and "peers"."""
    host, members = data["host"], data["cluster"]["members"]
    given = data.get("existing") or {}
    # In the cluster's order (by rank), whatever order the readings came in: every member says the same.
    known = {member: existing(data) if member == host else given[member] for member in members
             if member == host or given.get(member) is not None}
    found = {member: candidate for member, candidate in known.items() if candidate}
    if not found:
        return {"adopted": False, "message": "", "error": ""}
    reasons = _set_by_hand(data) + _member_problems(members, known)
    if not reasons:
        reasons = _cluster_problems(found)
    missing = [member for member in members if member not in known]
    mine = known[host]
    files = ", ".join(mine.get("files") or []) or f"the netplan files of {', '.join(found)}"
    if not reasons and not missing:
        return {**_adopted(data, found), "error": ""}
    if not reasons and mine.get("addresses") != dict(own):
        return {"adopted": False, "message": "", "error": (
            f"{files} on {host} gives the link {_listed(mine['addresses'])}, not the role's {_listed(own)}, and "
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not in this run to tell whether theirs "
            f"agree; expected every member of cluster {data['cluster']['name']} in the run, so that the role keeps "
            "those addresses on all of them or on none: run without --limit (or with the whole cluster), or set "
            "link_host_number on each member to give the role's addresses")}
    why = "; ".join(reasons) or (f"{', '.join(missing)} not in this run to compare with, and the role's are the "
                                 f"same on {host}")
    return {"adopted": False, "error": "", "message": (
        f"did not keep the addresses of {files}: {why}; the role gives its own: {_listed(own)}, MTU {data['mtu']} "
        "(link_subnets and the members' host numbers)")}


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
    kept = adoption(data, addresses)
    if kept["error"]:
        return {"errors": [kept["error"]]}
    if kept["adopted"]:
        addresses, peers = kept["addresses"], kept["peers"]
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
        "adoption": {"adopted": kept["adopted"], "message": kept["message"]},
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
    """One finding as one line: severity, check, interface, found, expected, fix, and the netplan files
    that configure the interface (what to look at, or edit, first)."""
    where = f" {finding['interface']}" if finding.get("interface") else ""
    files = (f" [{port_line(finding['interface'], finding['configured_by'])}]"
             if finding.get("interface") and "configured_by" in finding else "")
    return (f"{str(finding['severity']).upper()} {finding['check']}{where}: {finding['found']}; expected "
            f"{finding['expected']}; fix: {finding['fix']}{files}")


def _configured_by(report: Mapping[str, Any], name: str) -> dict:
    """{"configured_by": [...]} of a member's link interface as link_facts read it ({} when not read)."""
    for interface in report.get("interfaces") or []:
        if interface.get("name") == name and "configured_by" in interface:
            return {"configured_by": list(interface["configured_by"])}
    return {}


def cluster_findings(reports: Mapping[str, Mapping[str, Any]], host: str, expected_mtu: int) -> list[dict]:
    """Findings about the links `host` is on that need the other ends: MTUs that differ, nobody at the other end."""
    findings = []
    everyone = {member: _networks(report) for member, report in reports.items()}
    for network, _address, name, _mtu in everyone.get(host, []):
        files = _configured_by(reports.get(host) or {}, name)
        ends = [(member, ifname, mtu) for member, nets in everyone.items()
                for net, _a, ifname, mtu in nets if net == network]
        if len(ends) < 2:
            findings.append({
                "severity": "error", "interface": name, "check": "peer",
                "found": f"no other member of the cluster has an address in {network} ({host} {name})",
                "expected": f"each member of the cluster with an address in {network}",
                "fix": "run the link role on every member (they number themselves by rank), and check that the "
                       "cable is in the same port on both boxes", **files})
        if len({mtu for _m, _i, mtu in ends}) > 1:
            listed = ", ".join(f"{member} {ifname} {mtu}" for member, ifname, mtu in ends)
            findings.append({
                "severity": "error", "interface": name, "check": "mtu",
                "found": f"the ends of {network} differ in MTU: {listed}",
                "expected": f"MTU {expected_mtu} on every end",
                "fix": "run the link role on every member, or `sudo ip link set <interface> mtu "
                       f"{expected_mtu}` on the ends that differ (and set it in their netplan file)", **files})
    return findings


def call(name: str, data: object, *args: Any) -> Any:
    """One of this file's public functions by name, on a dict (the filters' entry)."""
    if not isinstance(data, Mapping):
        raise TypeError(f"expected a dict, found {type(data).__name__}")
    return globals()[name](dict(data), *args)
