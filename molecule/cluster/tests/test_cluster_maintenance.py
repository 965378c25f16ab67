"""Rolling maintenance (playbooks/maintain.yml) of a cluster: its members are one unit, taken out, stopped, rebooted
and started again together, the cluster serving again as one before the run ends. maintenance_reboot: always and
maintenance_upgrade: none: the boxes have no package mirror here, and what a cluster member's maintenance adds to a
single box's (the cluster stopped and started as one, the link put right after the reboot by the link role, the
cluster boot unit leaving a cleanly stopped member alone) is in the reboot and what follows it. Each box's reboot is
real: systemd ends the container, Docker starts it again (molecule/resources/create.yml), the test bed's unit names
the link's interface again at boot (prepare.yml).

Runs after test_cluster_guard.py (file order), on the cluster it leaves serving.
"""

from __future__ import annotations

import json

import pytest
import test_cluster
from spark_testinfra import PROJECT, eventually, run_playbook
from test_cluster import HEAD, LINK, box, inspect
from test_link import cx7

MAINTAIN = PROJECT / "playbooks" / "maintain.yml"
RECORD = "/var/lib/sparkfleet/maintenance.json"


def answers() -> bool:
    return test_cluster.answers() is not None


def boot_of(name: str) -> str:
    """The start time of the box's PID 1 (a container keeps its host's boot id): new at every boot."""
    return box(name).check_output("awk '{print $22}' /proc/1/stat").strip()


def link_of(name: str) -> tuple[int, list[str]]:
    link = cx7(name)
    return link["mtu"], [a["local"] for a in link.get("addr_info", []) if a.get("family") == "inet"]


@pytest.fixture(scope="module")
def maintained(tmp_path_factory):
    work = tmp_path_factory.mktemp("cluster-maintenance")
    assert eventually(answers, 120), "the cluster does not serve before its maintenance"
    boots = {name: boot_of(name) for name in LINK}
    started = {name: inspect(name)["State"]["StartedAt"] for name in LINK}
    done = run_playbook(MAINTAIN, {"maintain_summary_file": str(work / "summary.json"),
                                   "maintenance_evidence_dir": str(work / "evidence"),
                                   "maintenance_reboot": "always", "maintenance_upgrade": "none"})
    summary = json.loads((work / "summary.json").read_text()) if (work / "summary.json").exists() else {}
    return done, {entry["host"]: entry for entry in summary.get("hosts", [])}, boots, started


def test_the_cluster_is_maintained_as_one_unit(maintained):
    done, hosts, _boots, _started = maintained
    assert done.returncode == 0, done.stdout[-5000:]
    # One batch: the three members together (a cluster is one unit of maintain_batches).
    assert {name: (hosts[name]["state"], hosts[name]["batch"]) for name in LINK} == {
        name: ("done", 1) for name in LINK}


def test_every_member_rebooted_and_its_link_is_right_again(maintained):
    done, _hosts, boots, _started = maintained
    for name, address in LINK.items():
        assert boot_of(name) != boots[name], f"{name} did not reboot"
        mtu, addresses = link_of(name)
        assert (mtu, addresses) == (9000, [address]), name
        record = json.loads(box(name).check_output(f"cat {RECORD}"))
        assert record["state"] == "done" and record["rebooted"] is True, record
    # The link role ran on every member after its reboot, and checked the link end to end.
    assert done.stdout.count("Put a cluster member's link right again") >= 1


def test_the_cluster_serves_again_with_every_member_started_anew(maintained):
    _done, _hosts, _boots, started = maintained
    assert answers()
    for name in LINK:
        state = inspect(name)["State"]
        assert state["Running"] and state["StartedAt"] > started[name], name
    # The boot unit found vLLM stopped cleanly by the maintenance: it left it to the run (no start of its own).
    journal = box(HEAD).check_output("journalctl -b -u sparkfleet-vllm-cluster-boot@vllm --no-pager -o cat")
    assert "starting it" not in journal, journal


def teardown_module() -> None:
    """Later tests find the cluster serving."""
    assert eventually(answers, 120)
