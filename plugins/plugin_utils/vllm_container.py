# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether a running container is exactly the one the vllm role's docker_container task
would leave as it is, read from `docker container inspect` (its environment as the SHA-256 of
each value, key EnvSha256: the values never leave the box) and `docker image inspect` on the
controller.

The role's task (roles/vllm/tasks/container.yml) compares every option it sets strictly
(labels: the container may have more). When every one of them is already what the
container has, community.docker's check-mode pass would report no change: that module call
(the heaviest of a re-run) is then left out. Anything this comparison does not know for sure
(published ports, a size it cannot read, a key it does not expect) counts as different: the
module then decides, as before. So a wrong answer here can only cost the module call, never
hide a difference.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ansible_collections.sparkfleet.serving.plugins.module_utils.serving_plan import parse_size


def size_bytes(value: object) -> int | None:
    """docker_container's shm_size ("16g", "512m", 1024) -> bytes, read as the serving plan reads
    it (parse_size); None when it is not such a size."""
    if isinstance(value, bool):
        return None
    try:
        return parse_size(value)  # type: ignore[arg-type]
    except ValueError:
        return None


def _env_dict(entries: object) -> dict[str, str] | None:
    """Docker's ["K=V", ...] -> {K: V}; None when it is not such a list."""
    if entries is None:
        return {}
    if not isinstance(entries, list):
        return None
    out: dict[str, str] = {}
    for entry in entries:
        if not isinstance(entry, str) or "=" not in entry:
            return None
        key, _sep, value = entry.partition("=")
        out[key] = value
    return out


def _device_requests(gpus_all: bool) -> list[dict[str, Any]]:
    return [{"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}] if gpus_all else []


def _same_devices(found: object, gpus_all: bool) -> bool:
    wanted = _device_requests(gpus_all)
    found = found or []
    if not isinstance(found, list) or len(found) != len(wanted):
        return False
    for have, want in zip(found, wanted, strict=True):
        if not isinstance(have, dict) or any(have.get(key) != value for key, value in want.items()):
            return False
        if have.get("DeviceIDs") or have.get("Options"):
            return False
    return True


# Where the draft model of speculative decoding is mounted (plugins/plugin_utils/vllm_recipe.py, DRAFT_MODEL_PATH).
DRAFT_MOUNT_TARGET = "/draft"


def wanted_mounts(spec: dict) -> list[tuple[str, str]]:
    """(source, target) of the container's read-only bind mounts: the weights, and the draft model's when the
    deployment has one (its record's model.draft_dir)."""
    model = spec.get("model") or {}
    mounts = [(model.get("dir"), (spec.get("options") or {}).get("model_path"))]
    if model.get("draft_dir"):
        mounts.append((model["draft_dir"], DRAFT_MOUNT_TARGET))
    return mounts


def _same_mounts(found: object, wanted: list[tuple[str, str]]) -> bool:
    if not isinstance(found, list) or len(found) != len(wanted) or not all(isinstance(m, dict) for m in found):
        return False
    have = sorted((m.get("Type"), m.get("Source"), m.get("Target"), m.get("ReadOnly")) for m in found)
    return have == sorted(("bind", source, target, True) for source, target in wanted)


def differences(container: dict, image: dict, spec: dict, env: dict, image_ref: str) -> list[str]:
    """What differs between the container and what the role's task sets (empty: nothing)."""
    options = spec.get("options") or {}
    config = container.get("Config") or {}
    host = container.get("HostConfig") or {}
    state = container.get("State") or {}
    found: list[str] = []

    def differs(what: str, have: object, want: object) -> None:
        if have != want:
            found.append(f"{what}: {have!r} != {want!r}")

    differs("state", state.get("Status"), "running")
    differs("name", container.get("Name"), "/" + str(spec.get("container")))
    # image_name_mismatch (community.docker 4 default: recreate) and the image's id.
    differs("image name", config.get("Image"), image_ref)
    differs("image id", container.get("Image"), image.get("Id"))
    differs("command", config.get("Cmd"), list(spec.get("argv") or []))
    image_env = _env_dict((image.get("Config") or {}).get("Env"))
    have_env = _env_dict(container.get("EnvSha256"))
    if image_env is None or have_env is None:
        found.append("env: not a list of NAME=SHA-256")
    else:
        wanted = image_env | {str(k): str(v) for k, v in env.items()}
        hashed = {key: hashlib.sha256(value.encode("utf-8")).hexdigest() for key, value in wanted.items()}
        if have_env != hashed:
            # Names only: the values may be secrets (the API key).
            names = sorted(k for k in set(have_env) | set(hashed) if have_env.get(k) != hashed.get(k))
            found.append(f"env: {', '.join(names)} differ")
    differs("network mode", host.get("NetworkMode"), options.get("network_mode"))
    if options.get("published_ports"):
        found.append("published ports: compared by the module")
    elif host.get("PortBindings"):
        differs("published ports", host.get("PortBindings"), {})
    if not _same_mounts(host.get("Mounts"), wanted_mounts(spec)):
        found.append(f"mounts: {host.get('Mounts')!r}")
    differs("runtime", host.get("Runtime"), options.get("runtime"))
    if not _same_devices(host.get("DeviceRequests"), bool(options.get("gpus_all"))):
        found.append(f"device requests: {host.get('DeviceRequests')!r}")
    want_shm = size_bytes(options.get("shm_size"))
    if want_shm is None:
        found.append(f"shm size: {options.get('shm_size')!r} is not a size this comparison reads")
    else:
        differs("shm size", host.get("ShmSize"), want_shm)
    policy = host.get("RestartPolicy") or {}
    differs("restart policy", (policy.get("Name"), policy.get("MaximumRetryCount", 0)),
            (options.get("restart_policy"), 0))
    differs("stop timeout", config.get("StopTimeout"), int(options.get("stop_timeout") or 0))
    differs("privileged", host.get("Privileged"), False)
    labels = config.get("Labels") or {}
    for key, value in (options.get("labels") or {}).items():
        differs(f"label {key}", labels.get(key), str(value))
    return found
