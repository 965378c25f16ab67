"""dk-bare: no engine at first (purged by prepare.yml); the role installs docker.io."""

from __future__ import annotations

import json

testinfra_hosts = ["dk-bare"]

MIRRORS = ["https://mirror.sparkfleet.test"]
IMAGE = "sparkfleet-sim/busybox:latest"


def test_distribution_package_installed(host):
    assert host.package("docker.io").is_installed
    assert host.file("/usr/sbin/dockerd").exists or host.file("/usr/bin/dockerd").exists


def test_docker_service_active_and_enabled(host):
    docker = host.service("docker")
    assert docker.is_running
    assert docker.is_enabled


def test_daemon_json_has_mirror_and_live_restore(host):
    config = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert config["registry-mirrors"] == MIRRORS
    assert config["live-restore"] is True


def test_running_engine_uses_the_settings(host):
    info = json.loads(host.check_output("docker info --format '{{json .}}'"))
    assert info["LiveRestoreEnabled"] is True
    assert info["RegistryConfig"]["Mirrors"] == [m + "/" for m in MIRRORS]


def test_engine_runs_a_container(host):
    # The purge emptied /var/lib/docker: the image is imported into the new engine here.
    host.check_output(f"simspark-import-busybox {IMAGE}")
    assert host.check_output(f"docker run --rm {IMAGE} echo installed-engine-runs") == "installed-engine-runs"
