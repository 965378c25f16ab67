# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the link role and its doctor read from sysfs, against a tree written here.

No sysfs dump of a DGX Spark is public, so the tree follows the kernel's documented layout
(Documentation/ABI/testing/sysfs-class-net: operstate, mtu, device, device/driver;
Documentation/ABI/stable/sysfs-class-infiniband: ports/<port>/gids/<index>, gid_attrs/types/<index>,
gid_attrs/ndevs/<index>) with the interface and RDMA device names NVIDIA's connect-two-sparks playbook
shows from `ibdev2netdev` on a Spark (rocep1s0f1 port 1 ==> enp1s0f1np1, roceP2p1s0f1 ==> enP2p1s0f1np1).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.sparkfleet.serving.plugins.module_utils import link
from ansible_collections.sparkfleet.serving.plugins.modules import link_doctor, link_facts

GID_V4_10 = "0000:0000:0000:0000:0000:ffff:c0a8:640a"  # 192.168.100.10, IPv4-mapped


def add_netdev(root: Path, name: str, spec: dict) -> None:
    """/sys/class/net/<name> with its PCI function (device), driver and RDMA devices."""
    net = root / "class" / "net" / name
    net.mkdir(parents=True)
    (net / "operstate").write_text(spec.get("operstate", "up") + "\n")
    (net / "mtu").write_text(f"{spec.get('mtu', 1500)}\n")
    if "pci" in spec:
        device = root / "devices" / "platform" / spec["pci"]
        device.mkdir(parents=True)
        drivers = root / "bus" / "pci" / "drivers" / spec["driver"]
        drivers.mkdir(parents=True, exist_ok=True)
        (device / "driver").symlink_to(drivers)
        for ibdev in spec.get("roce", []):
            (device / "infiniband" / ibdev).mkdir(parents=True)
        (net / "device").symlink_to(device)


