# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The units and batches of a rollout (playbooks/rollout.yml), and its summary: which box runs
what, which was rolled back and why, from the outcome each box kept and the deployment records
the vllm role writes (roles/vllm/tasks/record.yml).

A unit is what restarts, is health-gated and is rolled back as one: a box, or a cluster (the
boxes that serve one model together, plugins/plugin_utils/cluster.py), which the rollout never
splits between batches. Pure functions: tests/unit/plugins/plugin_utils/test_rollout.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sparkfleet.serving.plugins.plugin_utils.cluster import cluster_of_host

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
# A cluster whose members ended in different states is shown in the worst of them, in this order.
WORST_FIRST = ("rollback_failed", "rolling_back", "restarting", "rolled_back", "not_staged", "staged",
               "would_deploy", "deployed", "unchanged")


# What a box whose last-run.json differs from its known-good.json was found in: an earlier run made
# its container anew and stopped before that container passed the health gate (a controller that
# died mid-rollout, or a failed gate nothing rolled back).
MID_ROLLOUT = ("found mid-rollout: it ran a deployment that never passed its health gate "
               "(last-run.json differs from known-good.json: an earlier run stopped before the gate)")


class RolloutError(ValueError):
    """The batches asked for, or the hosts' order, cannot make a rollout of whole units."""


def units(hosts: Sequence[str], groups: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
    """The rollout's units in the hosts' order: {"name", "members", "head", "cluster"}; a cluster's
    members (rank order, the head first) must all be in hosts, next to each other."""
    found: list[dict[str, Any]] = []
    for index, host in enumerate(hosts):
        cluster = cluster_of_host(groups, host)
        if not cluster:
            found.append(box_unit(host))
            continue
        members = cluster["members"]
        if found and found[-1]["name"] == cluster["name"] and found[-1]["cluster"]:
            continue
        missing = [m for m in members if m not in hosts]
        if missing:
            raise RolloutError(
                f"cluster {cluster['name']} ({', '.join(members)}) restarts as one unit, but {', '.join(missing)} "
                f"is not in this run (left out by --limit?): run on the whole cluster")
        if sorted(hosts[index:index + len(members)]) != sorted(members):
            raise RolloutError(
                f"the members of cluster {cluster['name']} ({', '.join(members)}) are not next to each other in the "
                f"play's host order ({', '.join(hosts)}), so no batch of Ansible's serial can hold the cluster "
                f"whole: list them together in the inventory (a cluster's group under spark, before or after the "
                f"other boxes)")
        found.append({"name": cluster["name"], "members": list(members), "head": cluster["head"], "cluster": True})
    return found


def box_unit(host: str) -> dict[str, Any]:
    """A box in no cluster as a unit: its own head."""
    return {"name": host, "members": [host], "head": host, "cluster": False}


def batch_size(value: object, total: int) -> int:
    """One item of rollout_batches against total units, as Ansible reads an item of serial (a
    number, or a percentage rounded down and at least 1: ansible/utils/helpers.py, pct_to_int,
    ansible-core 2.19); a size below 1 (Ansible's "all the rest") is refused."""
    text = str(value).strip()
    number = text.removesuffix("%")
    if isinstance(value, bool) or not number.isdigit() or int(number) < 1:
        raise RolloutError(f"rollout_batches: {value!r} is not a batch size; expected a number of units (a box or "
                           f"a whole cluster) of at least 1, or a percentage of them such as '50%'")
    return int(int(number) / 100.0 * total) or 1 if text.endswith("%") else int(number)


def serial_counts(batches: object, hosts: Sequence[str], groups: Mapping[str, Sequence[str]]) -> list[int]:
    """rollout_batches, in units (a box or a whole cluster), as Ansible's serial: the number of
    hosts of each batch along the play's host order, so that every batch ends between units.
    The list covers every host (Ansible repeats its last item only past its end)."""
    sizes = list(batches) if isinstance(batches, (list, tuple)) else [batches]
    if not sizes:
        raise RolloutError("rollout_batches is empty; expected a list of batch sizes in units, "
                           "such as [1, '50%', '100%']")
    for size in sizes:
        batch_size(size, 1)
    found = units(hosts, groups)
    counts: list[int] = []
    done = 0
    while done < len(found):
        size = batch_size(sizes[min(len(counts), len(sizes) - 1)], len(found))
        counts.append(sum(len(unit["members"]) for unit in found[done:done + size]))
        done += size
    return counts


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


def found_mid_rollout(outcome: dict[str, Any]) -> bool:
    """Whether the box was found, before this run touched it, running the spec of last-run.json
    while known-good.json (its `before`) says another passed the gate last."""
    last_run = outcome.get("last_run") or {}
    # A known-good record notes when the deployment was made and how it started (roles/vllm/vars/main.yml,
    # __vllm_record_notes); last-run.json is the spec alone.
    known_good = {k: v for k, v in (outcome.get("before") or {}).items() if k not in ("deployed_at", "startup")}
    return bool(last_run) and last_run != known_good


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
        "found_mid_rollout": found_mid_rollout(outcome),
        "deployments": deployment_entries(outcome) if state == "deployed" else [],
    }
    if len(entry["deployments"]) > 1:
        # A box that serves several deployments: what each runs and what changed on it (the first's alone
        # would hide a change to another).
        entry["changes"] = [f"{d['name']}: {change}" for d in entry["deployments"] for change in d["changes"]]
        entry["image_changed"] = False
    why = f"{'; '.join(map(str, entry['why']))} (in task: {entry['failed_task']})" if entry["why"] else ""
    entry["line"] = describe(host, entry, before, why, entry["rollback_error"])
    return entry


