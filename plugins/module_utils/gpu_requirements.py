# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Check gpu_facts against requirements; report every unmet one with found / required / fix."""

from __future__ import annotations

from ansible_collections.sparkfleet.serving.plugins.module_utils.inputs import (
    InputError,
    check_gpu_facts,
    check_range,
    check_version_option,
)
from ansible_collections.sparkfleet.serving.plugins.module_utils.versions import parse_version, version_at_least

# The options of the gpu_requirements module and action (plugins/modules/gpu_requirements.py documents them).
ARGUMENT_SPEC = {
    "facts": {"type": "dict", "required": True},
    "min_driver_version": {"type": "str"},
    "min_cuda_version": {"type": "str"},
    "min_toolkit_version": {"type": "str"},
    "expected_gpu_names": {"type": "list", "elements": "str", "default": []},
    "expected_compute_capabilities": {"type": "list", "elements": "str", "default": []},
    "min_gpu_count": {"type": "int", "default": 1},
    "expected_architectures": {"type": "list", "elements": "str", "default": []},
    "allowed_architectures": {"type": "list", "elements": "str", "default": []},
    "require_container_toolkit": {"type": "bool", "default": False},
    "report_warnings": {"type": "bool", "default": True},
    "fail_on_error": {"type": "bool", "default": True},
}

DRIVER_FIX = (
    "upgrade the NVIDIA driver (DGX OS: `sudo apt update && sudo apt full-upgrade`; elsewhere install "
    "the nvidia-driver-{branch}-open package), then reboot"
)

NO_DRIVER_FIX = "make the driver answer first (see the GPU error); the driver that then answers must be {required}"


def problem(requirement: str, found: str, required: str, fix: str) -> dict:
    """One unmet requirement, with the sentence a user reads."""
    return {
        "requirement": requirement,
        "found": found,
        "required": required,
        "fix": fix,
        "message": f"{requirement}: found {found}, required {required}. Fix: {fix}",
    }


def _branch(version: str) -> str:
    return version.split(".", maxsplit=1)[0]


def _at_least(found: str | None, required: str) -> bool | None:
    """True / False, or None when found is missing or not a version."""
    if not found:
        return None
    try:
        parse_version(found)
    except ValueError:
        return None
    return version_at_least(found, required)


def absent_gpu_fix(reason: str) -> str:
    lowered = reason.lower()
    if "not loaded" in lowered:
        return (
            "load the NVIDIA kernel module (`sudo modprobe nvidia`; if that fails reinstall the driver package) "
            "and reboot"
        )
    if "not found" in lowered and "nvidia-smi" in lowered:
        return "install the NVIDIA driver and its utilities (DGX OS ships them; Ubuntu: nvidia-driver-580-open)"
    if "mismatch" in lowered:
        return "reboot so that the loaded kernel module matches the upgraded driver libraries"
    if "timed out" in lowered:
        return "check `dmesg` for Xid errors; a reboot usually clears a hung driver"
    return "check that the GPU is seated and visible (`lspci | grep -i nvidia`, `dmesg | grep -i nvrm`)"


def check_driver(facts: dict, required: str) -> list[dict]:
    found = facts.get("driver_version")
    source = "nvidia-smi"
    if not found and (facts.get("kernel_module") or {}).get("version"):
        found, source = facts["kernel_module"]["version"], "kernel module file"
    ok = _at_least(found, required)
    if ok:
        return []
    shown = f"{found} ({source})" if found else f"none ({facts.get('reason') or 'no driver answered'})"
    if found and ok is None:
        shown = f"{found!r} (not a version number)"
    fix = DRIVER_FIX.format(branch=_branch(required)) if found else NO_DRIVER_FIX.format(required=f">= {required}")
    return [problem("NVIDIA driver", shown, f">= {required}", fix)]


def check_cuda(facts: dict, required: str, min_driver: str | None) -> list[dict]:
    found = facts.get("cuda_driver_version")
    if _at_least(found, required):
        return []
    shown = found or f"none ({facts.get('reason') or 'nvidia-smi reported no CUDA version'})"
    branch = _branch(min_driver) if min_driver else "newer"
    fix = "the CUDA version a box can run comes with its driver (nvidia-smi header), not with the toolkit: " + (
        DRIVER_FIX.format(branch=branch) if found else NO_DRIVER_FIX.format(required=f"the {branch} branch or newer")
    )
    return [problem("CUDA version supported by the driver", shown, f">= {required}", fix)]


def check_toolkit(facts: dict, required: str) -> list[dict]:
    toolkit = facts.get("toolkit") or {}
    found = toolkit.get("version")
    if _at_least(found, required):
        return []
    shown = f"{found} ({toolkit.get('path')})" if found else "none (no nvcc on PATH or under /usr/local/cuda*/bin)"
    parts = required.split(".")
    package = f"cuda-toolkit-{parts[0]}-{parts[1] if len(parts) > 1 else '0'}"
    fix = f"install the CUDA toolkit (`sudo apt install {package}`)"
    return [problem("CUDA toolkit (nvcc)", shown, f">= {required}", fix)]


