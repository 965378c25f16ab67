# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The summary of a rollout (playbooks/rollout.yml): which box runs what, which was rolled
back and why, from the outcome each box kept and the deployment records the vllm role
writes (roles/vllm/tasks/record.yml). Pure functions: tests/unit/plugins/module_utils/test_rollout.py.
"""

from __future__ import annotations

from typing import Any

GOOD = ("deployed", "unchanged", "would_deploy")
STATES = {
    "not_staged": "stopped in phase 1 (its checks or its staging failed, see above); nothing restarted",
    "staged": "not reached: the rollout stopped before its batch; untouched",
    "restarting": "lost during its restart (unreachable?): its state is unknown",
    "rolling_back": "lost during its rollback (unreachable?): its state is unknown",
    "deployed": "deployed and health-gated",
    "unchanged": "already ran this deployment; not restarted",
    "would_deploy": "check mode: would be restarted with the change and health-gated",
    "rolled_back": "FAILED, rolled back to its last known-good deployment and health-gated again",
    "rollback_failed": "FAILED, and the rollback failed too: it may not serve",
}


def flag_values(argv: list[str]) -> dict[str, str | None]:
    """`vllm serve` arguments as {flag: value}; a flag without a value maps to None and the
    words before the first flag (the model path) to `model`."""
    values: dict[str, str | None] = {}
    flag = "model"
    for word in map(str, argv):
        if word.startswith("--"):
            flag = word.split("=", 1)[0]
            values[flag] = word[len(flag) + 1:] or None
        elif values.get(flag) is None:
            values[flag] = word
    return values


def argv_changes(before: list[str], after: list[str]) -> list[str]:
    """What changed between two argument lists, flag by flag, in the new list's order."""
    old, new = flag_values(before), flag_values(after)
    shown = {None: "(flag)"}
    changes = []
    for flag in [*new, *(f for f in old if f not in new)]:
        if flag not in old:
            changes.append(f"{flag} {shown.get(new[flag], new[flag])} (new)")
        elif flag not in new:
            changes.append(f"{flag} removed (was {shown.get(old[flag], old[flag])})")
        elif old[flag] != new[flag]:
            changes.append(f"{flag} {shown.get(old[flag], old[flag])} -> {shown.get(new[flag], new[flag])}")
    return changes


def env_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The environment by its record: key names and a hash of the values (never the values)."""
    if before.get("env_sha256") == after.get("env_sha256"):
        return []
    old, new = set(before.get("env_keys") or []), set(after.get("env_keys") or [])
    added, removed = sorted(new - old), sorted(old - new)
    return ["environment changed" + (f", added {', '.join(added)}" if added else "")
            + (f", removed {', '.join(removed)}" if removed else "")]


def runs(record: dict[str, Any]) -> str:
    """One record as a phrase: image, its id, the model and its revision."""
    if not record:
        return "no recorded deployment"
    model = record.get("model") or {}
    revision = model.get("commit") or model.get("revision")
    image_id = str(record.get("image_id") or "").removeprefix("sha256:")[:12]
    return (f"{record.get('image', '?')} ({image_id or 'id unknown'}), {model.get('repo', '?')}"
            + (f"@{revision}" if revision else "") + f" as {record.get('served_model_name', '?')}")


def host_entry(host: str, outcome: dict[str, Any]) -> dict[str, Any]:
    state = str(outcome.get("state") or "not_staged")
    before, after = outcome.get("before") or {}, outcome.get("after") or {}
    now = after or before
    failure = outcome.get("failure") or {}
    entry: dict[str, Any] = {
        "host": host,
        "state": state,
        "batch": outcome.get("batch"),
        "rolled_back": state in ("rolled_back", "rollback_failed"),
        "runs": now,
        "changes": argv_changes(before.get("argv") or [], after.get("argv") or []) + env_changes(before, after)
        if state == "deployed" and before else [],
        "image_changed": bool(before and after and before.get("image_id") != after.get("image_id")),
        "why": failure.get("diagnosis") or ([failure["message"]] if failure.get("message") else []),
        "failed_task": failure.get("task"),
        "rollback_error": outcome.get("rollback_error"),
    }
    line = f"{host}: {STATES.get(state, state)}"
    if entry["batch"]:
        line += f" (batch {entry['batch']})"
    line += f"; runs {runs(now)}"
    if entry["changes"]:
        line += "; changed: " + ", ".join(entry["changes"])
    if entry["image_changed"]:
        line += f"; image was {runs(before)}"
    if entry["why"]:
        line += f"; why: {'; '.join(map(str, entry['why']))} (in task: {entry['failed_task']})"
    if entry["rollback_error"]:
        line += f"; rollback error: {entry['rollback_error']}"
    entry["line"] = line
    return entry


def summarize(outcomes: dict[str, dict[str, Any]], hosts: list[str]) -> dict[str, Any]:
    """Every host of the rollout, in inventory order, and whether the rollout completed."""
    entries = [host_entry(host, outcomes.get(host) or {}) for host in hosts]
    return {
        "complete": all(e["state"] in GOOD for e in entries),
        "deployed": [e["host"] for e in entries if e["state"] == "deployed"],
        "rolled_back": [e["host"] for e in entries if e["rolled_back"]],
        "not_reached": [e["host"] for e in entries if e["state"] == "staged"],
        "hosts": entries,
        "lines": [e["line"] for e in entries],
    }
