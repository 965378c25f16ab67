"""The link set up by NVIDIA's tools before the link role: the doctor names the netplan file of each port and
finds a port two files configure; addresses NVIDIA Sync's file gives that are right for the cluster are kept by
the role (its file gives the same; the run says so, a second run changes nothing) and `link_state: absent` puts
the file back with the same addresses; addresses with the wrong MTU are not kept, and the run says why.

NVIDIA Sync's Cluster Assistant writes /etc/netplan/99-nvidia-sync-cluster.yaml
(https://docs.nvidia.com/sync/latest/cluster-network-inspection.html); its addresses here differ from the
role's (192.168.100.10, .11 and .12) so that the tests tell which were given.

The tests run in this order and share the boxes, after tests/test_link.py (pytest runs this file last): they
start from what its undo left - no role file, NVIDIA's connect-two-sparks file (prepare.yml) back on vc-spark-a.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import testinfra
import yaml
from spark_testinfra import recap_changed, run_playbook

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PLAYBOOKS = Path(__file__).resolve().parents[3] / "playbooks"
LINK, DOCTOR = PLAYBOOKS / "link.yml", PLAYBOOKS / "doctor.yml"
NETPLAN = "/etc/netplan/40-sparkfleet-link.yaml"
NVIDIA = "/etc/netplan/40-cx7.yaml"
SYNC = "/etc/netplan/99-nvidia-sync-cluster.yaml"
KEPT = "/var/lib/sparkfleet/link/netplan-replaced/99-nvidia-sync-cluster.yaml"
SYNC_ADDRESS = {"vc-spark-a": "192.168.1.1", "vc-spark-b": "192.168.1.2", "vc-spark-c": "192.168.1.3"}
ROLE_ADDRESS = {"vc-spark-a": "192.168.100.10", "vc-spark-b": "192.168.100.11", "vc-spark-c": "192.168.100.12"}
# What `netplan apply` does for networkd, as the scenario's link_apply_command (molecule.yml).
APPLY = "netplan generate && networkctl reload && networkctl reconfigure enp1s0f1np1"


def box(name: str):
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}")


def ipv4(name: str) -> list[str]:
    link = json.loads(box(name).check_output("ip -j addr show enp1s0f1np1"))[0]
    return [f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"] if a["family"] == "inet"]


def write_sync_file(name: str, mtu: int) -> None:
    """The file as NVIDIA Sync leaves it: the link's port alone, mode 0600."""
    content = yaml.safe_dump({"network": {"version": 2, "ethernets": {"enp1s0f1np1": {
        "addresses": [f"{SYNC_ADDRESS[name]}/24"], "dhcp4": False, "mtu": mtu}}}})
    encoded = base64.b64encode(content.encode()).decode()
    box(name).check_output(f"umask 077 && echo {encoded} | base64 -d > {SYNC} && chmod 0600 {SYNC}")


def frames_pass(source: str, target: str, addresses: dict[str, str]) -> bool:
    """A don't-fragment ping of 8972 bytes (one frame of 9000) over enp1s0f1np1."""
    return box(source).run(f"ping -M do -s 8972 -c 1 -W 1 -I enp1s0f1np1 {addresses[target]}").rc == 0


def test_the_doctor_names_the_file_of_each_port_and_finds_a_port_in_two():
    for name in SYNC_ADDRESS:
        write_sync_file(name, 9000)
        box(name).check_output(APPLY)
    done = run_playbook(DOCTOR)
    out = done.output
    assert done.returncode != 0
    assert recap_changed(done.stdout) == 0
    # vc-spark-a still has NVIDIA's connect-two-sparks file: netplan merges both.
    assert (f"ERROR netplan enp1s0f1np1: enp1s0f1np1 on vc-spark-a is configured by 2 netplan files: {NVIDIA}, "
            f"{SYNC} (netplan merges them") in out
    assert f"[enp1s0f1np1: configured by {NVIDIA}, {SYNC}]" in out
    assert f"enp1s0f1np1: configured by {SYNC}" in out
    assert "enp1s0f1np1 on vc-spark-b is configured by" not in out
    assert "enp1s0f1np1 on vc-spark-c is configured by" not in out