def add_gids(root: Path, ibdev: str, gids: list[tuple[str, str, str]]) -> None:
    """/sys/class/infiniband/<ibdev>/ports/1: (gid, type, ndev) at index 0, 1, ..."""
    port = root / "class" / "infiniband" / ibdev / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (port / sub).mkdir(parents=True)
    for index, (gid, kind, ndev) in enumerate(gids):
        (port / "gids" / str(index)).write_text(gid + "\n")
        (port / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
        (port / "gid_attrs" / "ndevs" / str(index)).write_text(ndev + "\n")


@pytest.fixture
def spark(tmp_path: Path) -> Path:
    """A Spark with one QSFP cable in its second port: f1 of both PCI domains up, f0 down."""
    mlx = "mlx5_core"
    add_netdev(tmp_path, "enP2p1s0f1np1", {"pci": "0002:01:00.1", "driver": mlx, "roce": ["roceP2p1s0f1"],
                                           "mtu": 9000})
    add_netdev(tmp_path, "enp1s0f1np1", {"pci": "0000:01:00.1", "driver": mlx, "roce": ["rocep1s0f1"], "mtu": 9000})
    add_netdev(tmp_path, "enp1s0f0np0", {"pci": "0000:01:00.0", "driver": mlx, "roce": ["rocep1s0f0"],
                                         "operstate": "down"})
    add_netdev(tmp_path, "enP7s7", {"pci": "0007:01:00.0", "driver": "r8169"})
    add_netdev(tmp_path, "lo", {"operstate": "unknown", "mtu": 65536})
    link_local = "fe80:0000:0000:0000:3e6d:66ff:fecc:b3b7"
    add_gids(tmp_path, "rocep1s0f1", [(link_local, "IB/RoCE v1", "enp1s0f1np1"),
                                      (link_local, "RoCE v2", "enp1s0f1np1"),
                                      (GID_V4_10, "IB/RoCE v1", "enp1s0f1np1"),
                                      (GID_V4_10, "RoCE v2", "enp1s0f1np1")])
    return tmp_path


def test_reads_driver_pci_state_mtu_and_roce(spark: Path):
    interfaces = {i["name"]: i for i in link.read_interfaces(str(spark))}
    assert interfaces["enp1s0f1np1"] == {"name": "enp1s0f1np1", "driver": "mlx5_core", "pci": "0000:01:00.1",
                                         "operstate": "up", "mtu": 9000, "roce_devices": ["rocep1s0f1"]}
    assert interfaces["lo"] == {"name": "lo", "driver": "", "pci": "", "operstate": "unknown", "mtu": 65536,
                                "roce_devices": []}


def test_discovers_the_cabled_cx7_ports_in_pci_order(spark: Path):
    # PCI domain 0000 before 0002: the order NVIDIA's playbook gives them 192.168.100/24 and 101/24
    # (a plain name sort would put enP2... first: 'P' sorts before 'p').
    assert link.discover(link.read_interfaces(str(spark))) == ["enp1s0f1np1", "enP2p1s0f1np1"]


def test_gid_index_is_the_roce_v2_entry_of_the_address(spark: Path):
    assert link.gid_of("192.168.100.10") == GID_V4_10
    assert link.roce_gid_index(str(spark), "rocep1s0f1", "192.168.100.10", "enp1s0f1np1") == 3
    assert link.roce_gid_index(str(spark), "rocep1s0f1", "192.168.100.11", "enp1s0f1np1") is None
    # The GID bound to another netdev is not this interface's.
    assert link.roce_gid_index(str(spark), "rocep1s0f1", "192.168.100.10", "enP2p1s0f1np1") is None
    assert link.roce_gid_index(str(spark), "nosuchdev", "192.168.100.10") is None


def test_parse_ip_addr_keeps_ipv4_only():
    text = json.dumps([
        {"ifname": "enp1s0f1np1", "addr_info": [
            {"family": "inet", "local": "192.168.100.10", "prefixlen": 24},
            {"family": "inet6", "local": "fe80::1", "prefixlen": 64}]},
        {"ifname": "enp1s0f0np0", "addr_info": []}])
    assert link.parse_ip_addr(text) == {"enp1s0f1np1": ["192.168.100.10/24"], "enp1s0f0np0": []}


def test_netplan_devices():
    document = {"network": {"version": 2, "renderer": "networkd",
                            "ethernets": {"enp1s0f1np1": {}, "enP7s7": {}}, "bonds": {"bond0": {}}}}
    assert link.netplan_devices(document) == ["bond0", "enP7s7", "enp1s0f1np1"]
    assert link.netplan_devices(None) == []
    assert link.netplan_devices({"network": "x"}) == []


def test_netplan_settings_reads_addresses_in_both_forms_and_the_mtu():
    # netplan(5) takes an address as "a.b.c.d/prefix" or as a mapping of it to its options (lifetime, label).
    document = {"network": {"version": 2, "ethernets": {
        "enp1s0f1np1": {"addresses": ["192.168.100.10/24", {"fd00::10/64": {"lifetime": 0}}], "mtu": 9000},
        "enP2p1s0f1np1": {"link-local": ["ipv4"]},
        "enp1s0f0np0": None,
        "enP2p1s0f0np0": {"mtu": True, "addresses": "192.168.1.1/24"}}}}
    assert link.netplan_settings(document) == {
        "enp1s0f1np1": {"addresses": ["192.168.100.10/24", "fd00::10/64"], "mtu": 9000},
        # NVIDIA's "automatic" option: link-local addresses only, no MTU.
        "enP2p1s0f1np1": {"addresses": [], "mtu": None},
        "enp1s0f0np0": {"addresses": [], "mtu": None},
        # Not what netplan accepts: nothing usable is read from it.
        "enP2p1s0f0np0": {"addresses": [], "mtu": None},
    }
    assert link.netplan_settings([]) == {}


NVIDIA_40_CX7 = """network:
  version: 2
  ethernets:
    enp1s0f1np1:
      addresses:
        - 192.168.100.10/24
      dhcp4: no
    enP2p1s0f1np1:
      addresses:
        - 192.168.101.10/24
      dhcp4: no
"""


def test_read_netplan_and_which_files_configure_a_port(tmp_path: Path):
    # NVIDIA's connect-two-sparks file (nvidia/connect-two-sparks/README.md, "Step 3", node 1) beside the role's.
    (tmp_path / "40-cx7.yaml").write_text(NVIDIA_40_CX7)
    (tmp_path / "40-sparkfleet-link.yaml").write_text(
        "network: {version: 2, ethernets: {enp1s0f1np1: {addresses: [192.168.100.11/24], mtu: 9000}}}\n")
    (tmp_path / "99-broken.yaml").write_text("network: [\n")
    (tmp_path / "notes.txt").write_text("not read\n")
    files = link.read_netplan(str(tmp_path))
    cx7, ours, broken = (str(tmp_path / name) for name in ("40-cx7.yaml", "40-sparkfleet-link.yaml", "99-broken.yaml"))
    assert sorted(files) == [cx7, ours, broken]
    assert files[cx7] == {"devices": ["enP2p1s0f1np1", "enp1s0f1np1"], "settings": {
        "enp1s0f1np1": {"addresses": ["192.168.100.10/24"], "mtu": None},
        "enP2p1s0f1np1": {"addresses": ["192.168.101.10/24"], "mtu": None}}}
    assert "error" in files[broken]
    # In netplan's order (the names'): a file that cannot be read configures nothing that can be told.
    assert link.configured_by(files, "enp1s0f1np1") == [cx7, ours]
    assert link.configured_by(files, "enP2p1s0f1np1") == [cx7]
    assert link.configured_by(files, "enP7s7") == []
    assert link.read_netplan(str(tmp_path / "none")) == {}


def test_port_line():
    assert link.port_line("enp1s0f0np0", ["/etc/netplan/40-cx7.yaml"]) == \
        "enp1s0f0np0: configured by /etc/netplan/40-cx7.yaml"
    assert link.port_line("enp1s0f0np0", ["/etc/netplan/40-cx7.yaml", "/etc/netplan/99-nvidia-sync-cluster.yaml"]) \
        == "enp1s0f0np0: configured by /etc/netplan/40-cx7.yaml, /etc/netplan/99-nvidia-sync-cluster.yaml"
    assert link.port_line("enp1s0f0np0", []) == "enp1s0f0np0: configured by no netplan file"


def test_two_files_for_one_port_is_an_error_with_its_fix_none_a_warning():
    two = ["/etc/netplan/40-cx7.yaml", "/etc/netplan/99-nvidia-sync-cluster.yaml"]
    [found] = link.netplan_findings("spark-a", "enp1s0f1np1", two, "/etc/netplan")
    assert (found["severity"], found["check"], found["interface"]) == ("error", "netplan", "enp1s0f1np1")
    assert found["found"].startswith("enp1s0f1np1 on spark-a is configured by 2 netplan files: "
                                     "/etc/netplan/40-cx7.yaml, /etc/netplan/99-nvidia-sync-cluster.yaml")
    assert found["expected"] == "one netplan file configuring enp1s0f1np1"
    assert "run the link role" in found["fix"] and "link_state: absent puts it back" in found["fix"]
    assert "`sudo netplan get ethernets.enp1s0f1np1`" in found["fix"]
    [none] = link.netplan_findings("spark-a", "enp1s0f1np1", [], "/etc/netplan")
    assert (none["severity"], none["check"]) == ("warning", "netplan")
    assert "no netplan file in /etc/netplan configures enp1s0f1np1 on spark-a" in none["found"]
    assert link.netplan_findings("spark-a", "enp1s0f1np1", two[:1], "/etc/netplan") == []


def settings(spark: Path, require_roce: bool = True) -> dict:
    return {"mtu": 9000, "require_roce": require_roce, "sys_root": str(spark)}


def test_a_ready_interface_has_no_finding_and_its_gid_index(spark: Path):
    interface = {**link.read_interface(str(spark), "enp1s0f1np1"), "ipv4": ["192.168.100.10/24"]}
    assert link.local_findings("spark-a", interface, settings(spark)) == ([], {"192.168.100.10": 3})


def test_mtu_1500_is_an_error_with_its_fix(spark: Path):
    interface = {**link.read_interface(str(spark), "enp1s0f1np1"), "ipv4": ["192.168.100.10/24"], "mtu": 1500}
    findings, _gids = link.local_findings("spark-b", interface, settings(spark))
    assert [f["check"] for f in findings] == ["mtu"]
    assert findings[0]["found"] == "MTU 1500 on spark-b enp1s0f1np1"
    assert findings[0]["expected"] == "9000"
    assert "sudo ip link set enp1s0f1np1 mtu 9000" in findings[0]["fix"]
    assert "netplan" in findings[0]["fix"]


def test_down_without_address_and_gid(spark: Path):
    interface = {**link.read_interface(str(spark), "enp1s0f0np0"), "ipv4": []}
    findings, _gids = link.local_findings("spark-a", interface, settings(spark))
    assert [f["check"] for f in findings] == ["link", "mtu", "address"]
    interface = {**link.read_interface(str(spark), "enP2p1s0f1np1"), "ipv4": ["192.168.101.10/24"]}
    findings, gids = link.local_findings("spark-a", interface, settings(spark))
    assert [f["check"] for f in findings] == ["gid"] and gids == {"192.168.101.10": None}


def test_no_roce_device_is_an_error_unless_not_required(spark: Path):
    interface = {**link.read_interface(str(spark), "enP7s7"), "mtu": 9000, "ipv4": ["192.168.100.10/24"]}
    strict = link.local_findings("box", interface, settings(spark))[0]
    lenient = link.local_findings("box", interface, settings(spark, require_roce=False))[0]
    assert [(f["check"], f["severity"]) for f in strict] == [("roce", "error")]
    assert [(f["check"], f["severity"]) for f in lenient] == [("roce", "warning")]


def test_ping_command_and_finding():
    assert link.ping_command("/usr/bin/ping", "eth1", "192.168.100.11", 9000) == [
        "/usr/bin/ping", "-M", "do", "-s", "8972", "-c", "1", "-W", "1", "-I", "eth1", "192.168.100.11"]
    peer = {"interface": "eth1", "host": "spark-b", "address": "192.168.100.11"}
    assert link.ping_finding("spark-a", peer, 9000, (0, "")) is None
    found = link.ping_finding("spark-a", peer, 9000, (1, "PING ...\nping: local error: message too long, mtu=1500\n"))
    assert found["check"] == "ping" and "message too long, mtu=1500" in found["found"]
    assert "8972 bytes" in found["found"]


# --- the modules over the same tree ------------------------------------------------------------------

IP_ADDR = json.dumps([{"ifname": "enp1s0f1np1", "addr_info": [
    {"family": "inet", "local": "192.168.100.10", "prefixlen": 24}]}])


def run_module(main, args: dict, capsys, monkeypatch, commands: dict[str, tuple[int, str, str]], *,
               missing: tuple[str, ...] = ()) -> dict:
    """Runs a module with `ip` and `ping` answered from `commands` (by program name) and records the calls;
    the programs in `missing` are not installed."""
    calls: list[list[str]] = []

    def run_command(_self, argv, **_kwargs):
        calls.append(argv)
        return commands[Path(argv[0]).name]

    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(AnsibleModule, "get_bin_path",
                        lambda _self, name, **_kw: None if name in missing else f"/usr/bin/{name}")
    with patch_module_args(args), pytest.raises(SystemExit):
        main()
    return {**json.loads(capsys.readouterr().out), "calls": calls}


def test_link_facts_reads_interfaces_addresses_and_netplan(spark: Path, tmp_path: Path, capsys, monkeypatch):
    netplan = tmp_path / "netplan"
    netplan.mkdir()
    (netplan / "40-cx7.yaml").write_text("network:\n  version: 2\n  ethernets:\n    enp1s0f1np1:\n"
                                         "      addresses: [192.168.100.10/24]\n      mtu: 9000\n")
    (netplan / "99-broken.yaml").write_text("network: [\n")
    result = run_module(link_facts.main, {"sys_root": str(spark), "netplan_dir": str(netplan)}, capsys, monkeypatch,
                        {"ip": (0, IP_ADDR, "")})
    assert result["changed"] is False
    assert result["discovered"] == ["enp1s0f1np1", "enP2p1s0f1np1"]
    by_name = {i["name"]: i for i in result["interfaces"]}
    assert by_name["enp1s0f1np1"]["ipv4"] == ["192.168.100.10/24"] and by_name["enP2p1s0f1np1"]["ipv4"] == []
    assert result["netplan_files"][str(netplan / "40-cx7.yaml")] == {
        "devices": ["enp1s0f1np1"], "settings": {"enp1s0f1np1": {"addresses": ["192.168.100.10/24"], "mtu": 9000}}}
    assert "error" in result["netplan_files"][str(netplan / "99-broken.yaml")]
    assert by_name["enp1s0f1np1"]["configured_by"] == [str(netplan / "40-cx7.yaml")]
    assert by_name["enP2p1s0f1np1"]["configured_by"] == []
    assert result["backup_netplan_files"] == {}


def test_link_facts_reads_the_files_the_role_kept_aside(spark: Path, tmp_path: Path, capsys, monkeypatch):
    netplan, kept = tmp_path / "netplan", tmp_path / "kept"
    netplan.mkdir()
    kept.mkdir()
    (kept / "40-cx7.yaml").write_text(NVIDIA_40_CX7)
    # GNU cp's numbered backup of an older copy: not a netplan file, and not put back by link_state: absent.
    (kept / "40-cx7.yaml.~1~").write_text(NVIDIA_40_CX7)
    result = run_module(link_facts.main, {"sys_root": str(spark), "netplan_dir": str(netplan),
                                          "backup_dir": str(kept)}, capsys, monkeypatch, {"ip": (0, IP_ADDR, "")})
    assert result["netplan_files"] == {}
    assert list(result["backup_netplan_files"]) == [str(kept / "40-cx7.yaml")]
    # What configures a port is the netplan directory alone: a copy kept aside configures nothing.
    assert {i["name"]: i["configured_by"] for i in result["interfaces"]}["enp1s0f1np1"] == []


@pytest.fixture
def netplan(tmp_path: Path) -> Path:
    """/etc/netplan as NVIDIA's connect-two-sparks playbook leaves it (with the MTU the link needs)."""
    directory = tmp_path / "etc-netplan"
    directory.mkdir()
    with_mtu = NVIDIA_40_CX7.replace("      dhcp4: no\n", "      dhcp4: no\n      mtu: 9000\n")
    (directory / "40-cx7.yaml").write_text(with_mtu)
    return directory


def test_link_doctor_pings_each_peer_and_reports_with_fixes(spark: Path, netplan: Path, capsys, monkeypatch):
    args = {"sys_root": str(spark), "interfaces": ["enp1s0f1np1"], "host": "spark-a", "_ansible_check_mode": True,
            "netplan_dir": str(netplan),
            "peers": [{"interface": "enp1s0f1np1", "host": "spark-b", "address": "192.168.100.11"}]}
    ready = run_module(link_doctor.main, args, capsys, monkeypatch, {"ip": (0, IP_ADDR, ""), "ping": (0, "", "")})
    assert ready["findings"] == []
    assert ready["interfaces"][0]["gid_index"] == {"192.168.100.10": 3}
    assert ready["interfaces"][0]["configured_by"] == [str(netplan / "40-cx7.yaml")]
    assert ready["report"] == [f"enp1s0f1np1: configured by {netplan}/40-cx7.yaml",
                               "enp1s0f1np1 -> spark-b 192.168.100.11: don't-fragment ping of 8972 bytes answered"]
    assert ready["pings"] == [{**args["peers"][0], "ok": True}]
    assert ready["calls"][-1] == ["/usr/bin/ping", "-M", "do", "-s", "8972", "-c", "1", "-W", "1", "-I",
                                  "enp1s0f1np1", "192.168.100.11"]
    silent = run_module(link_doctor.main, {**args, "interfaces": ["enp1s0f1np7"]}, capsys, monkeypatch,
                        {"ip": (0, IP_ADDR, ""), "ping": (1, "1 packets transmitted, 0 received", "")})
    assert [f["check"] for f in silent["findings"]] == ["link", "ping"]
    assert "no interface enp1s0f1np7 on spark-a" in silent["findings"][0]["found"]
    assert silent["report"] == ["enp1s0f1np1 -> spark-b 192.168.100.11: don't-fragment ping of 8972 bytes NOT answered"]


def test_link_doctor_through_a_switch_reports_each_peer_and_finds_the_one_that_fails(
        spark: Path, netplan: Path, capsys, monkeypatch):
    """Four members on one switch: three peers, one of them (spark-c) drops full frames; the others pass."""
    peers = [{"interface": "enp1s0f1np1", "host": host, "address": f"192.168.100.{n}"}
             for host, n in (("spark-b", 11), ("spark-c", 12), ("spark-d", 13))]
    args = {"sys_root": str(spark), "interfaces": ["enp1s0f1np1"], "host": "spark-a", "netplan_dir": str(netplan),
            "peers": peers}
    answers = iter([(0, "", ""), (1, "ping: local error: message too long, mtu=1500", ""), (0, "", "")])

    class Replies(dict):
        def __getitem__(self, name: str) -> tuple[int, str, str]:
            return (0, IP_ADDR, "") if name == "ip" else next(answers)

    result = run_module(link_doctor.main, args, capsys, monkeypatch, Replies())
    assert [p["ok"] for p in result["pings"]] == [True, False, True]
    assert result["report"][1:] == [
        "enp1s0f1np1 -> spark-b 192.168.100.11: don't-fragment ping of 8972 bytes answered",
        "enp1s0f1np1 -> spark-c 192.168.100.12: don't-fragment ping of 8972 bytes NOT answered",
        "enp1s0f1np1 -> spark-d 192.168.100.13: don't-fragment ping of 8972 bytes answered"]
    [ping] = [f for f in result["findings"] if f["check"] == "ping"]
    assert "spark-a enp1s0f1np1 -> spark-c 192.168.100.12" in ping["found"]


def test_link_doctor_names_the_files_of_each_port_and_finds_two(spark: Path, netplan: Path, capsys, monkeypatch):
    """NVIDIA Sync's file beside NVIDIA's playbook's: netplan merges them, so each port has two configurations."""
    (netplan / "99-nvidia-sync-cluster.yaml").write_text(
        "network: {version: 2, ethernets: {enp1s0f1np1: {addresses: [192.168.200.1/24], mtu: 9000}}}\n")
    args = {"sys_root": str(spark), "interfaces": ["enp1s0f1np1", "enP2p1s0f1np1"], "host": "spark-a",
            "netplan_dir": str(netplan), "mtu": 9000}
    result = run_module(link_doctor.main, args, capsys, monkeypatch, {"ip": (0, IP_ADDR, "")})
    both = [str(netplan / "40-cx7.yaml"), str(netplan / "99-nvidia-sync-cluster.yaml")]
    assert result["report"] == [f"enp1s0f1np1: configured by {', '.join(both)}",
                                f"enP2p1s0f1np1: configured by {netplan}/40-cx7.yaml"]
    by_check = {(f["check"], f["interface"]): f for f in result["findings"]}
    two = by_check[("netplan", "enp1s0f1np1")]
    assert two["severity"] == "error" and two["configured_by"] == both
    assert "is configured by 2 netplan files" in two["found"]
    # Every finding about a port names its files (enP2p1s0f1np1 has no address and no GID here).
    assert by_check[("address", "enP2p1s0f1np1")]["configured_by"] == [str(netplan / "40-cx7.yaml")]
    assert all("configured_by" in f for f in result["findings"])


def test_link_doctor_without_ping_says_what_to_install(spark: Path, netplan: Path, capsys, monkeypatch):
    args = {"sys_root": str(spark), "interfaces": ["enp1s0f1np1"], "host": "spark-a", "netplan_dir": str(netplan),
            "peers": [{"interface": "enp1s0f1np1", "host": "spark-b", "address": "192.168.100.11"}]}
    result = run_module(link_doctor.main, args, capsys, monkeypatch, {"ip": (0, IP_ADDR, "")}, missing=("ping",))
    assert result["failed"] is True
    assert result["msg"].startswith("ping is not installed on spark-a")
    assert "install the iputils-ping package" in result["msg"]
