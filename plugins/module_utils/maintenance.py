# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a box runs and what its maintenance would change, read without changing anything.

Parsers take the text of the box's files and commands and return plain data; the maintenance_facts module
only reads the files and runs the commands (apt-get -s, fwupdmgr --json, docker image inspect).
"""

from __future__ import annotations

import json
import re

from ansible_collections.sparkfleet.serving.plugins.module_utils.cuda_requirement import required_cuda
from ansible_collections.sparkfleet.serving.plugins.module_utils.driver_policy import BRANCH_CUDA
from ansible_collections.sparkfleet.serving.plugins.module_utils.gpu_facts import parse_driver_version_file

# The options of the maintenance_facts module (plugins/modules/maintenance_facts.py documents them).
ARGUMENT_SPEC = {
    "upgrade": {"type": "str", "default": "security", "choices": ["security", "all", "none"]},
    "firmware": {"type": "bool", "default": False},
    "images": {"type": "list", "elements": "str", "default": []},
    "os_release_path": {"type": "path", "default": "/etc/os-release"},
    "dgx_release_path": {"type": "path", "default": "/etc/dgx-release"},
    "driver_version_file": {"type": "path", "default": "/proc/driver/nvidia/version"},
    "dpkg_status_file": {"type": "path", "default": "/var/lib/dpkg/status"},
    "reboot_required_path": {"type": "path", "default": "/var/run/reboot-required"},
}

# `apt-get -s` prints one line per action (apt-pkg/algorithms.cc, pkgSimulate): the package, its installed
# version in brackets, then in parentheses the candidate and the releases it comes from, each as
# Label:Version/Archive (Label:Archive when the release has no version), and the architecture. Recorded with
# apt 2.6.1:
#   Inst libgcrypt20-dev [1.10.1-3] (1.10.1-3+deb12u1 Debian:12.15/oldstable,
#        Debian-Security:12/oldstable-security [amd64]) []
_INST = re.compile(r"^(?P<verb>Inst|Remv|Purg)\s+(?P<name>\S+)(?:\s+\[(?P<old>[^\]]*)\])?"
                   r"(?:\s+\((?P<new>\S+)(?P<releases>[^)\[]*)(?:\[[^\]]*\])?\))?")
_KEY_VALUE = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$')
# The kernel and the NVIDIA stack: what a driver or kernel change is told by in the plan and the snapshot.
_WATCHED = re.compile(r"^(?:linux-(?:image|modules|headers)-|nvidia-|libnvidia-)")


def parse_key_values(text: str | None) -> dict[str, str]:
    """os-release(5) and /etc/dgx-release: KEY=value lines, the value optionally quoted."""
    values = {}
    for line in (text or "").splitlines():
        if line.lstrip().startswith("#"):
            continue
        match = _KEY_VALUE.match(line)
        if match:
            values[match.group(1)] = match.group(2).strip().strip('"').strip("'")
    return values


def dgx_os_version(release: dict[str, str]) -> str | None:
    """DGX OS's version from /etc/dgx-release: the latest OTA update's, else the installed build's."""
    ota = sorted((key for key in release if key.startswith("DGX_OTA_VERSION")), key=_ota_order)
    return release.get(ota[-1]) if ota else release.get("DGX_SWBUILD_VERSION")


def _ota_order(key: str) -> int:
    suffix = key.removeprefix("DGX_OTA_VERSION").strip("_")
    return int(suffix) if suffix.isdigit() else 0


def parse_simulation(text: str | None) -> list[dict]:
    """Every action of an `apt-get -s` run: package, from, to, the archives the new version comes from, and
    whether one of them is a security pocket (an archive ending in -security, as Ubuntu's and Debian's do)."""
    changes = []
    for line in (text or "").splitlines():
        match = _INST.match(line)
        if not match:
            continue
        verb = match.group("verb")
        archives = [_archive(part) for part in (match.group("releases") or "").split(",") if ":" in part]
        action = {"Remv": "remove", "Purg": "purge"}.get(verb) or ("upgrade" if match.group("old") else "install")
        changes.append({"action": action, "package": match.group("name").split(":", 1)[0],
                        "from": match.group("old"), "to": match.group("new") if verb == "Inst" else None,
                        "archives": archives, "security": any(a.endswith("-security") for a in archives)})
    return changes


