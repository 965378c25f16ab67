"""Rolling maintenance (playbooks/maintain.yml) of fleet-2 and fleet-3, behind the gateway on fleet-1, with clients
sending requests through the gateway all along. fleet-1 (the gateway, the cache and Prometheus) is left out
(--limit): rebooting the endpoint's own box would cut every client.

Each box's mirror is a stand-in apt repository on the box (tests/testbed/standins/bin/simspark-driver-repo: real
packages, a real signed apt repository over HTTP, in the noble-security pocket) offering stand-in kernel and NVIDIA
driver packages; their postinst scripts ask for a reboot as Ubuntu's do, and the box's reboot is real (systemd ends
the container, Docker starts it again: molecule/resources/create.yml). What the next boot loads is staged by the
packages (simspark-boot-driver), so the driver a box runs changes only with its reboot.

0. An update the driver policy refuses: fleet-3's mirror offers a new nvidia-driver-580-open that is a transitional
   package pulling in the 590 branch (fleet-2's, a good driver), and fleet-3 also has the uninstaller NVIDIA's .run
   installer leaves. Phase 1 refuses fleet-3 with both reasons; no box is changed, fleet-2 included.
1. A kernel after which the NVIDIA module does not load (DGX OS 7.4.0's story): the driver policy cannot foresee it.
   fleet-2, the canary, is updated and rebooted, its vLLM cannot start (the container runtime's hook: "nvml error:
   driver not loaded"), so it fails its gate and stays out of the gateway; the run stops before fleet-3's batch.
2. A fixed kernel and a newer driver: fleet-2's owner installs the kernel and reboots (the check play refuses a box
   without a driver, so the maintenance leaves it to its owner); the run is killed while fleet-2 is in its
   maintenance, then run again; the second run finishes fleet-2 from the phase it had reached, then fleet-3. Both
   boxes run the new driver, serve, are back in the gateway; no request through the gateway failed during the two
   runs; the evidence before and after is on the controller. fleet-3 also has a firmware update staged by fwupd
   (the fwupdmgr stand-in: applied by the next boot) and GPU clock caps set (nvidia_runtime_gpu_clock_limits in
   molecule.yml), which its reboot drops and which are in force again when it is back.
3. --check afterwards plans every box, finds nothing to do and changes nothing.

Runs after test_registry_cache.py and before test_several_deployments.py (sorted order), on boxes that serve.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from spark_testinfra import PROJECT, eventually, run_playbook
from test_fleet import box, gateway_load, routed, serves

MAINTAIN = PROJECT / "playbooks" / "maintain.yml"
TWO = ("fleet-2", "fleet-3")
LIMIT = ",".join(TWO)
RECORD = "/var/lib/sparkfleet/maintenance.json"
PORT, SUITE = 8766, "noble-security"
KERNEL = "linux-image-nvidia-hwe-24.04"
DRIVER = "nvidia-driver-580-open"
NEW_DRIVER = "580.159.03"
FIRMWARE = "System Firmware"
# The stand-in nvidia-smi's driver state (tests/testbed/standins/bin/nvidia-smi): under /run, a tmpfs a reboot empties.
HELD_CLOCKS = "/run/sparkfleet-sim/gpu-clocks.json"
# What NVIDIA's .run installer leaves on a box (the driver policy's evidence, plugins/module_utils/driver_policy.py).
RUN_UNINSTALLER = "/usr/bin/nvidia-uninstall"


def offer(*packages: str, boxes: tuple[str, ...] = TWO) -> None:
    """Each box's mirror offers these packages now (and only its stand-in repository is a source)."""
    for name in boxes:
        host = box(name)
        # The image's Debian source is left aside for the tests: the plan is then exactly what the stand-in offers.
        host.check_output("[ ! -f /etc/apt/sources.list ] || mv /etc/apt/sources.list /etc/apt/sources.list.sim-off")
        host.check_output(f"simspark-driver-repo {PORT} {SUITE} {' '.join(packages)}")


