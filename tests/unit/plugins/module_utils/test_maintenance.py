# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The maintenance snapshot's and plan's parsers (plugins/module_utils/maintenance.py)."""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.sparkfleet.serving.plugins.module_utils import maintenance

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "gb10"

# `apt-get -s dist-upgrade` with apt 2.6.1, recorded on a Debian 12 machine (the package names are Debian's; the
# format is apt's), and a line of the test bed's stand-in repository (a flat repository: no Version in the release).
SIMULATION = "\n".join([
    "NOTE: This is only a simulation!",
    "Reading package lists...",
    "Inst base-files [12.4+deb12u11] (12.4+deb12u15 Debian:12.15/oldstable [amd64])",
    "Inst libgcrypt20-dev [1.10.1-3] (1.10.1-3+deb12u1 Debian:12.15/oldstable, "
    "Debian-Security:12/oldstable-security [amd64]) []",
    # The test bed's stand-in repository, a flat one: its release has no version (recorded in a simulated Spark).
    "Inst nvidia-driver-580-open [580.142-0ubuntu0.24.04.1] (580.159.03-0ubuntu0.24.04.1 "
    "driver-stand-in:noble-security [amd64])",
    "Inst linux-image-6.17.0-1008-nvidia (6.17.0-1008.8 driver-stand-in:noble-updates [arm64])",
    "Remv old-thing [1.0]",
    "Conf base-files (12.4+deb12u15 Debian:12.15/oldstable [amd64])",
])


def test_the_simulation_names_each_change_and_the_archives_it_comes_from():
    changes = maintenance.parse_simulation(SIMULATION)
    assert [(c["action"], c["package"], c["from"], c["to"]) for c in changes] == [
        ("upgrade", "base-files", "12.4+deb12u11", "12.4+deb12u15"),
        ("upgrade", "libgcrypt20-dev", "1.10.1-3", "1.10.1-3+deb12u1"),
        ("upgrade", "nvidia-driver-580-open", "580.142-0ubuntu0.24.04.1", "580.159.03-0ubuntu0.24.04.1"),
        ("install", "linux-image-6.17.0-1008-nvidia", None, "6.17.0-1008.8"),
        ("remove", "old-thing", "1.0", None),
    ]
    assert changes[1]["archives"] == ["oldstable", "oldstable-security"]
    assert [c["security"] for c in changes] == [False, True, True, False, False]


def test_security_takes_only_upgrades_from_a_security_pocket():
    changes = maintenance.parse_simulation(SIMULATION)
    assert [c["package"] for c in maintenance.select_upgrades(changes, "security")] == [
        "libgcrypt20-dev", "nvidia-driver-580-open"]
    assert maintenance.select_upgrades(changes, "all") == changes
    assert maintenance.select_upgrades(changes, "none") == []


def test_release_files_are_read_with_and_without_quotes():
    assert maintenance.parse_key_values('PRETTY_NAME="Ubuntu 24.04.3 LTS"\nVERSION_ID=24.04\n# c\n') == {
        "PRETTY_NAME": "Ubuntu 24.04.3 LTS", "VERSION_ID": "24.04"}
    dgx = maintenance.parse_key_values('DGX_NAME="DGX Spark"\nDGX_SWBUILD_VERSION="7.2.3"\n'
                                       'DGX_OTA_VERSION="7.3.1"\nDGX_OTA_VERSION_2="7.4.0"\n')
    assert maintenance.dgx_os_version(dgx) == "7.4.0"
    assert maintenance.dgx_os_version({"DGX_SWBUILD_VERSION": "7.2.3"}) == "7.2.3"


def test_the_loaded_driver_and_the_cuda_its_branch_runs():
    text = (FIXTURES / "proc-driver-nvidia-version.txt").read_text()
    driver = maintenance.driver_snapshot(text)
    assert driver["loaded"] and driver["flavour"] == "open" and driver["branch"] == driver["version"].split(".")[0]
    assert driver["cuda_version"] == "13.0"
    assert maintenance.driver_snapshot(None) == {"loaded": False, "version": None, "flavour": None, "branch": None,
                                                 "cuda_version": None}


def test_installed_kernel_and_nvidia_packages_only():
    status = ("Package: nvidia-driver-580-open\nStatus: install ok installed\nVersion: 580.142-0ubuntu0.24.04.1\n\n"
              "Package: linux-image-6.14.0-1015-nvidia\nStatus: install ok installed\nVersion: 6.14.0-1015.15\n\n"
              "Package: linux-image-6.11.0-1016-nvidia\nStatus: deinstall ok config-files\nVersion: 6.11.0-1016.16\n\n"
              "Package: bash\nStatus: install ok installed\nVersion: 5.2\n")
    assert maintenance.installed_watched(status) == {"linux-image-6.14.0-1015-nvidia": "6.14.0-1015.15",
                                                     "nvidia-driver-580-open": "580.142-0ubuntu0.24.04.1"}


def test_an_images_cuda_requirement():
    assert maintenance.image_cuda(["NVIDIA_REQUIRE_CUDA=cuda>=13.0 brand=unknown,driver>=535", "CUDA_VERSION=13.0.2"]) \
        == "13.0"
    assert maintenance.image_cuda(["CUDA_VERSION=12.9.1"]) == "12.9"
    assert maintenance.image_cuda(["PATH=/usr/bin"]) is None
    assert maintenance.newest_cuda(["12.9", None, "13.1", "13.0"]) == "13.1"
    assert maintenance.newest_cuda([None]) is None


def test_fwupd_devices_and_their_releases():
    text = json.dumps({"Devices": [{"Name": "Embedded Controller", "DeviceId": "abc", "Version": "1.2",
                                    "Releases": [{"Version": "1.3"}]}, {"Name": "SSD"}]})
    assert maintenance.parse_fwupd(text) == [
        {"name": "Embedded Controller", "device_id": "abc", "version": "1.2", "releases": ["1.3"]},
        {"name": "SSD", "device_id": None, "version": None, "releases": []}]
    assert maintenance.parse_fwupd("not json") == []


def test_the_reboot_flag_and_who_asked_for_it():
    assert maintenance.reboot_required(True, "nvidia-driver-580-open\nlinux-base\nlinux-base\n") == {
        "required": True, "packages": ["linux-base", "nvidia-driver-580-open"]}
    assert maintenance.reboot_required(False, None) == {"required": False, "packages": []}
