"""Test bed only: the firmware of a simulated Spark, as the fwupd stand-in sees it.

fwupd (the daemon behind `fwupdmgr`) cannot run in a container: it has no devices there, no
UEFI and no ESP. The stand-ins keep what the daemon would know in one JSON file instead, the
state file (STATE_FILE, or $SPARKFLEET_SIM_FWUPD_STATE):

- the devices fwupd would have found, with the keys fwupd gives them (fwupd 1.9.24,
  libfwupd/fwupd-device.c, fwupd_device_to_json_full) and the release the last update staged;
- the releases the LVFS publishes for each device, numbered in the order they were published
  (LvfsSerial), and which of them the box's metadata has (MetadataSerial, set by a refresh) and
  when it was downloaded (MetadataModified): a release published after the last refresh is not
  visible yet, as on a real box;
- the history of updates (what the daemon keeps in its history database, src/fu-history.c).

standins/bin/fwupdmgr reads it and writes it as the daemon would; standins/bin/simspark-firmware
sets it up (devices, releases) and plays the next boot, where a staged UEFI capsule is applied.
In devices and releases, the keys that start with "Sim" are the stand-ins' own (the releases the
LVFS has for the device, the version staged for the next boot, ...): fwupdmgr never prints them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

SIM_ROOT = Path(os.environ.get("SPARKFLEET_SIM_ROOT", "/"))
STATE_FILE = Path(os.environ.get("SPARKFLEET_SIM_FWUPD_STATE", SIM_ROOT / "var/lib/sparkfleet-sim/fwupd.json"))

# The fwupd release the stand-in imitates: Ubuntu 24.04 was released with 1.9.16 and has 1.9.24-1~24.04.1 in
# noble-updates since August 2024 (https://lists.ubuntu.com/archives/noble-changes/2024-August/041238.html,
# https://bugs.launchpad.net/ubuntu/+source/fwupd/+bug/2077411); every citation is of fwupd's tag 1.9.24.
FWUPD_VERSION = "1.9.24"

# FwupdUpdateState (libfwupd/fwupd-enums.h:1063-1071): JSON carries the number (fwupd-device.c:3240-3243).
UPDATE_STATE_SUCCESS = 2
UPDATE_STATE_FAILED = 3
UPDATE_STATE_NEEDS_REBOOT = 4

# A UEFI capsule device as fwupd's uefi_capsule plugin makes it: flags internal, needs-reboot, require-ac
# (plugins/uefi-capsule/fu-uefi-device.c:519-521), updatable and usable-during-update
# (fu-uefi-capsule-plugin.c:1183-1184), registered by the engine (src/fu-engine.c:6054), icon "computer"
# for system firmware (fu-uefi-device.c:528), protocol org.uefi.capsule (fu-uefi-device.c:692).
# needs-reboot is always there: it says an update is applied at the next boot, not that one is pending.
CAPSULE_FLAGS = ["internal", "updatable", "require-ac", "registered", "needs-reboot", "usable-during-update"]
# A device whose plugin writes the update at once (no reboot): updatable and registered only.
LIVE_FLAGS = ["internal", "updatable", "registered"]

# The LVFS remote of fwupd's default configuration (data/remotes.d/lvfs.conf): metadata is fresh for
# RefreshInterval seconds, 86400 when the remote does not say (libfwupd/fwupd-remote.c:30, 941).
REMOTE_ID = "lvfs"
REFRESH_INTERVAL = 86400


def load(path: Path = STATE_FILE) -> dict[str, Any]:
    """The state; a box with no firmware devices when the file is missing."""
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        state = {}
    state.setdefault("MetadataModified", 0)
    state.setdefault("LvfsSerial", 0)
    state.setdefault("MetadataSerial", 0)
    state.setdefault("Devices", [])
    state.setdefault("History", [])
    return state


def save(state: dict[str, Any], path: Path = STATE_FILE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def device_id(name: str) -> str:
    """A device ID as fwupd makes one: the SHA-1 of an identifying string (libfwupdplugin/fu-device.c:2874-2879)."""
    return hashlib.sha1(f"sparkfleet-sim:{name}".encode()).hexdigest()


def guid_for(name: str) -> str:
    """A stable GUID for a device of the test bed (a real capsule device's is its ESRT fw_class)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"sparkfleet-sim:firmware:{name}"))


def guess_version_format(version: str) -> str:
    """fu_version_guess_format (libfwupdplugin/fu-version-common.c:492-527), its names (fwupd-enums.c:947-972)."""
    parts = version.split(".")
    if len(parts) == 1:
        return "number" if version.startswith("0x") or version.isdigit() else "plain"
    if not all(part.isdigit() for part in parts):
        return "plain"
    return {2: "pair", 3: "triplet", 4: "quad"}.get(len(parts), "")


def _compare_char(a: str, b: str) -> int:
    # fu_version_compare_char (fu-version-common.c:250-259): '~' sorts before anything, "" is the end.
    if a == b:
        return 0
    if a == "~":
        return -1
    if b == "~":
        return 1
    return -1 if a < b else 1


def _leading_int(text: str) -> tuple[int, str]:
    digits = len(text) - len(text.lstrip("0123456789"))
    return (int(text[:digits]) if digits else 0), text[digits:]


def version_compare(a: str, b: str, fmt: str = "") -> int:
    """fu_version_compare (fu-version-common.c:588-667): numbers section by section, then their text."""
    if fmt == "plain" or a == b:
        return (a > b) - (a < b)
    split_a, split_b = a.split("."), b.split(".")
    for i in range(max(len(split_a), len(split_b))):
        if i >= len(split_a) or i >= len(split_b):
            return -1 if i >= len(split_a) else 1  # "we lost or gained a dot"
        (num_a, rest_a), (num_b, rest_b) = _leading_int(split_a[i]), _leading_int(split_b[i])
        rc = (num_a > num_b) - (num_a < num_b)
        for char_a, char_b in zip(rest_a + "\0", rest_b + "\0", strict=False):
            rc = rc or _compare_char(char_a, char_b)
        if rc:
            return rc
    return 0


def find(state: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((dev for dev in state["Devices"] if dev["Name"] == name), None)


def add_device(state: dict[str, Any], name: str, version: str, now: int, *, live: bool = False,
               guid: str | None = None, vendor: str = "NVIDIA") -> dict[str, Any]:
    device: dict[str, Any] = {
        "Name": name,
        "DeviceId": device_id(name),
        "Guid": [guid or guid_for(name)],
        "Plugin": "uefi_capsule" if not live else "sparkfleet_sim_live",
        "Protocol": "org.uefi.capsule" if not live else "org.sparkfleet.sim.live",
        "Flags": list(LIVE_FLAGS if live else CAPSULE_FLAGS),
        "Vendor": vendor,
        "Version": version,
        "VersionFormat": guess_version_format(version),
        "Icons": ["computer"],
        "Created": now,
        "SimReleases": [],
        "SimStaged": None,
    }
    state["Devices"].append(device)
    state["Devices"].sort(key=lambda dev: dev["Name"])
    return device


def offer_release(state: dict[str, Any], device: dict[str, Any], version: str, now: int, *,
                  summary: str | None = None, description: str | None = None,
                  fails_at_boot: bool = False) -> dict[str, Any]:
    """The LVFS publishes VERSION for the device (fwupd_release_to_json's keys, libfwupd/fwupd-release.c:2056-2151)."""
    state["LvfsSerial"] += 1
    slug = "".join(c if c.isalnum() else "-" for c in device["Name"].lower()).strip("-")
    payload = f"sparkfleet-sim firmware {device['Name']} {version}".encode()
    sha1 = hashlib.sha1(payload).hexdigest()
    text = description or f"Test-bed firmware {version} for the {device['Name']}."
    release = {
        "AppstreamId": f"org.sparkfleet.sim.{slug}.firmware",
        "RemoteId": REMOTE_ID,
        "Name": device["Name"],
        "Summary": summary or f"Firmware for {device['Name']}",
        "Description": f"<p>{text}</p>",
        "Version": version,
        "Filename": f"{sha1}-{slug}-{version}.cab",
        "Protocol": device["Protocol"],
        "Checksum": [sha1, hashlib.sha256(payload).hexdigest()],
        "License": "LicenseRef-proprietary",
        "Size": len(payload),
        "Created": now,
        "Vendor": device["Vendor"],
        "SimPublished": state["LvfsSerial"],
        "SimFailsAtBoot": fails_at_boot,
    }
    device["SimReleases"] = [rel for rel in device["SimReleases"] if rel["Version"] != version] + [release]
    return release


def download_metadata(state: dict[str, Any], now: int) -> None:
    """The box downloads the LVFS metadata: every release published so far becomes visible."""
    state["MetadataModified"] = now
    state["MetadataSerial"] = state["LvfsSerial"]


def visible_releases(state: dict[str, Any], device: dict[str, Any]) -> list[dict[str, Any]]:
    """The releases the box's downloaded metadata has, newest first (src/fu-engine.c:5118-5139)."""
    seen = [rel for rel in device["SimReleases"] if rel["SimPublished"] <= state["MetadataSerial"]]
    fmt = device.get("VersionFormat", "")
    newest_first = functools.cmp_to_key(lambda a, b: version_compare(b["Version"], a["Version"], fmt))
    return sorted(seen, key=newest_first)


def history_entry(device: dict[str, Any], release: dict[str, Any], state: int, now: int) -> dict[str, Any]:
    """What the history database keeps of one update (src/fu-history.c:59-166, its SELECT at 1128-1148)."""
    return {
        "Name": device["Name"],
        "DeviceId": device["DeviceId"],
        "Guid": device["Guid"][:1],
        "Plugin": device["Plugin"],
        "Flags": [*device["Flags"], "historical"],
        "Version": device["Version"],
        "VersionFormat": device.get("VersionFormat", ""),
        "Created": device["Created"],
        "Modified": now,
        "UpdateState": state,
        "Releases": [{key: release[key] for key in ("AppstreamId", "Version", "Filename", "Protocol", "Checksum")}],
    }


def install(state: dict[str, Any], device: dict[str, Any], release: dict[str, Any], now: int) -> None:
    """What the daemon does with an update (src/fu-engine.c:2514-2560): a device that needs a reboot keeps its
    version and is left in the needs-reboot state, the history saying so; any other is written at once."""
    if "needs-reboot" in device["Flags"]:
        device["SimStaged"] = release["Version"]
        device["UpdateState"] = UPDATE_STATE_NEEDS_REBOOT
        state["History"].append(history_entry(device, release, UPDATE_STATE_NEEDS_REBOOT, now))
        return
    state["History"].append(history_entry(device, release, UPDATE_STATE_SUCCESS, now))
    device["Version"] = release["Version"]
    device["UpdateState"] = UPDATE_STATE_SUCCESS


def boot(state: dict[str, Any], now: int) -> list[str]:
    """The next boot: firmware applies each staged capsule and fwupd, starting, records the outcome in its
    history (fu_engine_update_history_device, src/fu-engine.c:7747-7850): success when the device now runs
    the staged version, else failure with fwupd's message. The daemon's devices are new: no update state,
    created now. Returns what happened."""
    done = []
    for device in state["Devices"]:
        staged, device["SimStaged"] = device.get("SimStaged"), None
        device.pop("UpdateState", None)
        device["Created"] = now
        if staged is None:
            continue
        release = next((rel for rel in device["SimReleases"] if rel["Version"] == staged), {})
        entry = next((e for e in reversed(state["History"]) if e["DeviceId"] == device["DeviceId"]
                      and e["UpdateState"] == UPDATE_STATE_NEEDS_REBOOT), None)
        if release.get("SimFailsAtBoot"):
            result = f"failed to run update on reboot: expected {staged} and got {device['Version']}"
            if entry is not None:
                entry.update(UpdateState=UPDATE_STATE_FAILED, UpdateError=result, Modified=now)
            done.append(f"{device['Name']}: {result}")
            continue
        device["Version"] = staged
        if entry is not None:
            entry.update(UpdateState=UPDATE_STATE_SUCCESS, Version=staged, Modified=now)
        done.append(f"{device['Name']}: now {staged}")
    return done
