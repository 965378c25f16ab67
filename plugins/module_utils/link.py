# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the link role and its doctor read on a box: the network interfaces from sysfs, their IPv4
addresses (`ip -j addr`), the RoCE device behind each and the GID index of its IPv4 address, the
netplan files that configure them; and the doctor's findings from those readings.

Runs on the box (the modules link_facts and link_doctor). Standard library only.

The sysfs layout read here is the kernel's documented one:
- /sys/class/net/<if>/{operstate,mtu,device,device/driver}: Documentation/ABI/testing/sysfs-class-net
  (`device` links to the PCI function, whose name is its PCI address; `device/driver` to its driver);
- /sys/class/net/<if>/device/infiniband/<ibdev>: the RDMA device the same PCI function registers
  (drivers/infiniband/core/device.c puts it under the parent device);
- /sys/class/infiniband/<ibdev>/ports/<port>/gids/<index>, gid_attrs/types/<index> ("IB/RoCE v1" or
  "RoCE v2") and gid_attrs/ndevs/<index>: Documentation/ABI/stable/sysfs-class-infiniband.

Netplan reads every *.yaml file and merges them in the order of their names: a later file's scalar
(the MTU) overrides an earlier one's, sequences (the addresses) are concatenated (netplan-generate(8),
"HANDLING MULTIPLE FILES", https://manpages.ubuntu.com/manpages/noble/man8/netplan-generate.8.html).
Two files configuring one port therefore give it the addresses of both: the doctor reports it.
"""

from __future__ import annotations

import glob
import ipaddress
import json
import os
import re

try:
    import yaml
except ImportError:  # reported per file: netplan itself needs PyYAML, so a box without it has no netplan to read
    yaml = None

# The ConnectX-7 of a DGX Spark is driven by mlx5_core (NVIDIA's connect-two-sparks playbook lists
# its interfaces with `ibdev2netdev`, which names mlx5 RoCE devices).
CX7_DRIVER = "mlx5_core"
PCI_ADDRESS = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
ROCE_V2 = "RoCE v2"
# ping's header overhead: 20 bytes of IPv4 header and 8 of ICMP; a payload of MTU - 28 fills one frame.
PING_OVERHEAD = 28


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except (OSError, ValueError):
        # An unset GID's type reads as EINVAL; an interface that is down has no readable carrier.
        return None


def _link_name(path: str) -> str:
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return ""


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def read_interface(sys_root: str, name: str) -> dict:
    """One /sys/class/net entry: driver, PCI address, operstate, MTU and RoCE devices."""
    base = os.path.join(sys_root, "class", "net", name)
    device = _link_name(os.path.join(base, "device"))
    mtu = _read(os.path.join(base, "mtu"))
    return {
        "name": name,
        "driver": _link_name(os.path.join(base, "device", "driver")),
        "pci": device if PCI_ADDRESS.match(device) else "",
        "operstate": _read(os.path.join(base, "operstate")) or "unknown",
        "mtu": int(mtu) if mtu and mtu.isdigit() else 0,
        "roce_devices": _listdir(os.path.join(base, "device", "infiniband")),
    }


def read_interfaces(sys_root: str = "/sys") -> list[dict]:
    return [read_interface(sys_root, name) for name in _listdir(os.path.join(sys_root, "class", "net"))]


def gid_of(ipv4: str) -> str:
    """The RoCE v2 GID of an IPv4 address: the IPv4-mapped IPv6 address, as sysfs prints it."""
    return ipaddress.IPv6Address(f"::ffff:{ipv4}").exploded


def roce_gid_index(sys_root: str, ibdev: str, ipv4: str, netdev: str = "", port: str = "1") -> int | None:
    """The index of the RoCE v2 GID holding the address on the device's port (None: there is none)."""
    ports = os.path.join(sys_root, "class", "infiniband", ibdev, "ports", port)
    wanted = gid_of(ipv4)
    for index in sorted(_listdir(os.path.join(ports, "gids")), key=lambda i: int(i) if i.isdigit() else -1):
        if (_read(os.path.join(ports, "gids", index)) or "").lower() != wanted:
            continue
        if _read(os.path.join(ports, "gid_attrs", "types", index)) != ROCE_V2:
            continue
        ndev = _read(os.path.join(ports, "gid_attrs", "ndevs", index))
        if netdev and ndev not in (None, netdev):
            continue
        return int(index)
    return None


def parse_ip_addr(text: str) -> dict[str, list[str]]:
    """`ip -j addr show` -> {interface: ["a.b.c.d/prefix", ...]} (IPv4 only)."""
    found: dict[str, list[str]] = {}
    for link in json.loads(text or "[]"):
        addresses = [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info") or []
                     if a.get("family") == "inet" and "local" in a]
        found[link.get("ifname", "")] = addresses
    return found


