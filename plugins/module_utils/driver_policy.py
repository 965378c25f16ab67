# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The NVIDIA driver policy a box must meet before maintenance changes it.

Reads what the box has (the loaded kernel module, dpkg's database, traces of NVIDIA's .run installer)
and what a simulated apt upgrade would change, then judges both against a policy: one pinned driver
branch, the open kernel modules, no .run driver, and an image's CUDA version the driver can run.
Parsers take text and return plain data; the driver_policy module only reads files and runs apt-get.
"""

from __future__ import annotations

import os
import re

from ansible_collections.sparkfleet.serving.plugins.module_utils.cuda_requirement import driver_runs
from ansible_collections.sparkfleet.serving.plugins.module_utils.gpu_facts import parse_driver_version_file
from ansible_collections.sparkfleet.serving.plugins.module_utils.gpu_requirements import problem
from ansible_collections.sparkfleet.serving.plugins.module_utils.inputs import InputError, check_version_option
from ansible_collections.sparkfleet.serving.plugins.module_utils.versions import compare_versions, parse_version

# The options of the driver_policy module (plugins/modules/driver_policy.py documents them).
ARGUMENT_SPEC = {
    "branch": {"type": "str", "default": "580"},
    "require_open": {"type": "bool", "default": True},
    "refuse_run_installer": {"type": "bool", "default": True},
    "require_hold": {"type": "bool", "default": False},
    "image_cuda_version": {"type": "str"},
    "upgrade": {"type": "str", "default": "dist-upgrade", "choices": ["none", "upgrade", "dist-upgrade"]},
    "upgrade_output": {"type": "str"},
    "driver_version_file": {"type": "path", "default": "/proc/driver/nvidia/version"},
    "dpkg_status_file": {"type": "path", "default": "/var/lib/dpkg/status"},
    "run_uninstaller_path": {"type": "path", "default": "/usr/bin/nvidia-uninstall"},
    "run_installer_log_path": {"type": "path", "default": "/var/log/nvidia-installer.log"},
    "report_warnings": {"type": "bool", "default": True},
    "fail_on_error": {"type": "bool", "default": True},
}

# The newest CUDA each driver branch runs: Table 3, "CUDA Toolkit and Corresponding Driver Versions", of
# NVIDIA's CUDA Toolkit release notes gives the oldest Linux driver of each CUDA release (13.0 GA >= 580.65.06,
# 13.1 GA >= 590.44.01, 13.2 GA >= 595.45.04, ...), so a branch reaches the CUDA released with it and no
# newer one. That is also the "CUDA Version" nvidia-smi prints (580.95.05 prints 13.0:
# tests/fixtures/gb10/nvidia-smi.txt). A branch left out is unknown here: the check then warns, never refuses.
_NOTES = "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html"
BRANCH_CUDA = {
    "595": ("13.2", _NOTES),
    "590": ("13.1", _NOTES),
    "580": ("13.0", "https://docs.nvidia.com/cuda/archive/13.0.0/cuda-toolkit-release-notes/index.html"),
    "575": ("12.9", _NOTES),
    "570": ("12.8", "https://docs.nvidia.com/cuda/archive/12.8.0/cuda-toolkit-release-notes"),
    "560": ("12.6", "https://docs.nvidia.com/cuda/archive/12.6.3/cuda-toolkit-release-notes"),
    "555": ("12.5", "https://docs.nvidia.com/cuda/archive/12.5.1/cuda-toolkit-release-notes/index.html"),
    "550": ("12.4", _NOTES),
    "545": ("12.3", "https://docs.nvidia.com/cuda/archive/12.3.0/cuda-toolkit-release-notes"),
    "535": ("12.2", _NOTES),
}

# Packages that carry the driver, its kernel modules or its libraries. The container toolkit
# (nvidia-container-*, libnvidia-container*) has versions of its own and is left out.
_NVIDIA = re.compile(
    r"^(?!nvidia-container|libnvidia-container)"
    r"(nvidia-|libnvidia-|linux-modules-nvidia-|linux-objects-nvidia-|linux-signatures-nvidia-|cuda-drivers)"
)
# Packages that exist in an open and a proprietary flavour: Ubuntu names the open one "-open"
# (nvidia-driver-580-open, linux-modules-nvidia-580-open-<kernel>); nvidia-kernel-common-580 serves both.
_FLAVOURED = re.compile(
    r"^(nvidia-driver|nvidia-dkms|nvidia-kernel-source|linux-modules-nvidia|linux-objects-nvidia|"
    r"linux-signatures-nvidia)-\d{3}(?=-|$)"
)
_NAME_BRANCH = re.compile(r"-(\d{3})(?=-|$)")
_DRIVER_PACKAGE = re.compile(r"^nvidia-driver-(\d{3})(?:-server)?(?:-open)?$")
_KERNEL_IMAGE = re.compile(r"^linux-image-(?:unsigned-)?(\d+\.\d+\.\d+-\d+-[a-z0-9-]+)$")
# One action line of `apt-get -s` (apt's simulation, apt-pkg/algorithms.cc pkgSimulate): "Inst name [old] (new
# release [arch])", "Inst name (new ...)" for a new package, "Remv name [old]", "Purg name [old]"; a trailing "[]"
# lists broken dependencies. "Conf" lines repeat the Inst ones.
_APT_ACTION = re.compile(r"^(Inst|Remv|Purg)\s+(\S+)(?:\s+\[([^\]]*)\])?(?:\s+\((\S+))?")
_ACTIONS = {"Remv": "remove", "Purg": "purge"}


# --- reading -------------------------------------------------------------------------------


def read_file(path: str) -> tuple[str | None, str]:
    """(text, '') or (None, why it cannot be read) - the why is part of a message a user reads."""
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", errors="replace"), ""
    except FileNotFoundError:
        return None, f"{path} does not exist"
    except OSError as err:
        return None, f"cannot read {path} ({err.strerror})"


def run_installer_evidence(uninstaller: str, log: str) -> dict:
    """Traces of NVIDIA's .run installer. It installs /usr/bin/nvidia-uninstall, which removes the driver and
    itself, and logs to /var/log/nvidia-installer.log, which stays (NVIDIA driver README, "Installing the NVIDIA
    Driver": https://download.nvidia.com/XFree86/Linux-x86_64/580.65.06/README/installdriver.html); Ubuntu's
    driver packages ship neither file."""
    present = os.path.exists(uninstaller)
    return {
        "present": present,
        "uninstaller": uninstaller if present else None,
        "log": log if os.path.exists(log) else None,
    }


# --- parsing -------------------------------------------------------------------------------


def upstream_version(version: str) -> str:
    """The upstream part of a Debian version: '580.142-0ubuntu0.24.04.1' -> '580.142' (deb-version(7))."""
    without_epoch = version.split(":", 1)[-1]
    return without_epoch.rsplit("-", 1)[0] if "-" in without_epoch else without_epoch


def package_branch(name: str, version: str = "") -> str | None:
    """The driver branch of a package: from its name (nvidia-driver-580-open), else from a driver-like version
    (a meta package such as nvidia-driver-open at 590.48.01-0ubuntu1)."""
    match = _NAME_BRANCH.search(name)
    if match:
        return match.group(1)
    head = upstream_version(version).split(".", 1)[0] if version else ""
    return head if len(head) == 3 and head.isdigit() and int(head) >= 300 else None


def is_open(name: str) -> bool | None:
    """True / False for a package that exists in both flavours, None for one that does not."""
    if not _FLAVOURED.match(name):
        return None
    return bool(re.search(r"-open(?=-|$)", name))


def parse_dpkg_status(text: str) -> list[dict]:
    """The NVIDIA packages of dpkg's status file (deb822 stanzas; dpkg-query(1) reads the same database).

    Status is "<selection> <flag> <state>": selection "hold" is what `apt-mark hold` sets.
    """
    packages = []
    for stanza in re.split(r"\n\s*\n", text or ""):
        fields = dict(
            (key.strip(), value.strip())
            for key, _sep, value in (line.partition(":") for line in stanza.splitlines() if line[:1] not in " \t")
        )
        name = fields.get("Package", "")
        if not _NVIDIA.match(name):
            continue
        words = fields.get("Status", "").split()
        if len(words) != 3 or words[2] == "not-installed":
            continue
        version = fields.get("Version", "")
        packages.append({
            "name": name,
            "version": version,
            "state": words[2],
            "held": words[0] == "hold",
            "branch": package_branch(name, version),
            "open": is_open(name),
        })
    return sorted(packages, key=lambda p: p["name"])


def parse_apt_simulation(text: str) -> list[dict]:
    """Every action of `apt-get -s upgrade|dist-upgrade`, in order."""
    changes = []
    for line in (text or "").splitlines():
        match = _APT_ACTION.match(line)
        if not match:
            continue
        verb, name, old, new = match.groups()
        action = _ACTIONS.get(verb) or ("upgrade" if old else "install")
        changes.append({"action": action, "package": name.split(":", 1)[0], "from": old or None,
                        "to": new if verb == "Inst" else None})
    return changes


def nvidia_changes(changes: list[dict]) -> list[dict]:
    """The planned changes to NVIDIA packages and to kernels (a new kernel needs NVIDIA modules built for it)."""
    chosen = []
    for change in changes:
        name = change["package"]
        if _NVIDIA.match(name) or _KERNEL_IMAGE.match(name):
            chosen.append({**change, "branch": None if _KERNEL_IMAGE.match(name) else
                           package_branch(name, change["to"] or change["from"] or ""), "open": is_open(name)})
    return chosen


# --- facts ---------------------------------------------------------------------------------


def cuda_for_branch(branch: str | None) -> str | None:
    return BRANCH_CUDA[branch][0] if branch in BRANCH_CUDA else None


def driver_for_cuda(cuda: str) -> str:
    """The driver that runs an image requiring `cuda`, as a message says it: the oldest known branch whose CUDA is
    at least that (BRANCH_CUDA), or one newer than every branch known here."""
    branches = sorted(b for b, (supported, _src) in BRANCH_CUDA.items() if driver_runs(supported, cuda))
    if branches:
        return f"a driver that runs CUDA {cuda} (branch {branches[0]} or newer)"
    newest = max(BRANCH_CUDA)
    return f"a driver that runs CUDA {cuda} (a branch newer than {newest}, which runs CUDA {BRANCH_CUDA[newest][0]})"


def driver_facts(version_text: str | None, version_error: str, packages: list[dict], run_installer: dict) -> dict:
    """What the box runs: the loaded module first (what serves now), the packages when none is loaded."""
    loaded = parse_driver_version_file(version_text) if version_text is not None else {}
    version = loaded.get("version")
    package = next((p for p in packages if _DRIVER_PACKAGE.match(p["name"]) and p["state"] == "installed"), None)
    if not version and package:
        version = upstream_version(package["version"])
    flavoured = [p["open"] for p in packages if p["open"] is not None and p["state"] == "installed"]
    is_open_now = loaded["flavour"] == "open" if loaded.get("flavour") else (all(flavoured) if flavoured else None)
    branch = version.split(".", 1)[0] if version else None
    return {
        "branch": branch,
        "version": version,
        "open": is_open_now,
        "module": {"loaded": bool(loaded.get("version")), "version": loaded.get("version"),
                   "flavour": loaded.get("flavour"), "error": version_error or None},
        "package_version": upstream_version(package["version"]) if package else None,
        "packages": packages,
        "held": [p["name"] for p in packages if p["held"]],
        "run_installer": run_installer,
        "cuda_version": cuda_for_branch(branch),
    }


def upgrade_facts(mode: str, changes: list[dict] | None, error: str, driver: dict) -> dict:
    planned = [c for c in changes or []
               if c["action"] in ("install", "upgrade") and _DRIVER_PACKAGE.match(c["package"])]
    after = driver["version"]
    if planned:
        after = max((upstream_version(c["to"]) for c in planned), key=parse_version)
    branch = after.split(".", 1)[0] if after else None
    return {
        "simulated": mode,
        "error": error or None,
        "changes": changes or [],
        "driver_version_after": after,
        "cuda_version_after": cuda_for_branch(branch),
    }


# --- judging -------------------------------------------------------------------------------

HOLD_FIX = (
    "hold the {branch} packages before upgrading (`sudo apt-mark hold {names}`) or pin them (apt_preferences(5)), "
    "then check again; lift the hold only to move the whole fleet to another branch"
)


def check_module(driver: dict, branch: str, require_open: bool) -> list[dict]:
    module = driver["module"]
    if not module["loaded"]:
        why = module["error"] or "no NVRM version line in it"
        return [problem("NVIDIA kernel module", f"none loaded ({why})", f"the {branch} open kernel module loaded",
                        "load it (`sudo modprobe nvidia`) or reboot into a kernel that has "
                        f"linux-modules-nvidia-{branch}-open for it; check `dmesg | grep -i nvrm`")]
    problems = []
    if require_open and module["flavour"] != "open":
        problems.append(problem(
            "NVIDIA kernel module flavour", f"{module['flavour']} {module['version']}", "the open kernel module",
            f"install nvidia-driver-{branch}-open (it replaces the proprietary flavour) and reboot: Blackwell GPUs "
            "such as GB10 initialise only with the open kernel modules "
            "(https://download.nvidia.com/XFree86/Linux-x86_64/595.58.03/README/kernel_open.html)"))
    if driver["branch"] != branch:
        problems.append(problem(
            "NVIDIA driver branch", f"{driver['branch']} ({module['version']}, loaded)", f"the {branch} branch",
            f"install nvidia-driver-{branch}-open, remove the other branch's packages and reboot"))
    return problems


def check_packages(driver: dict, branch: str, require_open: bool, require_hold: bool) -> tuple[list[dict], list[str]]:
    problems, warnings = [], []
    installed = [p for p in driver["packages"] if p["state"] == "installed"]
    other = sorted({p["name"] for p in installed if p["branch"] not in (None, branch)})
    if other:
        problems.append(problem("NVIDIA packages of another branch", ", ".join(other), f"only {branch} packages",
                                f"remove them (`sudo apt purge {' '.join(other)}`) and reboot"))
    closed = sorted(p["name"] for p in installed if p["open"] is False)
    if require_open and closed:
        problems.append(problem("Proprietary NVIDIA kernel packages", ", ".join(closed), "the -open packages",
                                f"install nvidia-driver-{branch}-open, which replaces them, and reboot"))
    module_version, package_version = driver["module"]["version"], driver["package_version"]
    if module_version and package_version and compare_versions(module_version, package_version) != 0:
        warnings.append(f"the loaded kernel module is {module_version} but the installed driver package is "
                        f"{package_version}: a reboot is pending (nvidia-smi then reports a version mismatch)")
    ours = sorted(p["name"] for p in installed if p["branch"] == branch and p["open"] is not False)
    unheld = [name for name in ours if name not in driver["held"]]
    if unheld:
        sentence = HOLD_FIX.format(branch=branch, names=" ".join(unheld))
        if require_hold:
            problems.append(problem("Held driver packages", f"not held: {', '.join(unheld)}", "every one held",
                                    sentence))
        else:
            warnings.append(f"not held: {', '.join(unheld)}; an upgrade may move them (the simulated one is checked)")
    return problems, warnings


def check_run_installer(driver: dict, branch: str) -> tuple[list[dict], list[str]]:
    evidence = driver["run_installer"]
    if evidence["present"]:
        return [problem(
            "Driver installed by NVIDIA's .run installer", f"{evidence['uninstaller']} present",
            "the driver from apt packages only",
            f"remove it (`sudo nvidia-uninstall`), install nvidia-driver-{branch}-open from apt and reboot: apt "
            "neither updates a .run driver nor knows its files, and its packages overwrite them")], []
    if evidence["log"]:
        return [], [f"{evidence['log']} exists: NVIDIA's .run installer ran on this box once (its uninstaller is "
                    "gone, so that driver was removed)"]
    return [], []


def check_upgrade(upgrade: dict, driver: dict, branch: str, require_open: bool) -> list[dict]:
    if upgrade["error"]:
        return [problem("Simulated upgrade", upgrade["error"], f"`apt-get -s {upgrade['simulated']}` succeeding",
                        "repair apt first (`sudo dpkg --configure -a`, `sudo apt-get -f install`), then check again")]
    changes = [c for c in upgrade["changes"] if not _KERNEL_IMAGE.match(c["package"])]
    installs = [c for c in changes if c["action"] in ("install", "upgrade")]
    names = " ".join(p["name"] for p in driver["packages"] if p["branch"] == branch) or f"nvidia-driver-{branch}-open"
    problems = []
    moved = [f"{c['package']} {c['to']}" for c in installs if c["branch"] not in (None, branch)]
    if moved:
        problems.append(problem("Driver branch after the upgrade", "would install " + ", ".join(moved),
                                f"the {branch} branch only", HOLD_FIX.format(branch=branch, names=names)))
    closed = [c["package"] for c in installs if c["open"] is False]
    if require_open and closed:
        problems.append(problem("Kernel module flavour after the upgrade", "would install " + ", ".join(closed),
                                "the -open packages only", HOLD_FIX.format(branch=branch, names=names)))
    # A removal is a problem unless the plan installs the same package again (a new kernel's modules
    # replacing the old kernel's: linux-modules-nvidia-580-open-<kernel>).
    kinds = {_kind(c["package"]) for c in installs}
    removed = [c["package"] for c in changes if c["action"] in ("remove", "purge") and c["branch"] == branch
               and c["open"] and _kind(c["package"]) not in kinds]
    if removed:
        problems.append(problem("Open kernel modules after the upgrade", "would remove " + ", ".join(removed),
                                "kept", HOLD_FIX.format(branch=branch, names=names)))
    return problems + check_new_kernels(upgrade, driver, branch)


def _kind(name: str) -> str:
    """A package name without the kernel release it is built for."""
    return re.sub(r"-open-\d+\.\d+\.\d+-\d+-[a-z0-9-]+$", "-open", name)


def check_new_kernels(upgrade: dict, driver: dict, branch: str) -> list[dict]:
    """A new kernel boots without the GPU unless modules for it come along (prebuilt, or built by DKMS)."""
    if any(p["name"].startswith("nvidia-dkms-") and p["state"] == "installed" for p in driver["packages"]):
        return []
    planned = {c["package"] for c in upgrade["changes"] if c["action"] in ("install", "upgrade")}
    have = {p["name"] for p in driver["packages"]} | planned
    problems = []
    for change in upgrade["changes"]:
        kernel = _KERNEL_IMAGE.match(change["package"])
        modules = f"linux-modules-nvidia-{branch}-open-{kernel.group(1)}" if kernel else ""
        if kernel and change["action"] == "install" and modules not in have:
            problems.append(problem(
                "NVIDIA modules for the new kernel", f"{change['package']} would be installed without {modules}",
                f"{modules} installed with it",
                f"install the meta package that follows the kernel (linux-modules-nvidia-{branch}-open-<flavour>, "
                "e.g. -nvidia-hwe-24.04 on DGX OS) or hold the kernel meta packages, then check again"))
    return problems


def check_cuda(image_cuda: str, driver: dict, upgrade: dict) -> tuple[list[dict], list[str]]:
    """The image's CUDA against the driver now and after the upgrade: the container runtime compares an image's
    NVIDIA_REQUIRE_CUDA (cuda>=X.Y) with the driver's CUDA version and refuses to start it
    ("unsatisfied condition: cuda>=X.Y, please update your driver", https://github.com/NVIDIA/nvidia-docker/issues/1442)."""
    problems, warnings = [], []
    moments = [("CUDA version of the image", driver["version"], driver["cuda_version"])]
    if upgrade["driver_version_after"] != driver["version"]:
        moments.append(("CUDA version of the image after the upgrade", upgrade["driver_version_after"],
                        upgrade["cuda_version_after"]))
    for requirement, version, supported in moments:
        if supported is None:
            warnings.append(f"{requirement}: no CUDA version known for driver {version or '(none)'} (branches known: "
                            f"{', '.join(sorted(BRANCH_CUDA))}); the image's CUDA {image_cuda} is not checked")
            continue
        if not driver_runs(supported, image_cuda):
            problems.append(problem(
                requirement, f"the image needs CUDA {image_cuda}; driver {version} runs CUDA up to {supported}",
                driver_for_cuda(image_cuda),
                f"use an image built for CUDA {supported} or older (for vLLM, a release whose image is built for "
                f"CUDA {supported}, or its -cu129 variant), or move the pinned branch after checking GB10 support"))
    return problems, warnings


def judge(params: dict, driver: dict, upgrade: dict) -> tuple[list[dict], list[str]]:
    """Every problem and warning at once."""
    branch = params["branch"]
    problems = check_module(driver, branch, params["require_open"])
    package_problems, warnings = check_packages(driver, branch, params["require_open"], params["require_hold"])
    problems += package_problems
    if params["refuse_run_installer"]:
        run_problems, run_warnings = check_run_installer(driver, branch)
        problems += run_problems
        warnings += run_warnings
    if upgrade["simulated"] != "none":
        problems += check_upgrade(upgrade, driver, branch, params["require_open"])
    if params.get("image_cuda_version"):
        cuda_problems, cuda_warnings = check_cuda(params["image_cuda_version"], driver, upgrade)
        problems += cuda_problems
        warnings += cuda_warnings
    return problems, warnings


def check_options(params: dict) -> None:
    """Raise InputError naming the option when one cannot be used."""
    if not re.fullmatch(r"\d{3}", str(params["branch"] or "")):
        raise InputError(f"branch: found {params['branch']!r}; expected a driver branch such as 580")
    check_version_option(params.get("image_cuda_version"), "image_cuda_version")


def failure_message(problems: list[dict]) -> str:
    lines = [f"{len(problems)} driver policy problem(s):"]
    lines += [f"  - {p['message']}" for p in problems]
    return "\n".join(lines)


def evaluate(params: dict, version_file: tuple[str | None, str], status_file: tuple[str | None, str],
             run_installer: dict, simulation: tuple[str | None, str]) -> tuple[dict, str | None, list[str]]:
    """What the module read -> (the result, the failure message or None, the warnings to report).

    version_file, status_file and simulation are (text, why it could not be had) as read_file returns them.
    """
    try:
        check_options(params)
    except InputError as exc:
        return {"changed": False}, str(exc), []
    status_text, status_error = status_file
    packages = parse_dpkg_status(status_text) if status_text is not None else []
    driver = driver_facts(version_file[0], version_file[1], packages, run_installer)
    changes = parse_apt_simulation(simulation[0]) if simulation[0] is not None else None
    mode = "upgrade_output" if params.get("upgrade_output") is not None else params["upgrade"]
    upgrade = upgrade_facts(mode, nvidia_changes(changes) if changes is not None else None,
                            simulation[1], driver)
    problems, warnings = judge(params, driver, upgrade)
    if status_text is None:
        problems.insert(0, problem("dpkg's database", status_error, "a readable dpkg status file",
                                   "run the check with become (the file is world-readable on Ubuntu) or give "
                                   "dpkg_status_file"))
    output = {"changed": False, "passed": not problems, "problems": problems, "warnings_found": warnings,
              "driver": driver, "upgrade": upgrade}
    error = failure_message(problems) if problems and params["fail_on_error"] else None
    return output, error, warnings if params["report_warnings"] else []
