# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure parsers for what NVIDIA's tools and the kernel say about a GPU box.

Every function takes text (or already-parsed values) and returns plain data, so that the
gpu_facts module stays a thin shell that runs commands, and the parsing is tested against
real captures (tests/fixtures/gb10) and realistic outputs of other drivers and GPUs.
"""

from __future__ import annotations

import re

from ansible_collections.sparkfleet.serving.plugins.module_utils.versions import parse_version

# The fields gpu_facts asks nvidia-smi for, in this order.
QUERY_FIELDS = ("index", "name", "uuid", "driver_version", "compute_cap", "memory.total", "pci.bus_id")

# Values nvidia-smi prints when a field does not apply: "[N/A]" in csv on GB10 (no
# dedicated memory), "[Not Supported]" on some older drivers, "N/A" in places.
_NOT_AVAILABLE = {"[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", ""}

# What nvidia-smi says when it cannot answer -> the reason given to the user (first match wins).
SMI_FAILURES = (
    (
        "couldn't communicate with the nvidia driver",
        "NVIDIA driver not loaded (nvidia-smi could not communicate with the driver)",
    ),
    ("driver/library version mismatch", "driver/library version mismatch (driver upgraded without a reboot)"),
    ("no devices were found", "no NVIDIA GPU found (driver loaded, no device)"),
    ("failed to initialize nvml", "NVML failed to initialise: {first_line}"),
)

_HEADER = re.compile(r"Driver Version:\s*(?P<driver>\S+)\s+CUDA Version:\s*(?P<cuda>\S+)")
_NVCC_RELEASE = re.compile(r"release\s+(?P<release>\d+(?:\.\d+)*),\s*V(?P<full>\d+(?:\.\d+)*)")
_NVRM = re.compile(
    r"NVRM version:\s+NVIDIA UNIX\s+(?P<open>Open\s+)?(?:(?P<arch_before>\S+)\s+)?Kernel Module"
    r"(?:\s+for\s+(?P<arch_after>\S+))?\s+(?P<version>\d+(?:\.\d+)+)"
)
_MEMINFO_LINE = re.compile(r"^(?P<key>[A-Za-z0-9_()]+):\s+(?P<value>\d+)(?:\s+kB)?\s*$")
_CUDA_DIR = re.compile(r"/cuda-(?P<version>\d+(?:\.\d+)*)/bin/nvcc$")


def not_available(value: str | None) -> bool:
    """True for the placeholders nvidia-smi prints instead of a value."""
    return value is None or value.strip() in _NOT_AVAILABLE


def parse_smi_header(text: str) -> dict:
    """Driver version and the CUDA version the driver supports, from the `nvidia-smi` table.

    The "CUDA Version" in the header is the newest CUDA runtime this driver can run, not
    the installed toolkit (nvcc); vLLM images need it to be at least their CUDA major.minor.
    """
    match = _HEADER.search(text or "")
    if not match:
        return {"driver_version": None, "cuda_version": None}
    cuda = match.group("cuda")
    return {
        "driver_version": match.group("driver"),
        "cuda_version": None if not_available(cuda) else cuda,
    }


def table_reports_memory_not_supported(text: str) -> bool:
    """True when the table's Memory-Usage cell reads "Not Supported" (GB10 unified memory)."""
    return any("| Not Supported" in line for line in (text or "").splitlines())


def _number(value: str) -> int | None:
    value = value.strip()
    if not_available(value):
        return None
    # nounits is requested, but tolerate "81559 MiB" in case a caller forgets it.
    match = re.match(r"^(\d+)", value)
    return int(match.group(1)) if match else None


