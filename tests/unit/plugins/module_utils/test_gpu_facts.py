# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.sparkfleet.serving.plugins.module_utils.gpu_facts import (
    build_facts,
    choose_toolkit,
    classify_smi_failure,
    cuda_dir_version,
    is_unified_memory,
    parse_driver_version_file,
    parse_meminfo,
    parse_nvcc_version,
    parse_smi_header,
    parse_smi_query,
    summarize_container_toolkit,
    table_reports_memory_not_supported,
)

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
GB10 = FIXTURES / "gb10"
VARIANTS = FIXTURES / "variants"
NO_CONTAINER_TOOLKIT = {"present": False, "evidence": [], "package_version": None}


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# --- the real GB10 captures -------------------------------------------------------------


def test_gb10_table_header_gives_driver_and_cuda():
    assert parse_smi_header(read(GB10 / "nvidia-smi.txt")) == {"driver_version": "580.95.05", "cuda_version": "13.0"}


def test_gb10_table_memory_reads_not_supported():
    assert table_reports_memory_not_supported(read(GB10 / "nvidia-smi.txt"))


def test_gb10_noheader_csv_capture():
    rows = parse_smi_query(
        read(GB10 / "nvidia-smi-query-name-driver-computecap.noheader.csv"),
        ("name", "driver_version", "compute_cap"),
    )
    assert [(r["name"], r["driver_version"], r["compute_cap"]) for r in rows] == [("NVIDIA GB10", "580.159.03", "12.1")]


def test_gb10_csv_with_header_capture_memory_is_not_available():
    lines = read(GB10 / "nvidia-smi-query-name-driver-memory.csv").splitlines()
    assert lines[0].startswith("name, driver_version")  # the header row is the caller's to drop
    rows = parse_smi_query("\n".join(lines[1:]), ("name", "driver_version", "memory.total"))
    assert rows[0]["memory_total_mib"] is None
    assert rows[0]["driver_version"] == "580.95.05"
    assert is_unified_memory(rows)


def test_gb10_list_capture_names_the_gpu():
    # -L is not parsed by gpu_facts (the csv carries the same), but its wording must match.
    assert read(GB10 / "nvidia-smi-L.txt").startswith("GPU 0: NVIDIA GB10 (UUID: GPU-")


def test_gb10_nvcc_capture():
    assert parse_nvcc_version(read(GB10 / "nvcc-version.txt")) == {"version": "13.0", "full_version": "13.0.88"}


def test_gb10_kernel_module_capture_is_open_aarch64_with_double_spaces():
    assert parse_driver_version_file(read(GB10 / "proc-driver-nvidia-version.txt")) == {
        "version": "580.142",
        "flavour": "open",
        "architecture": "aarch64",
    }


# --- made-up variants of other GPUs and drivers -------------------------------------------


VARIANT_EXPECTED = {
    "h100-x86_64-580": {
        "driver": "580.82.07", "cuda": "13.0", "names": ["NVIDIA H100 80GB HBM3"], "caps": ["9.0"],
        "count": 1, "memory": 81559, "flavour": "proprietary",
    },
    "a100-x86_64-535-cuda12.2": {
        "driver": "535.104.05", "cuda": "12.2", "names": ["NVIDIA A100 80GB PCIe"], "caps": ["8.0"],
        "count": 1, "memory": 81920, "flavour": "proprietary",
    },
    "l40s-x4-open-550": {
        "driver": "550.127.05", "cuda": "12.4", "names": ["NVIDIA L40S"], "caps": ["8.9"],
        "count": 4, "memory": 46068, "flavour": "open",
    },
}  # fmt: skip


def test_every_variant_directory_is_covered():
    assert sorted(p.name for p in VARIANTS.iterdir() if p.is_dir()) == sorted(VARIANT_EXPECTED)


@pytest.mark.parametrize("variant", sorted(VARIANT_EXPECTED))
def test_variant_parses(variant):
    want = VARIANT_EXPECTED[variant]
    here = VARIANTS / variant
    nvcc = here / "nvcc-version.txt"
    toolkit = None
    if nvcc.exists():
        toolkit = {"path": "/usr/local/cuda/bin/nvcc", **parse_nvcc_version(read(nvcc))}
    facts = build_facts(
        smi_rc=0,
        smi_query=read(here / "nvidia-smi-query.csv"),
        smi_table=read(here / "nvidia-smi.txt"),
        toolkit=toolkit,
        driver_version_text=read(here / "proc-driver-nvidia-version.txt"),
        meminfo_text=read(VARIANTS / "meminfo-gb10-idle.txt"),
        architecture="x86_64",
        container_toolkit=NO_CONTAINER_TOOLKIT,
    )
    assert facts["present"] is True
    assert facts["reason"] == ""
    assert facts["driver_version"] == want["driver"]
    assert facts["cuda_driver_version"] == want["cuda"]
    assert facts["names"] == want["names"]
    assert facts["compute_caps"] == want["caps"]
    assert facts["count"] == want["count"]
    assert [gpu["index"] for gpu in facts["gpus"]] == list(range(want["count"]))
    assert {gpu["memory_total_mib"] for gpu in facts["gpus"]} == {want["memory"]}
    assert facts["unified_memory"] is False
    assert facts["kernel_module"]["flavour"] == want["flavour"]
    assert facts["kernel_module"]["architecture"] == "x86_64"
    assert facts["kernel_module"]["version"] == want["driver"]
    assert facts["toolkit"]["present"] is nvcc.exists()


