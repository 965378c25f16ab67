# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU clock caps (`nvidia-smi -lgc MIN,MAX`): the nvidia_runtime role's setting checked, and what a box
says of the caps it applied, compared with the setting.

A reboot drops the caps; the role's oneshot unit (sparkfleet-gpu-clocks.service) sets them again at
every boot. The driver reports no locked range afterwards (no --query-gpu field holds it, and
clocks.max.graphics stays the hardware's), so the one witness of the caps in force is the driver's
answer to the unit's own `-lgc`, in the unit's journal since its last start: `GPU clocks set to
"(gpuClkMin 600, gpuClkMax 1800)" for GPU 0000000F:01:00.0`. A unit that did not run since the box
started (missing, disabled, failed) applied nothing this boot. Pure functions; unit tests:
tests/unit/plugins/plugin_utils/test_gpu_clocks.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

UNIT = "sparkfleet-gpu-clocks.service"
KEYS = ("min_mhz", "max_mhz")
# The driver's answer to -lgc, one line per GPU (the stand-in's comment cites where the words come from).
_SET = re.compile(r'GPU clocks set to "\(gpuClkMin (\d+), gpuClkMax (\d+)\)" for GPU (\S+)')
# A GPU that cannot lock its clocks: nvidia-smi says so, "Treating as warning and moving on", and exits 0.
_NOT_SUPPORTED = re.compile(r"(Setting locked GPU clocks is not supported for GPU \S+?)\.?\s*$")
_PERMISSION = re.compile(r"(The current user does not have permission to change clocks[^\n]*)")


def _integer(value: object) -> int | None:
    """A whole number >= 0, or a string of digits (an inventory or -e value); None otherwise (bools, floats,
    negative numbers, words)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _empty(setting: object) -> bool:
    """None, "", {} or every key null (the argument spec's suboptions of an empty mapping): leave the clocks alone."""
    if isinstance(setting, Mapping):
        return all(value is None for value in setting.values())
    return setting is None or setting == ""


def limit_errors(setting: object, highest_mhz: int | None = None, name: str = "nvidia_runtime_gpu_clock_limits",
                 ) -> list[str]:
    """What is wrong with the setting, as sentences that say what to change ([] when it is right).

    Empty ({}, null, "", or every key null) leaves the clocks alone. Otherwise both min_mhz and max_mhz, whole MHz,
    0 <= min_mhz <= max_mhz, max_mhz >= 1, and max_mhz at most the GPU's highest graphics clock when
    the box reported it (highest_mhz)."""
    if _empty(setting):
        return []
    example = f"e.g. {name}: {{min_mhz: 600, max_mhz: 1800}}, or {{}} to leave the clocks alone"
    if not isinstance(setting, Mapping):
        return [f"{name}={setting!r} is not a mapping: {example}."]
    errors = []
    unknown = sorted(str(key) for key in setting if key not in KEYS)
    if unknown:
        errors.append(f"{name} has unknown key(s) {', '.join(unknown)}: only min_mhz and max_mhz ({example}).")
    values = {}
    for key in KEYS:
        if setting.get(key) is None:
            errors.append(f"{name}.{key} is missing: give both min_mhz and max_mhz ({example}).")
            continue
        values[key] = _integer(setting[key])
        if values[key] is None:
            errors.append(f"{name}.{key}={setting[key]!r} is not a whole number of MHz ({example}).")
    low, high = values.get("min_mhz"), values.get("max_mhz")
    if low is not None and high is not None:
        if high < 1:
            errors.append(f"{name}.max_mhz={high}: the highest clock must be at least 1 MHz.")
        if low > high:
            errors.append(f"{name}: min_mhz={low} is above max_mhz={high}; swap them (nvidia-smi -lgc MIN,MAX).")
        if highest_mhz and high > highest_mhz:
            errors.append(f"{name}.max_mhz={high} is above this GPU's highest graphics clock, {highest_mhz} MHz"
                          f" (nvidia-smi --query-gpu=clocks.max.graphics): at most {highest_mhz}.")
    return errors


def wanted(setting: object) -> dict:
    """The setting -> {"min_mhz": int, "max_mhz": int}, or {} (leave the clocks alone, or a wrong setting:
    limit_errors says why)."""
    if limit_errors(setting):
        return {}
    if not isinstance(setting, Mapping) or _empty(setting):
        return {}
    return {key: _integer(setting[key]) for key in KEYS}


def highest_clock(query_output: str | None) -> int | None:
    """`nvidia-smi --query-gpu=clocks.max.graphics --format=csv,noheader,nounits` -> the lowest of the GPUs'
    highest graphics clocks (MHz), or None when no GPU reports one ([N/A])."""
    values = [int(line.strip()) for line in (query_output or "").splitlines() if line.strip().isdigit()]
    return min(values) if values else None


def parse_unit(show: str | None) -> dict:
    """`systemctl show UNIT --property=...` (KEY=VALUE lines) -> a dict."""
    found = {}
    for line in (show or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            found[key.strip()] = value.strip()
    return found


def applied(log: str | None) -> tuple[list[dict], list[str]]:
    """The unit's journal since its last start -> (the caps the driver said it set, one per GPU, the last
    answer of each; what the driver refused, in its words)."""
    caps: dict[str, dict] = {}
    refusals: list[str] = []
    for line in (log or "").splitlines():
        match = _SET.search(line)
        if match:
            caps[match.group(3)] = {"gpu": match.group(3), "min_mhz": int(match.group(1)),
                                    "max_mhz": int(match.group(2))}
            continue
        refused = _NOT_SUPPORTED.search(line) or _PERMISSION.search(line)
        if refused:
            refusals.append(refused.group(1))
    return list(caps.values()), refusals


def caps_text(caps: Mapping | None) -> str:
    return f"{caps['min_mhz']}-{caps['max_mhz']} MHz" if caps else ""


def clock_caps(setting: object, unit_show: str | None, unit_log: str | None, unit_read: bool = True) -> dict:
    """The setting and what the box said (systemctl show of the unit, its journal since its last start) ->
    {"wanted": {...} or {}, "wanted_text", "unit" (active, failed, inactive, not installed, unknown),
    "applied": [{"gpu", "min_mhz", "max_mhz"}], "applied_text", "differs": why the caps in force are not the
    setting's, or ""}. unit_read false: the box could not be asked (the unit is then unknown)."""
    want = wanted(setting)
    unit = parse_unit(unit_show)
    if not unit_read or "LoadState" not in unit:
        state = "unknown"
    elif unit["LoadState"] == "not-found":
        state = "not installed"
    else:
        state = unit.get("ActiveState") or "unknown"
    caps, refusals = applied(unit_log) if state == "active" else ([], [])
    distinct = {caps_text(cap) for cap in caps}
    if state == "active" and caps:
        applied_text = "; ".join(sorted(distinct)) if len(distinct) > 1 else distinct.pop()
    elif state == "active":
        applied_text = f"none ({refusals[-1]})" if refusals else "none confirmed by the driver"
    elif state == "unknown":
        applied_text = "unknown"
    else:
        applied_text = "none since boot" if state != "not installed" else "none"
    result = {"wanted": want, "wanted_text": caps_text(want) or "leave alone", "unit": state, "applied": caps,
              "applied_text": applied_text, "differs": ""}
    result["differs"] = _difference(want, state, caps, refusals)
    return result


def _difference(want: dict, state: str, caps: list[dict], refusals: list[str]) -> str:
    if not want:
        left = state not in ("not installed", "unknown")
        return f"{UNIT} is {state} though the setting leaves the clocks alone (the nvidia_runtime role removes it)" \
            if left else ""
    problems = {
        "unknown": f"{UNIT} could not be read",
        "not installed": f"{UNIT} is not installed: nothing caps the clocks at boot ({caps_text(want)} wanted)",
    }
    if state in problems:
        return problems[state]
    if state != "active":
        return f"{UNIT} is {state}: the caps were not applied since the box started ({caps_text(want)} wanted)"
    if not caps:
        said = f": {refusals[-1]}" if refusals else ""
        return f"the driver did not confirm the caps since {UNIT} started{said}"
    wrong = [cap for cap in caps if (cap["min_mhz"], cap["max_mhz"]) != (want["min_mhz"], want["max_mhz"])]
    return "; ".join(f"GPU {cap['gpu']} runs with {caps_text(cap)}, the setting asks {caps_text(want)}"
                     for cap in wrong)
