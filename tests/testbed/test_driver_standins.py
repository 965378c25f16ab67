"""The stand-ins of a driver or kernel update and of the reboot that loads it (standins/bin/simspark-boot-driver,
standins/driver/build-driver-debs), run without a box: SPARKFLEET_SIM_ROOT points them at a directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
BIN = HERE / "standins" / "bin"
PROFILES = HERE / "standins" / "profiles"
BUILD = HERE / "standins" / "driver" / "build-driver-debs"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    shutil.copytree(PROFILES, tmp_path / "usr/lib/sparkfleet-sim/profiles")
    (tmp_path / "usr/local").mkdir(parents=True)
    return tmp_path


def tool(root: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPARKFLEET_SIM_ROOT": str(root),
           "SIMSPARK_PROFILE": str(HERE / "standins" / "bin" / "simspark-profile")}
    command = [sys.executable, str(BIN / "simspark-boot-driver"), *argv]
    if argv[:1] == ["apply"]:
        # simspark-profile is a Python script without its interpreter's path here.
        env["SIMSPARK_PROFILE"] = str(root / "simspark-profile")
        (root / "simspark-profile").write_text(f"#!/bin/sh\nexec {sys.executable} {BIN / 'simspark-profile'} \"$@\"\n")
        (root / "simspark-profile").chmod(0o755)
    return subprocess.run(command, env=env, capture_output=True, text=True, check=False)


def version_file(root: Path) -> Path:
    return root / "var/lib/sparkfleet-sim/proc/driver/nvidia/version"


def test_a_staged_driver_is_loaded_only_at_the_next_boot(root):
    assert subprocess.run([sys.executable, str(BIN / "simspark-profile"), "gb10"], check=True, capture_output=True,
                          env={**os.environ, "SPARKFLEET_SIM_ROOT": str(root)}).returncode == 0
    assert tool(root, "stage", "driver", "580.159.03").returncode == 0
    assert "580.142" in version_file(root).read_text()
    assert tool(root, "apply").returncode == 0
    booted = json.loads((root / "usr/lib/sparkfleet-sim/profiles/booted.json").read_text())
    assert (booted["driver_version"], booted["driver_loaded"]) == ("580.159.03", True)
    assert "  580.159.03  " in version_file(root).read_text()
    assert (root / "etc/sparkfleet-sim/profile").read_text().strip() == "booted"
    assert not (root / "var/lib/sparkfleet-sim/boot-pending.json").exists()
    # Nothing staged: a boot changes nothing.
    assert tool(root, "apply").returncode == 0 and "580.159.03" in version_file(root).read_text()


def test_a_kernel_that_breaks_the_module_then_one_that_loads_it_again(root):
    subprocess.run([sys.executable, str(BIN / "simspark-profile"), "gb10"], check=True, capture_output=True,
                   env={**os.environ, "SPARKFLEET_SIM_ROOT": str(root)})
    assert tool(root, "stage", "module", "broken").returncode == 0
    assert tool(root, "apply").returncode == 0
    assert not version_file(root).exists()
    assert '"driver_loaded": false' in (root / "usr/lib/sparkfleet-sim/profiles/booted.json").read_text()
    assert tool(root, "stage", "module", "ok").returncode == 0
    assert tool(root, "apply").returncode == 0
    assert "  580.142  " in version_file(root).read_text()


def test_bad_stage_requests_are_refused(root):
    assert tool(root, "stage", "module", "maybe").returncode == 2
    assert tool(root, "stage", "firmware", "1").returncode == 2
    assert tool(root).returncode == 2


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed")
def test_the_packages_have_the_real_names_and_their_postinst_asks_for_a_reboot(tmp_path):
    out = tmp_path / "debs"
    subprocess.run(["sh", str(BUILD), str(out), "nvidia-driver-580-open=580.159.03-0ubuntu0.24.04.1",
                    "linux-image-nvidia-hwe-24.04=6.17.0-1008.8~24.04.1:broken", "plain-package=1.0"], check=True,
                   capture_output=True)
    debs = sorted(p.name for p in out.glob("*.deb"))
    assert [d.split("_")[0] for d in debs] == ["linux-image-nvidia-hwe-24.04", "nvidia-driver-580-open",
                                               "plain-package"]
    driver = next(out.glob("nvidia-driver-580-open_*.deb"))
    info = subprocess.run(["dpkg-deb", "--info", str(driver)], check=True, capture_output=True,
                          text=True).stdout
    assert "Version: 580.159.03-0ubuntu0.24.04.1" in info
    postinst = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(driver)], check=True, capture_output=True).stdout
    assert b"stage driver 580.159.03" in postinst and b"/var/run/reboot-required" in postinst
    kernel = next(out.glob("linux-image-*.deb"))
    assert b"stage module broken" in subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(kernel)], check=True,
                                                    capture_output=True).stdout
    plain = next(out.glob("plain-package_*.deb"))
    assert b"postinst" not in subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(plain)], check=True,
                                             capture_output=True).stdout


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed")
def test_a_transitional_driver_package_depends_on_another_branch_and_stages_nothing(tmp_path):
    out = tmp_path / "debs"
    subprocess.run(["sh", str(BUILD), str(out),
                    "nvidia-driver-580-open=580.200.01-0ubuntu0.24.04.1:transitional=nvidia-driver-590-open",
                    "nvidia-driver-590-open=590.48.01-0ubuntu0.24.04.1"], check=True, capture_output=True)
    transitional = next(out.glob("nvidia-driver-580-open_*.deb"))
    fields = subprocess.run(["dpkg-deb", "--field", str(transitional), "Version", "Depends"], check=True,
                            capture_output=True, text=True).stdout
    assert fields.splitlines() == ["Version: 580.200.01-0ubuntu0.24.04.1", "Depends: nvidia-driver-590-open"]
    control = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(transitional)], check=True,
                             capture_output=True).stdout
    assert b"postinst" not in control
    target = next(out.glob("nvidia-driver-590-open_*.deb"))
    assert b"stage driver 590.48.01" in subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(target)], check=True,
                                                       capture_output=True).stdout