def maintenance_record(name: str) -> dict:
    done = box(name).run(f"cat {RECORD}")
    return json.loads(done.stdout) if done.rc == 0 else {}


def driver(name: str) -> str:
    return box(name).check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader || true").strip()


def maintain_vars(summary: Path, evidence: Path, **more) -> dict:
    return {"maintain_summary_file": str(summary), "maintenance_evidence_dir": str(evidence), **more}


def maintain_command(extra_vars: dict) -> list[str]:
    env_inventory = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
    return ["ansible-playbook", "--inventory", str(env_inventory), "--limit", LIMIT, "--extra-vars",
            json.dumps(extra_vars), str(MAINTAIN)]


def run_maintain(summary: Path, evidence: Path, **more):
    return run_playbook(MAINTAIN, maintain_vars(summary, evidence, **more), limit=LIMIT)


def packages(name: str) -> str:
    return box(name).check_output("dpkg-query -W -f '${Package} ${Version}\\n' 'nvidia-*' 'linux-image-*'")


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    work = tmp_path_factory.mktemp("maintenance-refused")
    offer(f"{DRIVER}={NEW_DRIVER}-0ubuntu0.24.04.1", boxes=("fleet-2",))
    offer(f"{DRIVER}=580.200.01-0ubuntu0.24.04.1:transitional=nvidia-driver-590-open",
          "nvidia-driver-590-open=590.48.01-0ubuntu0.24.04.1", boxes=("fleet-3",))
    before = {name: packages(name) for name in TWO}
    # The rotation as the earlier tests left it (the router may still be re-admitting a box they restarted).
    rotation = set(routed())
    # A .run driver's trace on fleet-3 for this run only: an executable file where the installer puts its uninstaller.
    box("fleet-3").check_output(f"printf '#!/bin/sh\\nexit 1\\n' > {RUN_UNINSTALLER} && chmod 755 {RUN_UNINSTALLER}")
    try:
        done = run_maintain(work / "summary.json", work / "evidence")
    finally:
        box("fleet-3").check_output(f"rm -f {RUN_UNINSTALLER}")
    return done, by_host(work / "summary.json"), before, rotation


def test_an_update_the_driver_policy_refuses_stops_the_run_before_any_box_changes(refused):
    done, hosts, before, rotation = refused
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "fleet-3: the maintenance is refused before any change, by the driver policy" in output
    assert "would install nvidia-driver-590-open 590.48.01" in output
    assert f"Driver installed by NVIDIA's .run installer: found {RUN_UNINSTALLER} present" in output
    # fleet-2's update was allowed, but no batch starts while a box is refused.
    assert (hosts["fleet-2"]["state"], hosts["fleet-3"]["state"]) == ("planned", "not_planned")
    for name in TWO:
        assert packages(name) == before[name]
        assert maintenance_record(name) == {}
        assert driver(name) == "580.142"
    # No box was drained: every box the gateway routed to before the run, it still routes to.
    assert rotation <= set(routed()), (rotation, routed())


def by_host(summary: Path) -> dict[str, dict]:
    return {entry["host"]: entry for entry in json.loads(summary.read_text())["hosts"]}


@pytest.fixture(scope="module")
def broken(refused, tmp_path_factory):
    work = tmp_path_factory.mktemp("maintenance-broken")
    offer(f"{KERNEL}=6.17.0-1008.8~24.04.1:broken")
    before = {name: box(name).check_output(f"dpkg-query -W -f '${{Version}}' {KERNEL}") for name in TWO}
    with gateway_load(on="fleet-1") as load:
        done = run_maintain(work / "summary.json", work / "evidence")
    return done, by_host(work / "summary.json"), before, load


