# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The deployments of a box (the vllm role's vllm_deployments), each resolved to the names that keep it apart
from the others on the same box, and the admission of the whole set against the box's memory.

A box serves a list of deployments, one vLLM container each. An empty list is the single deployment the role
always served: named by vllm_container_name, with the role's own port, state directory, known-good repository
and master port, so that a box deployed before lists existed finds its container and records where they are.
A deployment named like that single one (``vllm`` by default) keeps them too; any other gets its own, from its
name."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

# Docker's rule for container names (moby daemon/names.go, restrictedNamePattern).
NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
# What a deployment may set besides its name, port and priority: the vllm role's options (without the vllm_
# prefix) that make one model's container what it is. The box-wide ones (the API key, the Docker and health
# gate settings, the models root) stay the box's.
PER_DEPLOYMENT = (
    "recipe", "profile", "model", "model_revision", "served_model_name", "dtype", "quantization",
    "max_model_len", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype",
    "enforce_eager", "enable_prefix_caching", "reasoning_parser", "tool_call_parser", "enable_auto_tool_choice",
    "text_only", "shm_size", "env", "speculative_config", "draft_model", "draft_model_revision", "extra_env",
    "extra_args", "model_dir", "draft_model_dir", "image", "image_digest", "image_id", "release",
    "image_cuda_version", "health_timeout", "tensor_parallel_size", "pipeline_parallel_size", "labels",
    "restart_after_watchdog_stop",
)
IDENTITY = ("name", "port", "priority", "state_dir", "known_good_repository", "master_port")
# The watchdog stops the lowest priority first (roles/watchdog/README.md); a deployment that gives none has this.
DEFAULT_PRIORITY = 100


def _int(where: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit():
        raise ValueError(f"{where} = {value!r}; expected an integer from {low} to {high}")
    number = int(value)
    if not low <= number <= high:
        raise ValueError(f"{where} = {number}; expected an integer from {low} to {high}")
    return number


def single(base: Mapping[str, Any]) -> dict[str, Any]:
    """The deployment of a box that lists none: the role's own names, nothing else set."""
    return {"name": str(base["container_name"]), "port": int(base["port"]), "priority": DEFAULT_PRIORITY,
            "state_dir": str(base["state_dir"]), "known_good_repository": str(base["known_good_repository"]),
            "master_port": int(base["master_port"]), "model_state_dir": str(base["model_state_dir"]),
            "settings": {}}


def _own_names(name: str, index: int, base: Mapping[str, Any]) -> dict[str, Any]:
    """Where a listed deployment keeps its state: the single deployment's places under its name, else its own."""
    if name == base["container_name"]:
        return {key: base[key] for key in ("state_dir", "known_good_repository", "model_state_dir")}
    parent = str(base["state_dir"]).rstrip("/").rsplit("/", 1)[0] or "/var/lib/sparkfleet"
    repository = str(base["known_good_repository"]).rsplit("/", 1)[0]
    # An image repository's name is lower case (the distribution spec's path components).
    return {"state_dir": f"{parent}/vllm-{name}", "known_good_repository": f"{repository}/{name.lower()}",
            "model_state_dir": f"{str(base['model_state_dir']).rstrip('/')}-{name}"}


def _item(index: int, raw: Any, count: int, base: Mapping[str, Any]) -> dict[str, Any]:
    where = f"vllm_deployments[{index}]"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} = {raw!r}; expected a mapping with at least name (and port, with more than one)")
    name = raw.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise ValueError(f"{where}.name = {name!r}; expected a Docker container name ([a-zA-Z0-9][a-zA-Z0-9_.-]*), "
                         "which the deployment's container is called")
    where = f"vllm_deployments[{index}] ({name})"
    unknown = sorted(set(raw) - set(IDENTITY) - set(PER_DEPLOYMENT))
    if unknown:
        hint = [f"vllm_{key} is box-wide" for key in unknown if key.startswith(("api_key", "host", "network"))]
        raise ValueError(f"{where} sets {', '.join(unknown)}, which a deployment cannot set. A deployment sets name, "
                         f"port, priority, state_dir, known_good_repository, master_port and these vllm role options "
                         f"without their vllm_ prefix: {', '.join(PER_DEPLOYMENT)}"
                         + (f" ({'; '.join(hint)})" if hint else ""))
    if "port" not in raw and count > 1:
        raise ValueError(f"{where} has no port: with more than one deployment on a box each needs its own API port "
                         "(host networking: the box's own port)")
    item = {"name": name, "port": _int(f"{where}.port", raw.get("port", base["port"]), 1, 65535),
            "priority": _int(f"{where}.priority", raw.get("priority", DEFAULT_PRIORITY), 0, 1000),
            **_own_names(name, index, base)}
    item["master_port"] = _int(f"{where}.master_port", raw.get("master_port", int(base["master_port"]) + index),
                               1, 65535)
    for key in ("state_dir", "known_good_repository"):
        if key in raw:
            item[key] = str(raw[key])
    item["settings"] = {key: raw[key] for key in PER_DEPLOYMENT if key in raw}
    return item


