# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/maintain.yml's computations: what changed on a box between two snapshots (the maintenance_facts
module's), and the summary of a maintenance run from the outcome each box kept."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

# How a box's maintenance ended, as playbooks/maintain.yml records it, and what the summary says of it.
STATES = {
    "planned": "not reached: the run stopped before its batch; untouched",
    "unchanged": "nothing to do: no update allowed, no reboot asked for",
    "would_maintain": "would be maintained (check mode)",
    "maintaining": "lost during its maintenance: run maintain.yml again to finish it",
    "done": "maintained and back in service",
    "failed": "FAILED: left out of the gateways' rotation",
    "not_planned": "not planned: the plan or the driver policy failed before any change",
}
GOOD = ("unchanged", "done", "would_maintain")


def _parse_time(value: object) -> datetime | None:
    try:
        return datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """What differs between two snapshots: DGX OS, the OS release, the kernel, the loaded driver and the CUDA it
    runs, each kernel or NVIDIA package, each firmware version."""
    found = []
    for label, path in (("DGX OS", ("dgx_os", "version")), ("OS", ("os", "pretty_name")), ("kernel", ("kernel",)),
                        ("driver", ("driver", "version")), ("driver CUDA", ("driver", "cuda_version"))):
        old, new = _dig(before, path), _dig(after, path)
        if old != new:
            found.append(f"{label} {old or 'none'} -> {new or 'none'}")
    old_packages, new_packages = before.get("packages") or {}, after.get("packages") or {}
    for name in sorted(set(old_packages) | set(new_packages)):
        old, new = old_packages.get(name), new_packages.get(name)
        if old != new:
            found.append(f"{name} {old or '(not installed)'} -> {new or '(removed)'}")
    old_firmware = {d.get("device_id") or d.get("name"): d for d in before.get("firmware") or []}
    for device in after.get("firmware") or []:
        key = device.get("device_id") or device.get("name")
        old = (old_firmware.get(key) or {}).get("version")
        if old and old != device.get("version"):
            found.append(f"firmware {device.get('name')} {old} -> {device.get('version')}")
    return found


def _dig(data: Mapping[str, Any], path: Sequence[str]) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, Mapping) else None
    return data


def seconds_between(start: object, end: object) -> float | None:
    first, last = _parse_time(start), _parse_time(end)
    return (last - first).total_seconds() if first and last else None


def box_entry(host: str, outcome: Mapping[str, Any]) -> dict[str, Any]:
    """One box of the summary: its state, batch, what changed, how long it took and was out of service, why it
    failed."""
    record = outcome.get("record") or {}
    state = str(outcome.get("state") or "not_planned")
    history = {item.get("state"): item.get("at") for item in record.get("history") or [] if isinstance(item, Mapping)}
    entry = {
        "host": host,
        "state": state,
        "batch": outcome.get("batch"),
        "changes": record.get("changes") or [],
        "planned": [f"{u.get('package')} {u.get('from') or ''} -> {u.get('to') or ''}".replace("  ", " ")
                    for u in (outcome.get("planned") or [])],
        "rebooted": bool(record.get("rebooted")),
        # This attempt's (the history's last of each phase: a box that failed before began again).
        "took_s": seconds_between(history.get("begun"), history.get("done")),
        "out_of_service_s": seconds_between(history.get("drained") or history.get("begun"), history.get("restored")),
        "failure": outcome.get("failure") or record.get("failure") or {},
    }
    entry["line"] = describe(entry)
    return entry


def describe(entry: Mapping[str, Any]) -> str:
    line = f"{entry['host']}: {STATES.get(entry['state'], entry['state'])}"
    if entry["batch"]:
        line += f" (batch {entry['batch']})"
    if entry["state"] in ("would_maintain", "planned") and entry["planned"]:
        line += "; would install " + ", ".join(entry["planned"])
    if entry["changes"]:
        line += "; changed: " + ", ".join(entry["changes"])
    if entry["rebooted"]:
        line += "; rebooted"
    if entry["took_s"] is not None:
        line += f"; took {entry['took_s']:.0f} s"
    if entry["out_of_service_s"] is not None:
        line += f", out of the gateways' rotation {entry['out_of_service_s']:.0f} s"
    failure = entry["failure"]
    if failure:
        line += f"; failed in task {failure.get('task', '?')!r}: {failure.get('message', '')}"
    return line


def summarize(outcomes: Mapping[str, Mapping[str, Any]], hosts: Sequence[str]) -> dict[str, Any]:
    """Every host of the run in order: its line, and whether the maintenance completed."""
    entries = [box_entry(host, outcomes.get(host) or {}) for host in hosts]
    return {
        "complete": all(e["state"] in GOOD for e in entries),
        "done": [e["host"] for e in entries if e["state"] == "done"],
        "failed": [e["host"] for e in entries if e["state"] in ("failed", "maintaining")],
        "not_reached": [e["host"] for e in entries if e["state"] == "planned"],
        "hosts": entries,
        "lines": [e["line"] for e in entries],
        "box_short_s": sum(e["out_of_service_s"] or 0 for e in entries),
    }