def test_the_canary_that_fails_its_gate_stays_out_and_the_next_batch_never_starts(broken):
    done, hosts, before, load = broken
    assert done.returncode != 0
    assert "The maintenance stopped" in done.stdout + done.stderr
    assert (hosts["fleet-2"]["state"], hosts["fleet-2"]["batch"]) == ("failed", 1)
    assert hosts["fleet-2"]["rebooted"] is True
    assert hosts["fleet-2"]["failure"]["task"]
    assert "driver not loaded" in done.stdout + done.stderr
    assert hosts["fleet-3"]["state"] == "planned"
    # fleet-3 was never touched: its kernel package and its record are as they were.
    assert box("fleet-3").check_output(f"dpkg-query -W -f '${{Version}}' {KERNEL}") == before["fleet-3"]
    assert maintenance_record("fleet-3") == {}
    record = maintenance_record("fleet-2")
    assert record["state"] == "failed" and [h["state"] for h in record["history"]][:5] == [
        "begun", "drained", "stopped", "updated", "rebooted"]
    # Out of the gateway's rotation; the endpoint kept answering from the others.
    assert "http://fleet-2:8000" not in routed()
    assert load["failed"] == [] and load["ok"] > 0, load["failed"][:5]


def booted(name: str) -> bool:
    state = box(name).run("systemctl is-system-running").stdout.strip()
    return state in ("running", "degraded") and box(name).run("systemctl is-active docker.service").rc == 0


def owner_repairs(name: str) -> None:
    """What the owner of a box whose update broke its GPU does: install the fixed kernel and reboot. The check play
    refuses a box without a driver (preflight): maintain.yml does not touch it until it has one again."""
    host = box(name)
    host.check_output(f"apt-get update -qq && apt-get install -y -qq --only-upgrade {KERNEL} >/dev/null")
    boot = host.check_output("awk '{print $22}' /proc/1/stat")
    host.run("systemctl reboot")
    assert eventually(lambda: host.run("awk '{print $22}' /proc/1/stat").stdout.strip() not in ("", boot)
                      and booted(name), 180)
    assert driver(name) == "580.142"