def test_multi_gpu_rows_keep_their_bus_ids_and_uuids():
    rows = parse_smi_query(read(VARIANTS / "l40s-x4-open-550" / "nvidia-smi-query.csv"))
    assert [r["pci_bus_id"] for r in rows] == [
        "00000000:17:00.0",
        "00000000:3D:00.0",
        "00000000:63:00.0",
        "00000000:99:00.0",
    ]
    assert len({r["uuid"] for r in rows}) == 4


def test_a100_535_nvcc_is_cuda_12_2():
    assert (
        parse_nvcc_version(read(VARIANTS / "a100-x86_64-535-cuda12.2" / "nvcc-version.txt"))["full_version"]
        == "12.2.140"
    )


@pytest.mark.parametrize(
    ("rc", "fixture", "reason"),
    [
        (9, "nvidia-smi-driver-not-loaded.txt", "NVIDIA driver not loaded"),
        (18, "nvidia-smi-version-mismatch.txt", "driver/library version mismatch"),
        (6, "nvidia-smi-no-devices.txt", "no NVIDIA GPU found"),
    ],
)
def test_failures_are_classified(rc, fixture, reason):
    assert classify_smi_failure(rc, read(VARIANTS / fixture), "").startswith(reason)


def test_missing_tool_timeout_and_unknown_failures():
    assert classify_smi_failure(None, "", "").startswith("nvidia-smi not found")
    assert classify_smi_failure(124, "", "").startswith("nvidia-smi timed out")
    assert classify_smi_failure(3, "", "Segmentation fault\n") == "nvidia-smi failed (exit code 3): Segmentation fault"
    assert "NVML failed" in classify_smi_failure(255, "Failed to initialize NVML: Unknown Error\n", "")


def test_driver_not_loaded_gives_present_false_with_reason_and_keeps_other_facts():
    facts = build_facts(
        smi_rc=9,
        smi_query=read(VARIANTS / "nvidia-smi-driver-not-loaded.txt"),
        smi_table="",
        toolkit={"path": "/usr/local/cuda-13.0/bin/nvcc", "version": "13.0", "full_version": "13.0.88"},
        driver_version_text=None,
        meminfo_text=read(VARIANTS / "meminfo-gb10-idle.txt"),
        architecture="aarch64",
        container_toolkit=NO_CONTAINER_TOOLKIT,
    )
    assert facts["present"] is False
    assert facts["reason"].startswith("NVIDIA driver not loaded")
    assert (facts["count"], facts["gpus"], facts["driver_version"], facts["cuda_driver_version"]) == (0, [], None, None)
    assert facts["kernel_module"]["readable"] is False
    assert facts["toolkit"]["version"] == "13.0"
    assert facts["memory"]["total_bytes"] == 127601248 * 1024
    assert facts["unified_memory"] is False  # unknown without a GPU: not claimed


def test_no_nvidia_smi_at_all():
    facts = build_facts(
        smi_rc=None,
        smi_query="",
        smi_table="",
        toolkit=None,
        driver_version_text=None,
        meminfo_text=None,
        architecture="x86_64",
        container_toolkit=NO_CONTAINER_TOOLKIT,
    )
    assert facts["present"] is False
    assert facts["reason"].startswith("nvidia-smi not found")
    assert facts["memory"]["source"] is None
    assert facts["toolkit"] == {"present": False, "version": None, "full_version": None, "path": None, "candidates": []}


def test_rc0_but_no_rows_and_garbled_rows_are_not_present():
    empty = build_facts(
        smi_rc=0,
        smi_query="\n",
        smi_table="",
        toolkit=None,
        driver_version_text=None,
        meminfo_text=None,
        architecture="x86_64",
        container_toolkit=NO_CONTAINER_TOOLKIT,
    )
    assert (empty["present"], empty["reason"]) == (False, "no NVIDIA GPU found (nvidia-smi listed none)")
    garbled = build_facts(
        smi_rc=0,
        smi_query="0, NVIDIA GB10\n",
        smi_table="",
        toolkit=None,
        driver_version_text=None,
        meminfo_text=None,
        architecture="x86_64",
        container_toolkit=NO_CONTAINER_TOOLKIT,
    )
    assert garbled["present"] is False
    assert "2 columns where 7 were asked for" in garbled["reason"]


