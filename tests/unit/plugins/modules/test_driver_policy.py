# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""driver_policy end to end: the real GB10 /proc/driver/nvidia/version, dpkg status files and apt-get -s plans in the
real tools' layout (tests/fixtures/driver/README.md), AnsibleModule's argument handling and exit / fail results."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.sparkfleet.serving.plugins.modules import driver_policy

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
GB10_VERSION = FIXTURES / "gb10" / "proc-driver-nvidia-version.txt"
DRIVER = FIXTURES / "driver"
STATUS = DRIVER / "dpkg-status-gb10-580-open"
PROPRIETARY = DRIVER / "proc-driver-nvidia-version-proprietary-aarch64.txt"
WITHIN_580 = (DRIVER / "apt-get-s-dist-upgrade-within-580.txt").read_text(encoding="utf-8")
TO_590 = (DRIVER / "apt-get-s-dist-upgrade-to-590.txt").read_text(encoding="utf-8")


def run_module(args: dict, capsys) -> tuple[int, dict]:
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        driver_policy.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def box(tmp_path: Path) -> dict:
    """A good GB10: the 580.142 open module loaded, its packages installed, no .run installer, a routine plan."""
    return {
        "driver_version_file": str(GB10_VERSION),
        "dpkg_status_file": str(STATUS),
        "run_uninstaller_path": str(tmp_path / "usr/bin/nvidia-uninstall"),
        "run_installer_log_path": str(tmp_path / "var/log/nvidia-installer.log"),
        "upgrade_output": WITHIN_580,
        "image_cuda_version": "13.0",
    }


def requirements(result: dict) -> list[str]:
    return [p["requirement"] for p in result["problems"]]


def test_a_good_gb10_with_a_routine_upgrade_passes(box, capsys):
    code, result = run_module(box, capsys)
    assert code == 0, result.get("msg")
    assert result["changed"] is False
    assert result["passed"] is True
    assert result["problems"] == []
    driver = result["driver"]
    assert (driver["branch"], driver["version"], driver["open"], driver["cuda_version"]) == ("580", "580.142", True,
                                                                                             "13.0")
    assert driver["module"] == {"loaded": True, "version": "580.142", "flavour": "open", "error": None}
    assert driver["package_version"] == "580.142"
    names = [p["name"] for p in driver["packages"]]
    assert "nvidia-driver-580-open" in names
    assert "nvidia-container-toolkit" not in names  # versions of its own, not the driver's
    assert "adduser" not in names
    assert driver["run_installer"] == {"present": False, "uninstaller": None, "log": None}
    upgrade = result["upgrade"]
    assert upgrade["simulated"] == "upgrade_output"
    assert (upgrade["driver_version_after"], upgrade["cuda_version_after"]) == ("580.159.03", "13.0")
    planned = {c["package"]: c for c in upgrade["changes"]}
    assert "bash" not in planned
    assert planned["nvidia-driver-580-open"] == {
        "action": "upgrade", "package": "nvidia-driver-580-open", "from": "580.142-0ubuntu0.24.04.1",
        "to": "580.159.03-0ubuntu0.24.04.1", "branch": "580", "open": True}
    assert planned["linux-modules-nvidia-580-open-6.17.0-1032-nvidia"]["action"] == "install"
    # Nothing is held: said, not refused (the plan itself is checked).
    assert any(w.startswith("not held: ") and "nvidia-driver-580-open" in w for w in result["warnings_found"])


def test_the_same_in_check_mode(box, capsys):
    code, result = run_module({**box, "_ansible_check_mode": True}, capsys)
    assert code == 0
    assert result["changed"] is False
    assert result["passed"] is True


def test_the_proprietary_module_is_refused(box, capsys):
    code, result = run_module({**box, "driver_version_file": str(PROPRIETARY)}, capsys)
    assert code == 1
    assert requirements(result) == ["NVIDIA kernel module flavour"]
    found = result["problems"][0]
    assert found["found"] == "proprietary 580.142"
    assert found["required"] == "the open kernel module"
    assert "install nvidia-driver-580-open" in found["fix"]
    assert "NVIDIA kernel module flavour: found proprietary 580.142, required the open kernel module" in result["msg"]
    assert result["driver"]["open"] is False


