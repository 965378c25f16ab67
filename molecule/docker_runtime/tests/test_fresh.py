"""dk-fresh: no toolkit at first; installed from the signed stand-in of NVIDIA's repository."""

from __future__ import annotations

import json

import pytest

testinfra_hosts = ["dk-fresh"]

PACKAGES = [
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_toolkit_installed_at_the_pinned_version(host, name):
    package = host.package(name)
    assert package.is_installed
    assert package.version == "1.18.0-1"


def test_pin_mattered_the_repository_offers_a_newer_version(host):
    policy = host.check_output("apt-cache policy nvidia-container-toolkit")
    assert "Installed: 1.18.0-1" in policy
    assert "Candidate: 1.18.1-1" in policy
    assert "http://127.0.0.1:8765/stable/deb/" in policy


def test_repository_is_signed_and_verified(host):
    source = host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.list")
    assert source.content_string.strip() == (
        "deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit.asc] http://127.0.0.1:8765/stable/deb/$(ARCH) /"
    )
    key = host.file("/etc/apt/keyrings/nvidia-container-toolkit.asc")
    assert key.mode == 0o644
    assert key.content_string.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    # apt keeps a repository's InRelease only after its signature checked out.
    assert host.run("ls /var/lib/apt/lists/127.0.0.1*InRelease").rc == 0


def test_daemon_json_created_with_runtime_as_default(host):
    config = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert config == {
        "live-restore": True,
        "log-opts": {"max-size": "100m", "max-file": "3"},
        "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
        "default-runtime": "nvidia",
    }


def test_plain_docker_run_uses_the_nvidia_runtime(host):
    info = json.loads(host.check_output("docker info --format '{{json .}}'"))
    assert info["DefaultRuntime"] == "nvidia"
    assert info["RegistryConfig"]["Mirrors"] == []
    name = "dk-verify-default-runtime"
    host.run(f"docker rm -f {name}")
    out = host.check_output(f"docker run --name {name} sparkfleet-sim/busybox:latest echo default-runtime")
    runtime = host.check_output(f"docker inspect --format '{{{{.HostConfig.Runtime}}}}' {name}")
    host.run(f"docker rm -f {name}")
    assert (out, runtime) == ("default-runtime", "nvidia")
