"""Verify the simulated Spark itself: systemd, its own Docker engine, the GPU stand-ins."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "gb10"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_systemd_is_pid1_and_running(host):
    assert host.check_output("cat /proc/1/comm") == "systemd"
    assert host.run("systemctl is-system-running").stdout.strip() == "running"


def test_box_runs_its_own_docker_engine(host):
    docker = host.service("docker")
    assert docker.is_running
    assert docker.is_enabled
    assert host.check_output("docker info --format '{{.Driver}}'") == "overlay2"


def test_inner_docker_runs_a_container_and_publishes_a_port(host):
    host.run("docker rm -f verify-web")
    started = host.run("docker run -d --name verify-web -p 18080:80 sparkfleet-sim/busybox httpd -f -p 80 -h /www")
    try:
        assert started.rc == 0, started.stderr
        page = host.run("curl -fsS --retry 20 --retry-connrefused --retry-delay 0 --max-time 2 http://127.0.0.1:18080/")
        assert page.rc == 0, page.stderr
        assert "inner Docker engine" in page.stdout
    finally:
        host.run("docker rm -f verify-web")


def test_nvidia_smi_list_is_the_gb10_capture(host):
    assert host.check_output("nvidia-smi -L") + "\n" == fixture("nvidia-smi-L.txt")


def test_nvidia_smi_csv_reports_gb10_driver_580_142(host):
    out = host.check_output("nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader")
    assert out == "NVIDIA GB10, 580.142, 12.1"
    # Same wording as the capture, only the driver differs (the capture box had 580.159.03).
    capture = fixture("nvidia-smi-query-name-driver-computecap.noheader.csv")
    assert capture.replace("580.159.03", "580.142") == out + "\n"


def test_nvidia_smi_memory_reads_not_available_like_gb10(host):
    out = host.check_output("nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv")
    assert out + "\n" == fixture("nvidia-smi-query-name-driver-memory.csv").replace("580.95.05", "580.142")


def test_nvidia_smi_table_is_the_capture_with_this_driver(host):
    got = host.check_output("nvidia-smi").splitlines()
    want = fixture("nvidia-smi.txt").splitlines()
    assert len(got) == len(want)
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}", got[0].strip())
    assert got[2] == ("| NVIDIA-SMI 580.142                Driver Version: 580.142        CUDA Version: 13.0     |")
    assert got[1:2] + got[3:] == want[1:2] + want[3:]


def test_nvcc_lives_under_usr_local_cuda_and_not_on_path(host):
    assert host.run("command -v nvcc").rc != 0
    assert host.check_output("/usr/local/cuda-13.0/bin/nvcc --version") + "\n" == fixture("nvcc-version.txt")


@pytest.mark.parametrize(
    ("profile", "rc", "expect"),
    [
        ("old-driver", 0, "NVIDIA GB10, 535.247.01, 12.1"),
        ("h100", 0, "NVIDIA H100 80GB HBM3, 580.82.07, 9.0"),
        ("no-gpu", 9, "couldn't communicate with the NVIDIA driver"),
    ],
)
def test_switching_the_profile_changes_what_the_box_reports(host, profile, rc, expect):
    try:
        host.check_output(f"simspark-profile {profile}")
        got = host.run("nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader")
        assert got.rc == rc
        assert expect in got.stdout
    finally:
        host.check_output("simspark-profile gb10")
    assert "580.142" in host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader")