def pci_order(interface: dict) -> tuple:
    """Sort key: by PCI address (domain 0000 before 0002: enp1s0f1np1 before enP2p1s0f1np1, the order
    NVIDIA's playbook gives them their subnets), then by name."""
    return (interface.get("pci") or "~", interface["name"])


def discover(interfaces: list[dict]) -> list[str]:
    """The ConnectX-7 interfaces with a link: mlx5_core driver and operstate up, in PCI order."""
    found = [i for i in interfaces if i["driver"] == CX7_DRIVER and i["operstate"] == "up"]
    return [i["name"] for i in sorted(found, key=pci_order)]


def _sections(document: object) -> list[dict]:
    """The device sections of a netplan document (ethernets, bonds, ...: every mapping under `network`)."""
    network = document.get("network") if isinstance(document, dict) else None
    if not isinstance(network, dict):
        return []
    return [section for section in network.values() if isinstance(section, dict)]


def netplan_devices(document: object) -> list[str]:
    """The device names a netplan document configures (every section under `network` but its scalars)."""
    names: set[str] = set()
    for section in _sections(document):
        names.update(str(name) for name in section)
    return sorted(names)


def _addresses(value: object) -> list[str]:
    """A device's `addresses`: netplan takes "a.b.c.d/prefix" or a mapping of it to its options (lifetime,
    label) for each entry (netplan(5), "addresses")."""
    found = []
    for entry in value if isinstance(value, list) else []:
        if isinstance(entry, dict):
            found.extend(str(key) for key in entry)
        elif entry is not None:
            found.append(str(entry))
    return found


def netplan_settings(document: object) -> dict[str, dict]:
    """What a netplan document gives each device the link role cares about: {name: {"addresses": [...],
    "mtu": int or None (not set: the interface keeps the kernel's default, 1500 for Ethernet)}}."""
    found: dict[str, dict] = {}
    for section in _sections(document):
        for name, device in section.items():
            settings = device if isinstance(device, dict) else {}
            mtu = settings.get("mtu")
            found[str(name)] = {"addresses": _addresses(settings.get("addresses")),
                                "mtu": mtu if isinstance(mtu, int) and not isinstance(mtu, bool) else None}
    return found


def read_netplan(netplan_dir: str) -> dict[str, dict]:
    """Each *.yaml file of a directory -> {"devices": [...], "settings": netplan_settings}, or {"error": ...}."""
    paths = sorted(glob.glob(os.path.join(netplan_dir, "*.yaml")))
    if yaml is None:
        return {path: {"error": "PyYAML is not installed on the box"} for path in paths}
    files: dict[str, dict] = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                document = yaml.safe_load(handle)
        except (OSError, yaml.YAMLError) as exc:
            files[path] = {"error": (str(exc).splitlines() or [type(exc).__name__])[0]}
            continue
        files[path] = {"devices": netplan_devices(document), "settings": netplan_settings(document)}
    return files


def configured_by(files: dict[str, dict], name: str) -> list[str]:
    """The netplan files (as read_netplan reads them) that configure the device, in netplan's order."""
    return sorted(path for path, read in files.items() if name in (read.get("devices") or []))


def port_line(name: str, files: list[str]) -> str:
    """The doctor's line for one link port: which netplan files configure it."""
    return f"{name}: configured by {', '.join(files) if files else 'no netplan file'}"


# --- the doctor's findings ------------------------------------------------------------------------

def finding(severity: str, interface: str, check: str, text: tuple[str, str, str]) -> dict:
    """A finding; text is (what was found, what was expected, the fix)."""
    found, expected, fix = text
    return {"severity": severity, "interface": interface, "check": check, "found": found, "expected": expected,
            "fix": fix}


def mtu_fix(host: str, name: str, mtu: int) -> str:
    return (f"run the link role (playbooks/link.yml) on {host}, or `sudo ip link set {name} mtu {mtu}` there now "
            f"and set `mtu: {mtu}` for {name} in its netplan file so that it survives a reboot")


