# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The driver policy's parsers: apt-get -s lines as apt prints them (the Debian 12 ones below were printed by apt 2.6
for `apt-get -s upgrade`, `install hello`, `remove patch` and `purge patch`), dpkg status stanzas, Debian versions."""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.serving.plugins.module_utils.driver_policy import (
    BRANCH_CUDA,
    package_branch,
    parse_apt_simulation,
    parse_dpkg_status,
    upstream_version,
)

# One line of apt's is longer than a line here: it is joined from two.
GCRYPT = ("Inst libgcrypt20-dev [1.10.1-3] (1.10.1-3+deb12u1 Debian:12.15/oldstable, "
          "Debian-Security:12/oldstable-security [amd64]) []")
APT_LINES = f"""\
Inst base-files [12.4+deb12u11] (12.4+deb12u15 Debian:12.15/oldstable [amd64])
Conf base-files (12.4+deb12u15 Debian:12.15/oldstable [amd64])
{GCRYPT}
Inst hello (2.10-3 Debian:12.15/oldstable [amd64])
Remv patch [2.7.6-7]
Purg dpkg-dev [1.21.22]
Inst libc6:arm64 [2.39-0ubuntu8.4] (2.39-0ubuntu8.6 Ubuntu:24.04/noble-updates [arm64])
"""


def test_every_action_line_and_none_of_the_conf_lines():
    assert parse_apt_simulation(APT_LINES) == [
        {"action": "upgrade", "package": "base-files", "from": "12.4+deb12u11", "to": "12.4+deb12u15"},
        {"action": "upgrade", "package": "libgcrypt20-dev", "from": "1.10.1-3", "to": "1.10.1-3+deb12u1"},
        {"action": "install", "package": "hello", "from": None, "to": "2.10-3"},
        {"action": "remove", "package": "patch", "from": "2.7.6-7", "to": None},
        {"action": "purge", "package": "dpkg-dev", "from": "1.21.22", "to": None},
        {"action": "upgrade", "package": "libc6", "from": "2.39-0ubuntu8.4", "to": "2.39-0ubuntu8.6"},
    ]


def test_the_summary_lines_are_not_actions():
    text = "Reading package lists...\nThe following packages will be upgraded:\n  nvidia-driver-580-open\n" \
           "1 upgraded, 0 newly installed, 0 to remove and 0 not upgraded.\n"
    assert parse_apt_simulation(text) == []


@pytest.mark.parametrize(("name", "version", "branch"), [
    ("nvidia-driver-580-open", "580.142-0ubuntu0.24.04.1", "580"),
    ("linux-modules-nvidia-580-open-6.17.0-1026-nvidia", "6.17.0-1026.26+1", "580"),
    ("nvidia-firmware-590-590.48.01", "590.48.01-0ubuntu0.24.04.1", "590"),
    ("nvidia-driver-open", "590.48.01-0ubuntu1", "590"),  # a meta package: the version says
    ("nvidia-container-toolkit", "1.18.0-1", None),
    ("libnvidia-cfg1", "1:2.0-1", None),
])
def test_the_branch_of_a_package(name, version, branch):
    assert package_branch(name, version) == branch


@pytest.mark.parametrize(("version", "upstream"), [
    ("580.142-0ubuntu0.24.04.1", "580.142"),
    ("1:580.95.05-1ubuntu1", "580.95.05"),
    ("580.95.05", "580.95.05"),
])
def test_upstream_versions(version, upstream):
    assert upstream_version(version) == upstream


def test_dpkg_stanzas_with_continuation_lines_and_states():
    text = (
        "Package: nvidia-driver-580-open\nStatus: hold ok installed\nVersion: 580.142-0ubuntu0.24.04.1\n"
        "Description: NVIDIA driver\n Version: 1 (a continuation line, not a field)\n\n"
        "Package: nvidia-driver-575-open\nStatus: deinstall ok config-files\nVersion: 575.64.03-0ubuntu0.24.04.1\n\n"
        "Package: nvidia-driver-570\nStatus: purge ok not-installed\n\n"
        "Package: bash\nStatus: install ok installed\nVersion: 5.2.21-2ubuntu4\n"
    )
    assert parse_dpkg_status(text) == [
        {"name": "nvidia-driver-575-open", "version": "575.64.03-0ubuntu0.24.04.1", "state": "config-files",
         "held": False, "branch": "575", "open": True},
        {"name": "nvidia-driver-580-open", "version": "580.142-0ubuntu0.24.04.1", "state": "installed",
         "held": True, "branch": "580", "open": True},
    ]


def test_every_row_of_the_cuda_table_cites_nvidia():
    assert BRANCH_CUDA["580"][0] == "13.0"
    assert BRANCH_CUDA["590"][0] == "13.1"
    for cuda, source in BRANCH_CUDA.values():
        assert cuda.startswith(("12.", "13."))
        assert source.startswith("https://docs.nvidia.com/cuda/")