def test_a_proprietary_module_is_accepted_when_the_policy_allows_it(box, capsys):
    args = {**box, "driver_version_file": str(PROPRIETARY), "require_open": False}
    code, result = run_module(args, capsys)
    assert code == 0, result.get("msg")


def test_a_run_installer_driver_is_refused(box, capsys):
    uninstaller = Path(box["run_uninstaller_path"])
    uninstaller.parent.mkdir(parents=True)
    uninstaller.write_text("#!/bin/sh\n")
    uninstaller.chmod(uninstaller.stat().st_mode | stat.S_IXUSR)
    code, result = run_module(box, capsys)
    assert code == 1
    assert requirements(result) == ["Driver installed by NVIDIA's .run installer"]
    assert result["problems"][0]["found"] == f"{uninstaller} present"
    assert "sudo nvidia-uninstall" in result["problems"][0]["fix"]
    assert result["driver"]["run_installer"]["present"] is True


def test_the_log_of_a_removed_run_driver_is_only_a_warning(box, capsys):
    log = Path(box["run_installer_log_path"])
    log.parent.mkdir(parents=True)
    log.write_text("nvidia-installer log file '/var/log/nvidia-installer.log'\n")
    code, result = run_module(box, capsys)
    assert code == 0
    assert any(str(log) in w and ".run installer ran" in w for w in result["warnings_found"])


def test_an_upgrade_to_the_590_branch_is_refused(box, capsys):
    code, result = run_module({**box, "upgrade_output": TO_590}, capsys)
    assert code == 1
    assert requirements(result) == ["Driver branch after the upgrade", "Open kernel modules after the upgrade"]
    moved, removed = result["problems"]
    assert "nvidia-driver-590-open 590.48.01-0ubuntu0.24.04.1" in moved["found"]
    assert moved["required"] == "the 580 branch only"
    assert "sudo apt-mark hold" in moved["fix"] and "nvidia-driver-580-open" in moved["fix"]
    assert "nvidia-driver-580-open" in removed["found"]
    assert "linux-modules-nvidia-580-open-6.17.0-1026-nvidia" in removed["found"]
    assert result["upgrade"]["driver_version_after"] == "590.48.01"
    assert result["upgrade"]["cuda_version_after"] == "13.1"


def test_an_upgrade_within_580_is_allowed_even_with_a_new_kernel(box, capsys):
    code, result = run_module({**box, "require_hold": False}, capsys)
    assert code == 0
    kernels = [c for c in result["upgrade"]["changes"] if c["package"].startswith("linux-image-")]
    assert [c["package"] for c in kernels] == ["linux-image-6.17.0-1032-nvidia"]


def test_a_new_kernel_without_nvidia_modules_for_it_is_refused(box, capsys):
    plan = "\n".join(line for line in WITHIN_580.splitlines()
                     if "linux-modules-nvidia-580-open-6.17.0-1032-nvidia" not in line)
    code, result = run_module({**box, "upgrade_output": plan}, capsys)
    assert code == 1
    assert requirements(result) == ["NVIDIA modules for the new kernel"]
    assert "linux-modules-nvidia-580-open-6.17.0-1032-nvidia" in result["problems"][0]["found"]


def test_an_image_needing_a_newer_cuda_than_the_driver_runs_is_refused(box, capsys):
    code, result = run_module({**box, "image_cuda_version": "13.1"}, capsys)
    assert code == 1
    # Refused now, and after the routine upgrade (580.159.03 still runs 13.0).
    assert requirements(result) == ["CUDA version of the image", "CUDA version of the image after the upgrade"]
    now = result["problems"][0]
    assert now["found"] == "the image needs CUDA 13.1; driver 580.142 runs CUDA up to 13.0"
    assert now["required"] == "a driver that runs CUDA 13.1 (branch 590 or newer)"
    assert "built for CUDA 13.0 or older" in now["fix"]


def test_an_older_image_cuda_passes(box, capsys):
    code, _result = run_module({**box, "image_cuda_version": "12.9"}, capsys)
    assert code == 0


def test_a_missing_version_file_says_the_module_is_not_loaded(box, capsys, tmp_path):
    missing = tmp_path / "proc/driver/nvidia/version"
    code, result = run_module({**box, "driver_version_file": str(missing)}, capsys)
    assert code == 1
    assert requirements(result) == ["NVIDIA kernel module"]
    assert result["problems"][0]["found"] == f"none loaded ({missing} does not exist)"
    assert result["driver"]["module"]["error"] == f"{missing} does not exist"
    # The packages still say what is installed.
    assert (result["driver"]["branch"], result["driver"]["version"]) == ("580", "580.142")