def test_gb10_full_query_as_the_module_asks_it():
    query = "0, NVIDIA GB10, GPU-00000000-0000-0000-0000-000000000000, 580.142, 12.1, [N/A], 0000000F:01:00.0\n"
    facts = build_facts(
        smi_rc=0,
        smi_query=query,
        smi_table=read(GB10 / "nvidia-smi.txt"),
        toolkit={"path": "/usr/local/cuda-13.0/bin/nvcc", **parse_nvcc_version(read(GB10 / "nvcc-version.txt"))},
        driver_version_text=read(GB10 / "proc-driver-nvidia-version.txt"),
        meminfo_text=read(VARIANTS / "meminfo-gb10-idle.txt"),
        architecture="aarch64",
        container_toolkit={"present": True, "evidence": ["nvidia-ctk at /usr/bin/nvidia-ctk"], "package_version": None},
    )
    assert facts["present"] is True
    assert facts["unified_memory"] is True
    assert facts["gpus"][0]["memory_total_mib"] is None
    # the table header wins over the csv for the driver (they agree on a real box)
    assert facts["driver_version"] == "580.95.05"
    assert facts["cuda_driver_version"] == "13.0"
    assert facts["toolkit"]["full_version"] == "13.0.88"
    assert facts["container_toolkit"]["present"] is True


def test_header_with_cuda_not_available_and_garbage():
    assert (
        parse_smi_header("| NVIDIA-SMI 580.142  Driver Version: 580.142  CUDA Version: N/A  |")["cuda_version"] is None
    )
    assert parse_smi_header("nothing here") == {"driver_version": None, "cuda_version": None}


def test_nvcc_garbage_and_dir_versions():
    assert parse_nvcc_version("bash: nvcc: command not found") == {"version": None, "full_version": None}
    assert cuda_dir_version("/usr/local/cuda-12.8/bin/nvcc") == "12.8"
    assert cuda_dir_version("/usr/local/cuda/bin/nvcc") is None


def test_choose_toolkit_picks_the_newest_numerically():
    candidates = [
        {"path": "/usr/bin/nvcc", "version": "12.2"},
        {"path": "/usr/local/cuda-12.10/bin/nvcc", "version": "12.10"},
        {"path": "/usr/local/cuda-12.9/bin/nvcc", "version": "12.9"},
        {"path": "/usr/local/cuda-x/bin/nvcc", "version": "x"},
    ]
    assert choose_toolkit(candidates)["path"] == "/usr/local/cuda-12.10/bin/nvcc"
    assert choose_toolkit([]) is None
    tie = [{"path": "/usr/bin/nvcc", "version": "13.0"}, {"path": "/usr/local/cuda-13.0/bin/nvcc", "version": "13.0"}]
    assert choose_toolkit(tie)["path"] == "/usr/bin/nvcc"


def test_kernel_module_variants():
    proprietary_arm = (
        "NVRM version: NVIDIA UNIX Kernel Module for aarch64  550.54.14  Release Build  "
        "(dvs-builder@U16)  Mon Feb 19 UTC 2024"
    )
    assert parse_driver_version_file(proprietary_arm) == {
        "version": "550.54.14",
        "flavour": "proprietary",
        "architecture": "aarch64",
    }
    assert parse_driver_version_file("") == {"version": None, "flavour": None, "architecture": None}


def test_meminfo_gb10_idle():
    mem = parse_meminfo(read(VARIANTS / "meminfo-gb10-idle.txt"))
    assert mem["total_bytes"] == 127601248 * 1024
    assert round(mem["total_bytes"] / 2**30, 1) == 121.7
    assert mem["used_bytes"] == (127601248 - 121045876) * 1024
    assert mem["free_bytes"] == 117934112 * 1024


def test_meminfo_without_memavailable_has_no_used():
    mem = parse_meminfo("MemTotal:        1000 kB\nMemFree:          500 kB\n")
    assert (mem["total_bytes"], mem["available_bytes"], mem["used_bytes"]) == (1024000, None, None)


def test_container_toolkit_evidence():
    assert (
        summarize_container_toolkit({"nvidia-ctk": None, "nvidia-container-runtime": None}, None)
        == NO_CONTAINER_TOOLKIT
    )
    found = summarize_container_toolkit({"nvidia-ctk": "/usr/bin/nvidia-ctk"}, "install ok installed 1.18.0-1")
    assert found == {
        "present": True,
        "evidence": ["nvidia-ctk at /usr/bin/nvidia-ctk", "dpkg package nvidia-container-toolkit 1.18.0-1"],
        "package_version": "1.18.0-1",
    }
    removed = summarize_container_toolkit({}, "deinstall ok config-files 1.17.0-1")
    assert removed["present"] is False
