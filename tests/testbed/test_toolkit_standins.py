"""The NVIDIA Container Toolkit stand-ins behave like the real tools where the roles use them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TOOLKIT = HERE / "standins" / "toolkit"
PROFILES = HERE / "standins" / "profiles"


@pytest.fixture
def sim_root(tmp_path):
    shutil.copytree(PROFILES, tmp_path / "usr/lib/sparkfleet-sim/profiles")
    (tmp_path / "etc/sparkfleet-sim").mkdir(parents=True)
    return tmp_path


def ctk(sim_root: Path, profile: str, *args: str) -> subprocess.CompletedProcess:
    (sim_root / "etc/sparkfleet-sim/profile").write_text(profile + "\n")
    env = {**os.environ, "SPARKFLEET_SIM_ROOT": str(sim_root)}
    command = [sys.executable, str(TOOLKIT / "nvidia-ctk"), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, check=False)


def test_cdi_generate_lists_the_profile_gpus(sim_root):
    out = sim_root / "etc/cdi/nvidia.yaml"
    result = ctk(sim_root, "gb10", "cdi", "generate", f"--output={out}")
    assert result.returncode == 0, result.stderr
    assert "Generated CDI spec" in result.stderr
    spec = out.read_text()
    assert "kind: nvidia.com/gpu" in spec
    assert 'name: "0"' in spec and "name: all" in spec
    listed = ctk(sim_root, "gb10", "cdi", "list")
    assert listed.stdout.split() == ["nvidia.com/gpu=0", "nvidia.com/gpu=all"]
    assert "Found 2 CDI devices" in listed.stderr


def test_cdi_generate_fails_like_the_real_tool_without_a_driver(sim_root):
    result = ctk(sim_root, "no-gpu", "cdi", "generate", "--output", str(sim_root / "x.yaml"))
    assert result.returncode == 1
    assert "failed to initialize NVML" in result.stderr
    assert not (sim_root / "x.yaml").exists()


def test_runtime_configure_merges_like_nvidia_ctk(sim_root):
    config = sim_root / "daemon.json"
    config.write_text('{"data-root": "/raid/docker", "runtimes": {"crun": {"path": "/usr/bin/crun"}}}')
    result = ctk(sim_root, "gb10", "runtime", "configure", "--runtime=docker", f"--config={config}", "--set-as-default")
    assert result.returncode == 0, result.stderr
    assert json.loads(config.read_text()) == {
        "data-root": "/raid/docker",
        "runtimes": {"crun": {"path": "/usr/bin/crun"}, "nvidia": {"args": [], "path": "nvidia-container-runtime"}},
        "default-runtime": "nvidia",
    }


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")
def test_packages_have_the_real_names_files_and_dependencies(tmp_path):
    subprocess.run([str(TOOLKIT / "build-toolkit-debs"), "1.17.8-1", str(tmp_path)], check=True, capture_output=True)
    debs = {p.name.split("_")[0]: p for p in tmp_path.glob("*.deb")}
    assert set(debs) == {
        "nvidia-container-toolkit",
        "nvidia-container-toolkit-base",
        "libnvidia-container-tools",
        "libnvidia-container1",
    }

    def field(name: str, key: str) -> str:
        command = ["dpkg-deb", "-f", str(debs[name]), key]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()

    def files(name: str) -> str:
        return subprocess.run(["dpkg-deb", "-c", str(debs[name])], capture_output=True, text=True, check=True).stdout

    assert "nvidia-container-toolkit-base (= 1.17.8-1)" in field("nvidia-container-toolkit", "Depends")
    assert "./usr/bin/nvidia-container-runtime-hook" in files("nvidia-container-toolkit")
    assert "./usr/bin/nvidia-ctk" in files("nvidia-container-toolkit-base")
    assert "./usr/bin/nvidia-container-runtime" in files("nvidia-container-toolkit-base")
    ctk_text = subprocess.run(
        f"dpkg-deb --fsys-tarfile {debs['nvidia-container-toolkit-base']} | tar -xO ./usr/bin/nvidia-ctk",
        shell=True,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert ctk_text.startswith("#!/usr/bin/python3\n")
    assert 'VERSION = "1.17.8"' in ctk_text