def test_an_unreadable_dpkg_database_is_a_problem_named_with_its_path(box, capsys, tmp_path):
    code, result = run_module({**box, "dpkg_status_file": str(tmp_path), "fail_on_error": False}, capsys)
    assert code == 0  # fail_on_error: false returns the problems
    assert result["passed"] is False
    first = result["problems"][0]
    assert first["requirement"] == "dpkg's database"
    assert first["found"] == f"cannot read {tmp_path} (Is a directory)"
    assert result["driver"]["packages"] == []


def test_held_packages_are_required_when_the_policy_says_so(box, capsys, tmp_path):
    code, result = run_module({**box, "require_hold": True}, capsys)
    assert code == 1
    assert requirements(result) == ["Held driver packages"]
    held = tmp_path / "status"
    text = STATUS.read_text(encoding="utf-8")
    held.write_text(text.replace("Status: install ok installed", "Status: hold ok installed"))
    code, result = run_module({**box, "require_hold": True, "dpkg_status_file": str(held)}, capsys)
    assert code == 0, result.get("msg")
    assert "nvidia-driver-580-open" in result["driver"]["held"]
    assert not any(w.startswith("not held") for w in result["warnings_found"])


def test_a_pending_reboot_is_a_warning(box, capsys, tmp_path):
    newer = tmp_path / "status"
    newer.write_text(STATUS.read_text(encoding="utf-8").replace("Version: 580.142-0ubuntu0.24.04.1",
                                                                "Version: 580.159.03-0ubuntu0.24.04.1"))
    code, result = run_module({**box, "dpkg_status_file": str(newer)}, capsys)
    assert code == 0
    assert any("reboot is pending" in w for w in result["warnings_found"])


def fake_apt_get(directory: Path, body: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "apt-get"
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(0o755)


def test_the_module_runs_apt_get_in_simulation_without_locking(box, capsys, tmp_path, monkeypatch):
    plan = tmp_path / "plan.txt"
    plan.write_text(WITHIN_580)
    calls = tmp_path / "calls"
    fake_apt_get(tmp_path / "bin", f'echo "$@" > "{calls}"; cat "{plan}"\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    args = {key: value for key, value in box.items() if key != "upgrade_output"}
    code, result = run_module(args, capsys)
    assert code == 0, result.get("msg")
    assert calls.read_text().split() == ["-s", "-o", "Debug::NoLocking=1", "dist-upgrade"]
    assert result["upgrade"]["simulated"] == "dist-upgrade"
    assert result["upgrade"]["driver_version_after"] == "580.159.03"


def test_a_failing_simulation_is_a_problem_with_apts_words(box, capsys, tmp_path, monkeypatch):
    fake_apt_get(tmp_path / "bin", "echo 'E: dpkg was interrupted, you must manually run dpkg --configure -a' >&2\n"
                                   "exit 100\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    args = {key: value for key, value in box.items() if key != "upgrade_output"}
    code, result = run_module({**args, "upgrade": "upgrade"}, capsys)
    assert code == 1
    assert requirements(result) == ["Simulated upgrade"]
    assert "failed (exit code 100): E: dpkg was interrupted" in result["problems"][0]["found"]
    assert result["problems"][0]["required"] == "`apt-get -s upgrade` succeeding"


def test_no_simulation_checks_only_what_is_installed(box, capsys):
    args = {key: value for key, value in box.items() if key != "upgrade_output"}
    code, result = run_module({**args, "upgrade": "none", "image_cuda_version": "13.1"}, capsys)
    assert code == 1
    assert requirements(result) == ["CUDA version of the image"]
    assert result["upgrade"]["changes"] == []


@pytest.mark.parametrize(("option", "value", "words"), [
    ("branch", "58x", "branch: found '58x'; expected a driver branch such as 580"),
    ("image_cuda_version", "thirteen", "image_cuda_version: not a version number: 'thirteen'"),
])
def test_options_that_cannot_be_used_are_refused_naming_them(box, capsys, option, value, words):
    code, result = run_module({**box, option: value}, capsys)
    assert code == 1
    assert words in result["msg"]