def parse_smi_query(text: str, fields: tuple[str, ...] = QUERY_FIELDS) -> list[dict]:
    """Rows of `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`.

    Returns one dict per GPU with the keys index, name, uuid, driver_version,
    compute_cap, memory_total_mib (None when "[N/A]", as on GB10) and pci_bus_id.
    Raises ValueError naming the line when a row has the wrong number of columns.
    """
    rows = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(fields):
            raise ValueError(f"nvidia-smi returned {len(cells)} columns where {len(fields)} were asked for: {line!r}")
        raw = dict(zip(fields, cells))  # noqa: B905 -- lengths checked above; strict= needs Python 3.10
        rows.append(
            {
                "index": _number(raw.get("index", "")),
                "name": raw.get("name"),
                "uuid": None if not_available(raw.get("uuid")) else raw.get("uuid"),
                "driver_version": None if not_available(raw.get("driver_version")) else raw.get("driver_version"),
                "compute_cap": None if not_available(raw.get("compute_cap")) else raw.get("compute_cap"),
                "memory_total_mib": _number(raw.get("memory.total", "")),
                "pci_bus_id": None if not_available(raw.get("pci.bus_id")) else raw.get("pci.bus_id"),
            }
        )
    return rows


def classify_smi_failure(rc: int | None, stdout: str, stderr: str) -> str:
    """Why nvidia-smi did not answer, in words a user can act on."""
    if rc is None:
        return "nvidia-smi not found (NVIDIA driver utilities not installed)"
    if rc == 124:
        return "nvidia-smi timed out (the driver may be hung)"
    text = f"{stdout}\n{stderr}"
    lowered = text.lower()
    for needle, reason in SMI_FAILURES:
        if needle in lowered:
            return reason.format(first_line=first_line(text))
    return f"nvidia-smi failed (exit code {rc}): {first_line(text)}"


def first_line(text: str) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return "(no output)"


def parse_nvcc_version(text: str) -> dict:
    """Toolkit version from `nvcc --version`: release (13.0) and full version (13.0.88)."""
    match = _NVCC_RELEASE.search(text or "")
    if not match:
        return {"version": None, "full_version": None}
    return {"version": match.group("release"), "full_version": match.group("full")}


def cuda_dir_version(path: str) -> str | None:
    """The version in a toolkit path such as /usr/local/cuda-13.0/bin/nvcc."""
    match = _CUDA_DIR.search(path)
    return match.group("version") if match else None


def choose_toolkit(candidates: list[dict]) -> dict | None:
    """The newest toolkit among {path, version} candidates (None when there is none).

    Candidates without a parsable version are skipped; on a tie the earlier candidate
    wins, so put the one on PATH first.
    """
    best: dict | None = None
    for candidate in candidates:
        try:
            key = parse_version(candidate.get("version") or "")
        except ValueError:
            continue
        if best is None or key > parse_version(best["version"]):
            best = candidate
    return best


def parse_driver_version_file(text: str) -> dict:
    """Version, flavour (open / proprietary) and architecture from /proc/driver/nvidia/version.

    Open:        "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.142  Release Build ..."
    Proprietary: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.82.07  Wed Aug 27 ..."
    """
    match = _NVRM.search(text or "")
    if not match:
        return {"version": None, "flavour": None, "architecture": None}
    return {
        "version": match.group("version"),
        "flavour": "open" if match.group("open") else "proprietary",
        "architecture": match.group("arch_after") or match.group("arch_before"),
    }


def parse_meminfo(text: str) -> dict:
    """MemTotal / MemAvailable / MemFree in bytes, and used = MemTotal - MemAvailable.

    On GB10 this is the only trustworthy memory signal: CPU and GPU share it, and
    nvidia-smi reports no memory at all.
    """
    values: dict[str, int] = {}
    for line in (text or "").splitlines():
        match = _MEMINFO_LINE.match(line.strip())
        if match:
            values[match.group("key")] = int(match.group("value")) * 1024
    total = values.get("MemTotal")
    available = values.get("MemAvailable")
    return {
        "total_bytes": total,
        "available_bytes": available,
        "free_bytes": values.get("MemFree"),
        "used_bytes": total - available if total is not None and available is not None else None,
    }


