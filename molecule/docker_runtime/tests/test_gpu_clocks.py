"""dk-dgx: GPU clock caps (nvidia_runtime_gpu_clock_limits: 600-1800 MHz) applied by the role's oneshot unit,
held by the stand-in's simulated driver, shown by playbooks/status.yml and checked by playbooks/doctor.yml."""

from __future__ import annotations

import json
from pathlib import Path

from spark_testinfra import PROJECT, run_playbook

testinfra_hosts = ["dk-dgx"]

UNIT = "sparkfleet-gpu-clocks.service"
CONVERGE = Path(__file__).resolve().parents[1] / "converge.yml"
# The stand-in nvidia-smi's driver state (tests/testbed/standins/bin/nvidia-smi): under /run, a tmpfs.
HELD = "/run/sparkfleet-sim/gpu-clocks.json"
GB10 = "0000000F:01:00.0"
CONFIRMED = f'GPU clocks set to "(gpuClkMin 600, gpuClkMax 1800)" for GPU {GB10}'


def test_the_unit_is_enabled_and_ran(host):
    unit = host.service(UNIT)
    assert unit.is_enabled
    assert unit.is_running  # a oneshot with RemainAfterExit=yes: active (exited)
    text = host.file(f"/etc/systemd/system/{UNIT}").content_string
    assert "ExecStart=/usr/bin/nvidia-smi -lgc 600,1800\n" in text
    assert "WantedBy=multi-user.target" in text and "After=nvidia-persistenced.service" in text


def test_the_simulated_driver_holds_the_caps_and_the_journal_has_its_answer(host):
    assert json.loads(host.file(HELD).content_string) == {GB10: {"min_mhz": 600, "max_mhz": 1800}}
    assert CONFIRMED in host.check_output(f"journalctl --no-pager --output=cat --unit={UNIT}")


def test_status_shows_the_caps_and_the_doctor_flags_them_once_lost(host, tmp_path):
    report = tmp_path / "status.json"
    status = run_playbook(PROJECT / "playbooks/status.yml",
                          {"status_hosts": "dk-dgx", "status_json_path": str(report)})
    assert status.returncode == 0, status.output
    [row] = json.loads(report.read_text(encoding="utf-8"))["hosts"]
    assert (row["gpu_clocks_wanted"], row["gpu_clocks_applied"], row["gpu_clocks_differ"]) == (
        "600-1800 MHz", "600-1800 MHz", "")
    assert run_playbook(PROJECT / "playbooks/doctor.yml", limit="dk-dgx").returncode == 0

    # What a reboot without the unit leaves: nothing applied. Stopping the unit resets the clocks (ExecStop -rgc).
    host.run_expect([0], f"systemctl stop {UNIT}")
    assert not host.file(HELD).exists
    doctor = run_playbook(PROJECT / "playbooks/doctor.yml", limit="dk-dgx")
    assert doctor.returncode != 0
    assert f"{UNIT} is inactive: the caps were not applied since the box started" in doctor.output

    # The role starts it again; the driver confirms the caps anew.
    assert run_playbook(CONVERGE, limit="dk-dgx").returncode == 0
    assert json.loads(host.file(HELD).content_string) == {GB10: {"min_mhz": 600, "max_mhz": 1800}}
    assert run_playbook(PROJECT / "playbooks/doctor.yml", limit="dk-dgx").returncode == 0