def test_right_addresses_of_nvidia_syncs_file_are_kept():
    box("vc-spark-a").check_output(f"rm {NVIDIA} && {APPLY}")
    before = {name: ipv4(name) for name in SYNC_ADDRESS}
    assert before == {name: [f"{address}/24"] for name, address in SYNC_ADDRESS.items()}
    done = run_playbook(LINK)
    out = done.output
    assert done.returncode == 0, out[-3000:]
    assert (f"kept the addresses {SYNC} gives the link: enp1s0f1np1 192.168.1.1/24, MTU 9000 - right for cluster "
            "trio1") in out
    for name, address in SYNC_ADDRESS.items():
        document = yaml.safe_load(box(name).file(NETPLAN).content_string)
        assert document["network"]["ethernets"]["enp1s0f1np1"]["addresses"] == [f"{address}/24"]
        assert document["network"]["ethernets"]["enp1s0f1np1"]["mtu"] == 9000
        # Taken over: one file configures the port, NVIDIA Sync's is kept aside for the undo.
        assert not box(name).file(SYNC).exists
        assert f"{address}/24" in box(name).file(KEPT).content_string
    assert {name: ipv4(name) for name in SYNC_ADDRESS} == before
    assert all(frames_pass(a, b, SYNC_ADDRESS) for a in SYNC_ADDRESS for b in SYNC_ADDRESS if a != b)
    # The doctor's play of playbooks/link.yml: each port in the role's file alone, nothing wrong.
    assert f"enp1s0f1np1: configured by {NETPLAN}" in out
    assert "ERROR" not in out


def test_a_second_run_keeps_them_and_changes_nothing():
    done = run_playbook(LINK)
    assert done.returncode == 0, done.output[-3000:]
    assert recap_changed(done.stdout) == 0
    assert f"kept the addresses {KEPT} (kept aside by an earlier run) gives the link" in done.output
    assert {name: ipv4(name) for name in SYNC_ADDRESS} == {name: [f"{a}/24"] for name, a in SYNC_ADDRESS.items()}


def test_undo_puts_nvidia_syncs_file_back_with_the_same_addresses():
    done = run_playbook(LINK, {"link_state": "absent"})
    assert done.returncode == 0, done.output[-3000:]
    for name, address in SYNC_ADDRESS.items():
        assert not box(name).file(NETPLAN).exists
        assert not box(name).file(KEPT).exists
        assert f"{address}/24" in box(name).file(SYNC).content_string
        assert ipv4(name) == [f"{address}/24"]
    assert frames_pass("vc-spark-a", "vc-spark-b", SYNC_ADDRESS)


def test_addresses_with_mtu_1500_are_not_kept_and_the_run_says_why():
    for name in SYNC_ADDRESS:
        write_sync_file(name, 1500)
    done = run_playbook(LINK)
    out = done.output
    assert done.returncode == 0, out[-3000:]
    assert (f"did not keep the addresses of {SYNC}: vc-spark-a: {SYNC} gives enp1s0f1np1 MTU 1500; expected "
            "link_mtu 9000; vc-spark-b:") in out
    assert "the role gives its own: enp1s0f1np1 192.168.100.11/24, MTU 9000" in out
    for name, address in ROLE_ADDRESS.items():
        assert f"{address}/24" in ipv4(name)
        assert yaml.safe_load(box(name).file(NETPLAN).content_string)["network"]["ethernets"]["enp1s0f1np1"][
            "mtu"] == 9000
    assert all(frames_pass(a, b, ROLE_ADDRESS) for a in ROLE_ADDRESS for b in ROLE_ADDRESS if a != b)