def is_unified_memory(gpus: list[dict], table_text: str = "") -> bool:
    """True when the GPUs have no memory of their own (GB10: memory "[N/A]" / "Not Supported")."""
    if not gpus:
        return False
    if all(gpu.get("memory_total_mib") is None for gpu in gpus):
        return True
    return table_reports_memory_not_supported(table_text)


def summarize_container_toolkit(binaries: dict[str, str | None], dpkg_status: str | None) -> dict:
    """Whether the NVIDIA Container Toolkit is installed, and the evidence for it.

    binaries maps a tool name (nvidia-container-runtime, nvidia-ctk, ...) to its path or
    None; dpkg_status is `dpkg-query -W -f '${Status} ${Version}' nvidia-container-toolkit`
    output, or None when dpkg has no such package.
    """
    evidence = [f"{name} at {path}" for name, path in sorted(binaries.items()) if path]
    version = None
    if dpkg_status and dpkg_status.startswith("install ok installed"):
        version = dpkg_status.split()[-1] if len(dpkg_status.split()) > 3 else None
        evidence.append(f"dpkg package nvidia-container-toolkit {version or ''}".strip())
    return {"present": bool(evidence), "evidence": evidence, "package_version": version}


def build_facts(  # noqa: PLR0913 -- one argument per independent source of facts
    *,
    smi_rc: int | None,
    smi_query: str,
    smi_table: str,
    smi_stderr: str = "",
    toolkit: dict | None,
    toolkit_candidates: list[dict] | None = None,
    driver_version_text: str | None,
    driver_version_path: str = "/proc/driver/nvidia/version",
    meminfo_text: str | None,
    meminfo_path: str = "/proc/meminfo",
    architecture: str,
    container_toolkit: dict,
    nvidia_smi_path: str | None = None,
) -> dict:
    """Assemble the documented `sparkfleet_gpu` facts from each source's raw output."""
    kernel = parse_driver_version_file(driver_version_text) if driver_version_text else parse_driver_version_file("")
    kernel = {**kernel, "path": driver_version_path, "readable": driver_version_text is not None}
    memory = parse_meminfo(meminfo_text) if meminfo_text is not None else parse_meminfo("")
    memory["source"] = meminfo_path if meminfo_text is not None else None

    gpus: list[dict] = []
    reason = ""
    header = {"driver_version": None, "cuda_version": None}
    if smi_rc == 0:
        try:
            gpus = parse_smi_query(smi_query)
        except ValueError as exc:
            reason = f"could not read nvidia-smi output: {exc}"
        header = parse_smi_header(smi_table)
        if not gpus and not reason:
            reason = "no NVIDIA GPU found (nvidia-smi listed none)"
    else:
        reason = classify_smi_failure(smi_rc, smi_query or smi_table, smi_stderr)
        if smi_rc is not None and kernel["readable"] is False and "not loaded" not in reason:
            reason += "; the kernel module's version file is absent"

    driver = header["driver_version"] or (gpus[0]["driver_version"] if gpus else None)
    return {
        "present": bool(gpus) and not reason,
        "reason": reason,
        "count": len(gpus),
        "gpus": gpus,
        "names": sorted({gpu["name"] for gpu in gpus if gpu.get("name")}),
        "compute_caps": sorted({gpu["compute_cap"] for gpu in gpus if gpu.get("compute_cap")}),
        "driver_version": driver,
        "cuda_driver_version": header["cuda_version"],
        "toolkit": {
            "present": toolkit is not None,
            "version": toolkit["version"] if toolkit else None,
            "full_version": toolkit.get("full_version") if toolkit else None,
            "path": toolkit["path"] if toolkit else None,
            "candidates": [c["path"] for c in toolkit_candidates or []],
        },
        "kernel_module": kernel,
        "architecture": architecture,
        "unified_memory": is_unified_memory(gpus, smi_table),
        "memory": memory,
        "container_toolkit": container_toolkit,
        "nvidia_smi": nvidia_smi_path,
    }
