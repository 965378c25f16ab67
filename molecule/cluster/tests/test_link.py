"""The cluster's ConnectX-7 link as the link role left it on three members through one switch (one subnet),
proved with real frames of 9000 bytes between every pair; then the doctor, peer by peer, on a link where one
member's end differs in MTU, the link playbook putting it right, a wrong interface name refused before any
change, and the undo.

The tests run in this order and share the boxes, after the cluster's own (pytest runs this file last):
each leaves them as the role made them, but the last, which takes the link down.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import testinfra
import yaml
from spark_testinfra import recap_changed, run_playbook

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
SCENARIO = Path(__file__).resolve().parents[1]
# The link role alone, as a user sets up a cluster (molecule/cluster/converge.yml runs it among the others).
LINK = SCENARIO.parents[1] / "playbooks" / "link.yml"
ADDRESS = {"vc-spark-a": "192.168.100.10", "vc-spark-b": "192.168.100.11", "vc-spark-c": "192.168.100.12"}
# Every ordered pair of members: through a switch each member reaches every other one.
PAIRS = [(source, target) for source in ADDRESS for target in ADDRESS if source != target]
NETPLAN = "/etc/netplan/40-sparkfleet-link.yaml"
NVIDIA = "/etc/netplan/40-cx7.yaml"
BACKUP = "/var/lib/sparkfleet/link/netplan-replaced/40-cx7.yaml"
DOCTOR = SCENARIO.parents[1] / "playbooks" / "doctor.yml"


def box(name: str):
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}")


def cx7(name: str) -> dict:
    return json.loads(box(name).check_output("ip -j addr show enp1s0f1np1"))[0]


def ipv4(name: str) -> list[str]:
    return [f"{a['local']}/{a['prefixlen']}" for a in cx7(name)["addr_info"] if a["family"] == "inet"]


def changed_by_host(output: str) -> dict[str, int]:
    recap = output.rsplit("PLAY RECAP", maxsplit=1)[-1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S+)\s*:.*?changed=(\d+)", recap, re.MULTILINE)}


def ping(source: str, target: str) -> int:
    """A don't-fragment ping of 8972 bytes (one frame of 9000) over enp1s0f1np1."""
    return box(source).run(f"ping -M do -s 8972 -c 1 -W 1 -I enp1s0f1np1 {ADDRESS[target]}").rc


def test_netplan_file_holds_the_address_by_rank_and_mtu_9000():
    for name, address in ADDRESS.items():
        netplan = box(name).file(NETPLAN)
        assert netplan.mode == 0o600 and netplan.user == "root"
        assert yaml.safe_load(netplan.content_string) == {"network": {"version": 2, "ethernets": {"enp1s0f1np1": {
            "addresses": [f"{address}/24"], "dhcp4": False, "dhcp6": False, "link-local": [], "mtu": 9000}}}}
        # What networkd was given (netplan generate), not only what the role wrote.
        assert "MTUBytes=9000" in box(name).file("/run/systemd/network/10-netplan-enp1s0f1np1.network").content_string


def test_nvidias_file_was_kept_aside():
    a = box("vc-spark-a")
    assert not a.file(NVIDIA).exists
    assert "192.168.100.10/24" in a.file(BACKUP).content_string


def test_addresses_and_mtu_in_force():
    for name, address in ADDRESS.items():
        assert f"{address}/24" in ipv4(name)
        assert cx7(name)["mtu"] == 9000


def test_frames_of_9000_bytes_pass_between_every_pair_over_the_new_addresses():
    assert {pair: ping(*pair) for pair in PAIRS} == dict.fromkeys(PAIRS, 0)


def test_the_doctor_finds_the_link_ready_but_for_the_missing_roce_device():
    done = run_playbook(DOCTOR)
    out = done.output
    assert done.returncode == 0, out[-3000:]
    assert recap_changed(done.stdout) == 0
    assert "WARNING roce enp1s0f1np1: no RoCE device under /sys/class/net/enp1s0f1np1/device/infiniband" in out
    assert "ERROR" not in out
    # One line per peer on each member: two peers each, every one answered.
    for source, target in PAIRS:
        assert (f"enp1s0f1np1 -> {target} {ADDRESS[target]}: don't-fragment ping of 8972 bytes answered"
                in out), (source, target)