def _clashes(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """Two deployments of one box that would take the same container, port or state."""
    errors = []
    for key, what in (("name", "container name"), ("port", "port"), ("master_port", "master port"),
                      ("state_dir", "state directory"), ("known_good_repository", "known-good repository")):
        seen: dict[Any, str] = {}
        for item in items:
            if item[key] in seen:
                errors.append(f"vllm_deployments: {seen[item[key]]} and {item['name']} have the same {what} "
                              f"{item[key]}; each deployment of a box needs its own")
            seen.setdefault(item[key], item["name"])
    ports = {item["port"]: item["name"] for item in items}
    for item in items:
        if item["master_port"] in ports and len(items) > 1:
            errors.append(f"vllm_deployments: the master port {item['master_port']} of {item['name']} is the API "
                          f"port of {ports[item['master_port']]}")
    return errors


def resolve(deployments: Any, base: Mapping[str, Any]) -> dict[str, Any]:
    """vllm_deployments and the role's own names (container_name, port, state_dir, known_good_repository,
    master_port, model_state_dir; optionally cluster, sparkfleet.serving.cluster_of's answer for the box)
    -> {"deployments": [...], "errors": [...]}: each deployment with name, port,
    priority, state_dir, known_good_repository, master_port, model_state_dir and settings (the options it
    sets, without the vllm_ prefix)."""
    if deployments in (None, "", []):
        return {"deployments": [single(base)], "errors": []}
    if not isinstance(deployments, Sequence) or isinstance(deployments, (str, bytes)):
        return {"deployments": [], "errors": [f"vllm_deployments = {deployments!r}; expected a list of mappings"]}
    items, errors = [], []
    for index, raw in enumerate(deployments):
        try:
            items.append(_item(index, raw, len(deployments), base))
        except ValueError as exc:
            errors.append(str(exc))
    return {"deployments": items, "errors": errors + (_clashes(items) if not errors else []) + _in_cluster(items, base)}


def _in_cluster(items: Sequence[Mapping[str, Any]], base: Mapping[str, Any]) -> list[str]:
    """A cluster's members serve one model together, and the cluster's plan (ranks, master port, guard units) is made
    for the box's one container: a member that lists several deployments is refused rather than half planned."""
    cluster = base.get("cluster") or {}
    if not cluster or len(items) <= 1:
        return []
    return [f"the box is a member of the cluster {cluster.get('name', '?')} "
            f"({', '.join(map(str, cluster.get('members') or []))}) and lists {len(items)} deployments "
            f"({', '.join(item['name'] for item in items)}); a cluster member serves one model, its cluster's. List "
            "one deployment on the cluster's members, or take the box out of the cluster's group to serve several "
            "models on it"]


def dropped(recorded: Any, wanted: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The deployments the box's record names that the list no longer does (what the role took down last)."""
    names = {item["name"] for item in wanted}
    entries = recorded.get("deployments") if isinstance(recorded, Mapping) else None
    return [dict(entry) for entry in entries or [] if isinstance(entry, Mapping) and entry.get("name") not in names]


def _gib(value: float) -> str:
    return f"{value / 1073741824:.1f} GiB"


def admission(plans: Sequence[Mapping[str, Any]], mem_total: int, steady_percent: float | None,
              os_reserve: int, overhead: int) -> dict[str, Any]:
    """Every deployment's share of the box (its serving plan's figures: share = weights + activations + KV
    cache, plus the runtime's own overhead outside vLLM's share) added up against the watchdog's steady
    threshold, less what the OS keeps -> {"fits", "table", "used", "limit", "left"}."""
    rows, used = [], 0
    for plan in plans:
        share = int(plan["share"])
        used += share + overhead
        rows.append(f"  {plan['name']:<24} {_gib(share):>10} share (weights {_gib(plan['weights'])}, activations "
                    f"{_gib(plan['activations'])}, KV cache {_gib(plan['kv'])}) + runtime {_gib(overhead)}")
    limit = mem_total * (steady_percent if steady_percent else 100.0) / 100 - os_reserve
    what = f"the watchdog's steady threshold {steady_percent:g} %" if steady_percent else "MemTotal"
    table = "\n".join([
        f"MemTotal {_gib(mem_total)}; {what} less the OS's {_gib(os_reserve)} leaves {_gib(limit)} for vLLM:",
        *rows,
        f"  {'total':<24} {_gib(used):>10}; left {_gib(limit - used)}",
    ])
    return {"fits": used <= limit, "table": table, "used": used, "limit": int(limit), "left": int(limit - used)}