def check_gpus(facts: dict, names: list[str], caps: list[str], min_count: int) -> list[dict]:
    problems = []
    gpus = facts.get("gpus") or []
    if len(gpus) < min_count:
        problems.append(
            problem("GPU count", str(len(gpus)), f">= {min_count}", "check `nvidia-smi -L`; every GPU must be visible")
        )
    if names:
        wrong = [
            g.get("name") or "(no name)"
            for g in gpus
            if not any(n.lower() in (g.get("name") or "").lower() for n in names)
        ]
        if wrong:
            problems.append(
                problem(
                    "GPU model",
                    ", ".join(sorted(set(wrong))),
                    "one of " + ", ".join(names),
                    "run on the GPU this configuration was made for, or add this model to the expected GPU names",
                )
            )
    if caps:
        wrong_caps = sorted({str(g.get("compute_cap")) for g in gpus if str(g.get("compute_cap")) not in caps})
        if wrong_caps:
            problems.append(
                problem(
                    "GPU compute capability",
                    ", ".join(wrong_caps),
                    "one of " + ", ".join(caps),
                    "use an image and model built for this compute capability, or add it to the expected capabilities",
                )
            )
    return problems


def check_architecture(facts: dict, expected: list[str], allowed: list[str]) -> tuple[list[dict], list[str]]:
    arch = facts.get("architecture") or "unknown"
    if not expected or arch in expected:
        return [], []
    if arch in allowed:
        return [], [
            f"architecture {arch} is allowed but not the expected {' or '.join(expected)}: "
            f"images and defaults are tuned for {' / '.join(expected)} (e.g. the vLLM image tag must match {arch})"
        ]
    return [
        problem(
            "CPU architecture",
            arch,
            " or ".join(expected) + (f" (or, with a warning, {' or '.join(allowed)})" if allowed else ""),
            "run on a DGX Spark (aarch64) or add this architecture to the allowed list with an image built for it",
        )
    ], []


def check_requirements(facts: dict, requirements: dict) -> dict:
    """Every unmet requirement at once, plus warnings; `passed` when there is no problem.

    requirements keys (all optional): min_driver_version, min_cuda_version,
    min_toolkit_version, expected_gpu_names, expected_compute_capabilities, min_gpu_count,
    expected_architectures, allowed_architectures, require_container_toolkit.
    """
    problems: list[dict] = []
    warnings: list[str] = []
    if not facts.get("present"):
        reason = facts.get("reason") or "unknown reason"
        problems.append(
            problem("Usable NVIDIA GPU", f"none ({reason})", "a GPU answering nvidia-smi", absent_gpu_fix(reason))
        )
    min_driver = requirements.get("min_driver_version")
    if min_driver:
        problems += check_driver(facts, min_driver)
    if requirements.get("min_cuda_version"):
        problems += check_cuda(facts, requirements["min_cuda_version"], min_driver)
    if requirements.get("min_toolkit_version"):
        problems += check_toolkit(facts, requirements["min_toolkit_version"])
    if facts.get("present"):
        problems += check_gpus(
            facts,
            list(requirements.get("expected_gpu_names") or []),
            [str(c) for c in requirements.get("expected_compute_capabilities") or []],
            # An explicit 0 is "any number of GPUs", not the default of 1.
            1 if requirements.get("min_gpu_count") is None else int(requirements["min_gpu_count"]),
        )
    arch_problems, arch_warnings = check_architecture(
        facts,
        list(requirements.get("expected_architectures") or []),
        list(requirements.get("allowed_architectures") or []),
    )
    problems += arch_problems
    warnings += arch_warnings
    container = facts.get("container_toolkit") or {}
    if not container.get("present"):
        sentence = (
            "NVIDIA Container Toolkit: not found (no nvidia-container-runtime / nvidia-ctk on PATH, no "
            "nvidia-container-toolkit package)"
        )
        fix = (
            "install nvidia-container-toolkit (the sparkfleet.serving.nvidia_runtime role does) "
            "so Docker can use the GPU"
        )
        if requirements.get("require_container_toolkit"):
            problems.append(problem("NVIDIA Container Toolkit", "not installed", "installed", fix))
        else:
            warnings.append(f"{sentence}; {fix}")
    return {"passed": not problems, "problems": problems, "warnings": warnings}


def failure_message(problems: list[dict]) -> str:
    lines = [f"{len(problems)} GPU requirement(s) not met:"]
    lines += [f"  - {p['message']}" for p in problems]
    return "\n".join(lines)


REQUIREMENT_OPTIONS = (
    "min_driver_version",
    "min_cuda_version",
    "min_toolkit_version",
    "expected_gpu_names",
    "expected_compute_capabilities",
    "min_gpu_count",
    "expected_architectures",
    "allowed_architectures",
    "require_container_toolkit",
)


def evaluate(params: dict) -> tuple[dict, str | None, list[str]]:
    """Validated options -> (the result, the failure message or None, the warnings to report)."""
    requirements = {name: params[name] for name in REQUIREMENT_OPTIONS}
    try:
        check_gpu_facts(params["facts"], "facts")
        for option in ("min_driver_version", "min_cuda_version", "min_toolkit_version"):
            check_version_option(requirements[option], option)
        check_range(requirements["min_gpu_count"], "min_gpu_count", low=0)
    except InputError as exc:
        return {"changed": False}, str(exc), []
    result = check_requirements(params["facts"], requirements)
    output = {
        "changed": False,
        "passed": result["passed"],
        "problems": result["problems"],
        "warnings_found": result["warnings"],
    }
    error = failure_message(result["problems"]) if result["problems"] and params["fail_on_error"] else None
    return output, error, result["warnings"] if params["report_warnings"] else []