def test_mtu_mismatch_found_by_the_doctor_with_its_fix_then_put_right_by_the_role():
    box("vc-spark-b").check_output("ip link set enp1s0f1np1 mtu 1500")
    # Small packets still pass: the link looks fine until a full frame is sent.
    assert box("vc-spark-a").run(f"ping -c 1 -W 1 -I enp1s0f1np1 {ADDRESS['vc-spark-b']}").rc == 0
    assert ping("vc-spark-a", "vc-spark-b") != 0
    done = run_playbook(DOCTOR)
    out = done.output
    assert done.returncode != 0
    assert "ERROR mtu enp1s0f1np1: MTU 1500 on vc-spark-b enp1s0f1np1; expected 9000" in out
    assert "`sudo ip link set enp1s0f1np1 mtu 9000`" in out
    assert ("the ends of 192.168.100.0/24 differ in MTU: vc-spark-a enp1s0f1np1 9000, vc-spark-b enp1s0f1np1 "
            "1500, vc-spark-c enp1s0f1np1 9000") in out
    # Peer by peer: both other members fail to reach vc-spark-b with a full frame; vc-spark-a and vc-spark-c reach
    # each other.
    for source in ("vc-spark-a", "vc-spark-c"):
        assert (f"ERROR ping enp1s0f1np1: {source} enp1s0f1np1 -> vc-spark-b 192.168.100.11: no answer to a "
                "don't-fragment ping") in out, source
    assert "enp1s0f1np1 -> vc-spark-b 192.168.100.11: don't-fragment ping of 8972 bytes NOT answered" in out
    assert "enp1s0f1np1 -> vc-spark-c 192.168.100.12: don't-fragment ping of 8972 bytes answered" in out
    assert "vc-spark-a enp1s0f1np1 -> vc-spark-c" not in out and "vc-spark-c enp1s0f1np1 -> vc-spark-a" not in out
    # The netplan file did not change; the runtime did: the role applies it again on vc-spark-b only.
    fixed = run_playbook(LINK)
    assert fixed.returncode == 0, fixed.output[-3000:]
    assert cx7("vc-spark-b")["mtu"] == 9000
    assert ping("vc-spark-a", "vc-spark-b") == 0
    assert changed_by_host(fixed.stdout) == {"vc-spark-a": 0, "vc-spark-b": 2, "vc-spark-c": 0}
    assert run_playbook(DOCTOR).returncode == 0


def test_a_wrong_interface_name_is_refused_before_any_change():
    before = {name: (box(name).file(NETPLAN).content_string, ipv4(name)) for name in ADDRESS}
    done = run_playbook(LINK, {"link_interfaces": ["enP2p1s0f1np1"]})
    assert done.returncode != 0
    assert "link_interfaces names enP2p1s0f1np1, which vc-spark-a does not have; found docker0, enp1s0f1np1, eth" \
        in done.output
    assert recap_changed(done.stdout) == 0
    assert {name: (box(name).file(NETPLAN).content_string, ipv4(name)) for name in ADDRESS} == before


def test_undo_restores_what_was_there():
    done = run_playbook(LINK, {"link_state": "absent"})
    assert done.returncode == 0, done.output[-3000:]
    for name in ADDRESS:
        assert not box(name).file(NETPLAN).exists
    a = box("vc-spark-a")
    assert a.file(NVIDIA).content_string.startswith("network:\n  version: 2\n")
    assert not a.file(BACKUP).exists
    # networkd dropped what no file configures any more (vc-spark-a's NVIDIA file gives it .10 again).
    assert "192.168.100.11/24" not in ipv4("vc-spark-b")
    assert "192.168.100.12/24" not in ipv4("vc-spark-c")