def local_findings(host: str, interface: dict, settings: dict) -> tuple[list[dict], dict]:
    """The checks one box can make of one link interface alone: link up, MTU, address, RoCE device, GID index.

    interface: as read_interface returns it, with `ipv4` (its addresses); settings: `mtu` (expected),
    `require_roce`, `sys_root`. Returns the findings and what was read (the GID index of each address).
    """
    name, addresses = interface["name"], interface["ipv4"]
    expected_mtu = settings["mtu"]
    found: list[dict] = []
    if interface["operstate"] != "up":
        found.append(finding("error", name, "link", (
            f"operstate {interface['operstate']} on {host} {name}", "up",
            f"check the QSFP cable on {host} and its peer (`ibdev2netdev` shows which port is Up; use the same port "
            f"on both boxes), then `sudo ip link set {name} up`")))
    if interface["mtu"] != expected_mtu:
        found.append(finding("error", name, "mtu", (
            f"MTU {interface['mtu']} on {host} {name}", f"{expected_mtu}",
            mtu_fix(host, name, expected_mtu) + " (a firmware update's reboot can bring one side back to 1500; "
            "NCCL then fails with IBV_WC_RETRY_EXC_ERR)")))
    if not addresses:
        found.append(finding("error", name, "address", (
            f"no IPv4 address on {host} {name}", "one address in the link's /24",
            "run the link role (playbooks/link.yml)")))
    gids: dict[str, int | None] = {}
    if not interface["roce_devices"]:
        lenient = not settings["require_roce"]
        found.append(finding("warning" if lenient else "error", name, "roce", (
            f"no RoCE device under /sys/class/net/{name}/device/infiniband on {host}",
            "the interface's RDMA device (ibdev2netdev lists it)",
            "load the RDMA driver (`sudo modprobe mlx5_ib`) and check `ibdev2netdev`; without it NCCL falls back to "
            "TCP sockets" + (" (link_require_roce is false: a warning, not an error)" if lenient else ""))))
        return found, gids
    for address in addresses:
        ipv4 = address.split("/", 1)[0]
        indexes = [roce_gid_index(settings["sys_root"], dev, ipv4, name) for dev in interface["roce_devices"]]
        gids[ipv4] = next((i for i in indexes if i is not None), None)
        if gids[ipv4] is None:
            found.append(finding("error", name, "gid", (
                f"no RoCE v2 GID holding {ipv4} on {host} {', '.join(interface['roce_devices'])}",
                f"a GID {gid_of(ipv4)} of type RoCE v2",
                "the GID table fills a moment after the address is set: run the doctor again; if it stays empty, "
                "`rdma link` and `ibdev2netdev` tell whether the RDMA device is bound to this interface")))
    return found, gids


def netplan_findings(host: str, name: str, files: list[str], netplan_dir: str) -> list[dict]:
    """A link port that two netplan files configure (netplan merges them: the addresses of both on the
    port, the MTU of the later one) or that none does (what is in force does not survive a reboot)."""
    if len(files) > 1:
        return [finding("error", name, "netplan", (
            f"{name} on {host} is configured by {len(files)} netplan files: {', '.join(files)} (netplan merges "
            "them: the port gets the addresses of all of them and the MTU of the last)",
            f"one netplan file configuring {name}",
            f"keep {name} in one file: run the link role (playbooks/link.yml), which keeps aside a file that "
            "configures only the link's ports (link_state: absent puts it back) and refuses one that configures "
            f"other devices too; or move {name}'s settings into one of them by hand (`sudo netplan get "
            f"ethernets.{name}` shows the merged result), then `sudo netplan apply`"))]
    if not files:
        return [finding("warning", name, "netplan", (
            f"no netplan file in {netplan_dir} configures {name} on {host}: its addresses and MTU do not survive "
            "a reboot", f"one netplan file configuring {name}",
            "run the link role (playbooks/link.yml): it writes one (link_netplan_path)"))]
    return []


def ping_command(ping: str, name: str, peer: str, mtu: int) -> list[str]:
    """A don't-fragment ping filling one frame of the MTU, one packet, one second to answer."""
    return [ping, "-M", "do", "-s", str(mtu - PING_OVERHEAD), "-c", "1", "-W", "1", "-I", name, peer]


def peer_line(peer: dict, mtu: int, ok: bool) -> str:
    """The doctor's report line of one peer: through a switch a cluster has a peer per other member on
    each link, and one of them can fail while the others pass (its port's MTU, its cable)."""
    outcome = "answered" if ok else "NOT answered"
    return (f"{peer['interface']} -> {peer['host']} {peer['address']}: don't-fragment ping of "
            f"{mtu - PING_OVERHEAD} bytes {outcome}")


def ping_finding(host: str, peer: dict, mtu: int, result: tuple[int, str]) -> dict | None:
    """The finding of one ping to peer (`interface`, `host`, `address`; result: its exit code and output),
    None when it was answered."""
    rc, output = result
    if rc == 0:
        return None
    name = peer["interface"]
    last = " ".join(line.strip() for line in output.strip().splitlines()[-2:] if line.strip())
    return finding("error", name, "ping", (
        f"{host} {name} -> {peer['host']} {peer['address']}: no answer to a don't-fragment ping of "
        f"{mtu - PING_OVERHEAD} bytes ({last})", f"an answer (MTU {mtu} on both ends)",
        f"compare the MTU of {name} on {host} with the peer's on {peer['host']} (`ip link`) and check the cable; "
        "the link role sets both"))