def deployment_entries(outcome: dict[str, Any]) -> list[dict[str, Any]]:
    """Each deployment of a box, by name, from the known-good records before and after the run
    (`before_all`, `after_all`: the vllm role's `vllm_deployed`): what it runs and what changed."""
    before_all = outcome.get("before_all") or {}
    after_all = outcome.get("after_all") or {}
    entries = []
    for name in dict.fromkeys([*after_all, *before_all]):
        before, after = before_all.get(name) or {}, after_all.get(name) or {}
        changes = argv_changes(before.get("argv") or [], after.get("argv") or []) + env_changes(before, after) \
            if before and after else []
        if before and after and before.get("image_id") != after.get("image_id"):
            changes.append(f"image was {runs(before)}")
        if not before:
            changes.append("new")
        if not after:
            changes.append("removed")
        entries.append({"name": name, "runs": after or before, "changes": changes})
    return entries


def describe(title: str, entry: dict[str, Any], before: dict[str, Any], why: str, rollback_error: str) -> str:
    """The summary's line of a box or a cluster."""
    line = f"{title}: {STATES.get(entry['state'], entry['state'])}"
    if entry["batch"]:
        line += f" (batch {entry['batch']})"
    if entry.get("found_mid_rollout"):
        line += f"; {MID_ROLLOUT}"
    deployments = entry.get("deployments") or []
    if len(deployments) > 1:
        line += "; runs " + ", ".join(f"{d['name']}: {runs(d['runs'])}" for d in deployments)
    else:
        line += f"; runs {runs(entry['runs'])}"
    if entry["changes"]:
        line += "; changed: " + ", ".join(entry["changes"])
    if entry["image_changed"]:
        line += f"; image was {runs(before)}"
    if why:
        line += f"; why: {why}"
    if rollback_error:
        line += f"; rollback error: {rollback_error}"
    return line


def unit_entry(unit: dict[str, Any], entries: dict[str, dict[str, Any]],
               outcomes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A box as its own entry; a cluster as one: the worst of its members' states, what its head
    runs and what changed on it, and why each member failed."""
    members = [entries[host] for host in unit["members"]]
    head = entries[unit["head"]]
    if not unit["cluster"]:
        return {"name": unit["name"], "cluster": False, "members": unit["members"], "head": unit["head"],
                "state": head["state"], "rolled_back": head["rolled_back"], "line": head["line"]}
    state = min((m["state"] for m in members), key=lambda s: WORST_FIRST.index(s) if s in WORST_FIRST else -1)
    entry = {**head, "state": state, "batch": next((m["batch"] for m in members if m["batch"]), None)}
    why = "; ".join(f"{m['host']}: {'; '.join(map(str, m['why']))} (in task: {m['failed_task']})"
                    for m in members if m["why"])
    errors = "; ".join(f"{m['host']}: {m['rollback_error']}" for m in members if m["rollback_error"])
    workers = [host for host in unit["members"] if host != unit["head"]]
    title = f"cluster {unit['name']} ({head['host']} head, {', '.join(workers)})"
    return {"name": unit["name"], "cluster": True, "members": unit["members"], "head": head["host"],
            "state": state, "rolled_back": any(m["rolled_back"] for m in members),
            "line": describe(title, entry, outcomes.get(head["host"], {}).get("before") or {}, why, errors)}


def summarize(outcomes: dict[str, dict[str, Any]], hosts: list[str],
              groups: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """Every host of the rollout, in inventory order, and whether the rollout completed; with the
    inventory's groups, one line per unit (a cluster's members in one)."""
    entries = [host_entry(host, outcomes.get(host) or {}) for host in hosts]
    found = units(hosts, groups) if groups else [box_unit(host) for host in hosts]
    unit_entries = [unit_entry(unit, {e["host"]: e for e in entries}, outcomes) for unit in found]
    return {
        "complete": all(e["state"] in GOOD for e in entries),
        "deployed": [e["host"] for e in entries if e["state"] == "deployed"],
        "rolled_back": [e["host"] for e in entries if e["rolled_back"]],
        "not_reached": [e["host"] for e in entries if e["state"] == "staged"],
        "found_mid_rollout": [e["host"] for e in entries if e["found_mid_rollout"]],
        "hosts": entries,
        "units": unit_entries,
        "lines": [u["line"] for u in unit_entries],
    }