@pytest.fixture(scope="module")
def repaired(broken, tmp_path_factory):
    work = tmp_path_factory.mktemp("maintenance-repaired")
    offer(f"{KERNEL}=6.17.0-1009.9~24.04.1:ok", f"{DRIVER}={NEW_DRIVER}-0ubuntu0.24.04.1")
    owner_repairs("fleet-2")
    # fleet-3's firmware: a UEFI capsule device (applied at the next boot) and a newer release on the LVFS.
    box("fleet-3").check_output(f"simspark-firmware add '{FIRMWARE}' 1.0.2 "
                                f"&& simspark-firmware offer '{FIRMWARE}' 1.0.3")
    extra_vars = maintain_vars(work / "killed.json", work / "evidence", maintenance_firmware=True)
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(PROJECT / ".ansible" / "collections")}
    started = time.monotonic()
    with gateway_load(on="fleet-1") as load:
        # The controller dies (its whole process group, SIGKILL: no rescue, no summary) once fleet-2 recorded that
        # it is updated: its reboot and start are left to the next run.
        with (work / "killed.log").open("w") as log:
            killed = subprocess.Popen(maintain_command(extra_vars), env=env, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        try:
            assert eventually(lambda: maintenance_record("fleet-2").get("state") == "updated"
                              or killed.poll() is not None, 600, interval=0.3)
        finally:
            os.killpg(killed.pid, signal.SIGKILL)
            killed.wait()
        reached = maintenance_record("fleet-2").get("state")
        done = run_maintain(work / "summary.json", work / "evidence", maintenance_firmware=True)
    return done, by_host(work / "summary.json"), reached, load, work, time.monotonic() - started


def test_the_killed_run_is_finished_by_the_next_and_both_boxes_are_back(repaired):
    done, hosts, reached, _load, _work, taken = repaired
    assert reached == "updated"
    assert done.returncode == 0, done.stdout[-5000:]
    assert [(hosts[name]["state"], hosts[name]["batch"]) for name in TWO] == [("done", 1), ("done", 2)]
    for name in TWO:
        assert driver(name) == NEW_DRIVER
        assert serves(name)
        assert f"http://{name}:8000" in routed()
        record = maintenance_record(name)
        assert record["state"] == "done" and record["rebooted"] is True
        assert f"driver 580.142 -> {NEW_DRIVER}" in record["changes"]
    # fleet-2 went on from the phase the killed run had recorded: it was not drained, stopped or updated again.
    states = [h["state"] for h in maintenance_record("fleet-2")["history"]]
    last_update = len(states) - 1 - states[::-1].index("updated")
    assert states[last_update:] == ["updated", "rebooted", "serving", "restored", "done"]
    print(f"maintenance of two boxes, killed once and run again: {taken:.0f} s; per box: "
          + ", ".join(f"{name} {hosts[name]['took_s']:.0f} s "
                      f"(out of the gateway {hosts[name]['out_of_service_s']:.0f} s)" for name in TWO))


def firmware_version(name: str) -> str | None:
    devices = json.loads(box(name).run("fwupdmgr get-devices --json").stdout or "{}").get("Devices", [])
    return next((device.get("Version") for device in devices if device.get("Name") == FIRMWARE), None)


def test_the_firmware_update_was_applied_by_the_reboot(repaired):
    assert firmware_version("fleet-3") == "1.0.3"
    assert f"firmware {FIRMWARE} 1.0.2 -> 1.0.3" in maintenance_record("fleet-3")["changes"]
    assert not any("firmware" in change for change in maintenance_record("fleet-2")["changes"])


def test_the_gpu_clock_caps_are_in_force_again_after_the_reboot(repaired):
    # /run is emptied by the reboot: the caps held now were set since it (the unit at boot, or clocks-reapply).
    held = json.loads(box("fleet-3").check_output(f"cat {HELD_CLOCKS}"))
    assert list(held.values()) == [{"min_mhz": 600, "max_mhz": 1800}]
    assert box("fleet-2").run(f"test -e {HELD_CLOCKS}").rc != 0  # no caps set there


def test_no_request_through_the_gateway_failed(repaired):
    load = repaired[3]
    assert load["failed"] == [] and load["ok"] > 0, load["failed"][:5]


def test_the_evidence_before_and_after_is_on_the_controller(repaired):
    evidence = repaired[4] / "evidence"
    for name in TWO:
        before = json.loads((evidence / f"{name}-before.json").read_text())
        after = json.loads((evidence / f"{name}-after.json").read_text())
        assert after["driver"]["version"] == NEW_DRIVER and after["driver"]["loaded"] is True
        assert after["packages"][DRIVER] == f"{NEW_DRIVER}-0ubuntu0.24.04.1"
        assert before["packages"][DRIVER] != after["packages"][DRIVER]


def test_check_mode_plans_every_box_and_changes_nothing(repaired, tmp_path):
    records = {name: maintenance_record(name) for name in TWO}
    done = run_playbook(MAINTAIN, {"maintain_summary_file": str(tmp_path / "s.json"),
                                   "maintenance_evidence_dir": str(tmp_path / "e")}, limit=LIMIT, check=True)
    assert done.returncode == 0, done.stdout[-4000:]
    assert "no package to install (security)" in done.stdout
    assert {name: maintenance_record(name) for name in TWO} == records
    assert all(entry["state"] == "unchanged" for entry in by_host(tmp_path / "s.json").values())


def teardown_module() -> None:
    """Later tests find each box with its own apt sources and serving."""
    for name in TWO:
        box(name).run("[ ! -f /etc/apt/sources.list.sim-off ] "
                      "|| mv /etc/apt/sources.list.sim-off /etc/apt/sources.list")
        box(name).run("rm -f /etc/apt/sources.list.d/simspark-driver.list")
    assert all(eventually(lambda n=name: serves(n), 120) for name in TWO)