def _archive(release: str) -> str:
    """The archive (suite) of one release as apt names it: Label:Version/Archive, or Label:Archive for a release
    without a version (a flat repository's)."""
    release = release.strip()
    return release.rsplit("/", 1)[-1] if "/" in release else release.split(":", 1)[-1]


def select_upgrades(changes: list[dict], mode: str) -> list[dict]:
    """What the maintenance installs: every change (`all`: apt's dist-upgrade), the upgrades from a security
    pocket (`security`), or nothing (`none`)."""
    if mode == "all":
        return changes
    if mode == "security":
        return [change for change in changes if change["action"] == "upgrade" and change["security"]]
    return []


def installed_watched(status_text: str | None) -> dict[str, str]:
    """The installed kernel and NVIDIA packages by name, from dpkg's status database (deb822 stanzas; Status is
    "<selection> <flag> <state>")."""
    installed = {}
    for stanza in re.split(r"\n\s*\n", status_text or ""):
        fields = dict((key.strip(), value.strip()) for key, _sep, value
                      in (line.partition(":") for line in stanza.splitlines() if line[:1] not in " \t"))
        name = fields.get("Package", "")
        if _WATCHED.match(name) and fields.get("Status", "").split()[-1:] == ["installed"]:
            installed[name] = fields.get("Version", "")
    return dict(sorted(installed.items()))


def driver_snapshot(version_text: str | None) -> dict:
    """The loaded kernel module: version, flavour, branch and the newest CUDA the branch runs."""
    parsed = parse_driver_version_file(version_text or "")
    version = parsed["version"]
    branch = version.split(".", 1)[0] if version else None
    return {"loaded": version is not None, "version": version, "flavour": parsed["flavour"], "branch": branch,
            "cuda_version": BRANCH_CUDA[branch][0] if branch in BRANCH_CUDA else None}


def image_cuda(env: list[str] | None) -> str | None:
    """The CUDA version an image needs, from its environment: NVIDIA_REQUIRE_CUDA's cuda>=X.Y, else CUDA_VERSION's
    major.minor (what NVIDIA's container runtime checks against the driver; module_utils/cuda_requirement.py)."""
    return required_cuda(env)


def newest_cuda(versions: list[str | None]) -> str | None:
    """The highest of CUDA versions (major.minor), None when there is none."""
    known = [v for v in versions if v]
    return max(known, key=lambda v: tuple(int(p) for p in v.split("."))) if known else None


def parse_fwupd(text: str | None) -> list[dict]:
    """`fwupdmgr get-devices --json` / `get-updates --json`: {"Devices": [...]} -> name, id, version and the
    versions of the releases offered (fwupd's libfwupd/fwupd-device.c and fwupd-release.c, to_json)."""
    try:
        data = json.loads(text or "{}")
    except ValueError:
        return []
    devices = data.get("Devices") if isinstance(data, dict) else None
    return [{"name": d.get("Name"), "device_id": d.get("DeviceId"), "version": d.get("Version"),
             "releases": [r.get("Version") for r in d.get("Releases") or [] if isinstance(r, dict)]}
            for d in devices or [] if isinstance(d, dict)]


def reboot_required(flag_exists: bool, packages_text: str | None) -> dict:
    """Ubuntu's reboot flag (/var/run/reboot-required) and the packages that asked for it (.pkgs)."""
    names = sorted({line.strip() for line in (packages_text or "").splitlines() if line.strip()})
    return {"required": flag_exists, "packages": names if flag_exists else []}
