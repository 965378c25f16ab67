# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure rules for managing keys of Docker's daemon.json (no I/O here).

daemon.json has several owners on a DGX box (the distribution, `nvidia-ctk runtime
configure`, the operator). These functions change only the keys they are given,
deep-merge objects such as `runtimes`, tell which changes Docker applies on SIGHUP, and
find options that are also given as dockerd flags in the systemd unit (dockerd refuses
to start when an option is set in both places).
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

# Keys dockerd re-reads on SIGHUP (`systemctl reload docker`) without touching running
# containers: the options handled by Daemon.Reload in moby's daemon/reload.go (20.10 and
# later) and listed under "Configuration reload behavior" in the dockerd reference. Any
# other key needs a restart. `runtimes` and `default-runtime` are reloaded by the
# platform part of Reload (daemon_unix.go reloadPlatform).
RELOADABLE_KEYS = frozenset(
    {
        "allow-nondistributable-artifacts",
        "authorization-plugins",
        "debug",
        "default-runtime",
        "insecure-registries",
        "labels",
        "live-restore",
        "max-concurrent-downloads",
        "max-concurrent-uploads",
        "max-download-attempts",
        "registry-mirrors",
        "runtimes",
        "shutdown-timeout",
    }
)

# Runtimes dockerd knows without a `runtimes` entry.
BUILTIN_RUNTIMES = frozenset({"runc", "io.containerd.runc.v2", "io.containerd.runtime.v1.linux"})

# dockerd flags whose daemon.json key has another name. Any other long flag `--name`
# maps to the key `name`.
FLAG_TO_KEY = {
    "host": "hosts",
    "H": "hosts",
    "D": "debug",
    "l": "log-level",
    "g": "data-root",
    "graph": "data-root",
    "s": "storage-driver",
    "b": "bridge",
    "G": "group",
    "p": "pidfile",
    "label": "labels",
    "registry-mirror": "registry-mirrors",
    "insecure-registry": "insecure-registries",
    "add-runtime": "runtimes",
    "log-opt": "log-opts",
    "storage-opt": "storage-opts",
    "exec-opt": "exec-opts",
    "dns-opt": "dns-opts",
    "default-ulimit": "default-ulimits",
    "authorization-plugin": "authorization-plugins",
    "allow-nondistributable-artifacts": "allow-nondistributable-artifacts",
    "default-address-pool": "default-address-pools",
    "node-generic-resource": "node-generic-resources",
    "cluster-store-opt": "cluster-store-opts",
    "tlscacert": "tlscacert",
}

# Flags that configure nothing daemon.json could hold.
IGNORED_FLAGS = frozenset({"config-file", "validate", "version", "v", "help"})

UNIT_DIRS = (
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/lib/systemd/system",
    "/usr/lib/systemd/system",
)


_MISSING = object()


class DaemonJsonError(ValueError):
    """daemon.json (or a value for it) cannot be used; the message says why."""


def parse_daemon_json(text: str, path: str) -> dict:
    """Return the object in daemon.json text; blank text is an empty configuration.

    Raises DaemonJsonError naming the file and the parse error when the text is not a
    JSON object or repeats a key (Go keeps the last one silently; we would lose one).
    """
    if not text.strip():
        return {}

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
        seen: dict = {}
        for key, value in pairs:
            if key in seen:
                raise DaemonJsonError(f"{path} is not usable: key {key!r} appears more than once in one object")
            seen[key] = value
        return seen

    try:
        data = json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as err:
        raise DaemonJsonError(
            f"{path} is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}. "
            "The file was left as it is; fix it (or move it away) and run again."
        ) from err
    if not isinstance(data, dict):
        found = type(data).__name__
        raise DaemonJsonError(f"{path} is not usable: expected a JSON object at the top level, found {found}")
    return data


def deep_merge(current: Any, wanted: Any) -> Any:
    """Merge wanted into current: objects merge key by key, anything else is replaced."""
    if isinstance(current, dict) and isinstance(wanted, dict):
        merged = copy.deepcopy(current)
        for key, value in wanted.items():
            merged[key] = deep_merge(merged[key], value) if key in merged else copy.deepcopy(value)
        return merged
    return copy.deepcopy(wanted)


def split_key_path(path: str) -> list[str]:
    """'runtimes.nvidia' -> ['runtimes', 'nvidia']; daemon.json keys hold no dots."""
    parts = path.split(".")
    if not all(parts):
        raise DaemonJsonError(f"cannot remove {path!r}: expected a key or a dotted key path such as runtimes.nvidia")
    return parts


def remove_keys(config: dict, paths: Iterable[str]) -> dict:
    """Return config without the given keys (dotted paths reach into objects)."""
    result = copy.deepcopy(config)
    for path in paths:
        *parents, last = split_key_path(path)
        node = result
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return result


def apply_changes(current: dict, settings: dict, remove: Iterable[str] = ()) -> dict:
    """The configuration after merging settings in and removing keys (removal last)."""
    return remove_keys(deep_merge(current, settings), remove)


def changed_keys(before: dict, after: dict) -> list[str]:
    """Top-level keys whose value differs (added, removed or changed), sorted."""
    return sorted(key for key in set(before) | set(after) if before.get(key, _MISSING) != after.get(key, _MISSING))


def reload_sufficient(before: dict, after: dict) -> bool:
    """True when SIGHUP applies every change.

    A reloadable key that is removed still needs a restart: Reload only copies values
    that are set in the file, so the daemon would keep the old value until restarted.
    """
    return all(key in RELOADABLE_KEYS and key in after for key in changed_keys(before, after))


def render(config: dict) -> str:
    """daemon.json text as nvidia-ctk and Docker's docs write it (4-space indent)."""
    return json.dumps(config, indent=4) + "\n"


def validate_registry_mirror(url: str) -> str | None:  # noqa: PLR0911 - one return per rule reads best
    """Return why url is not a usable registry mirror, or None when it is.

    Docker accepts an http(s) URL of a host (and port) only: no path, query, fragment
    or credentials (moby registry.ValidateMirror).
    """
    if not isinstance(url, str):
        return f"{url!r} is not a string"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as err:
        return f"{url!r} is not a URL ({err})"
    if parts.scheme not in ("http", "https"):
        return f"{url!r}: expected an http:// or https:// URL, found scheme {parts.scheme or 'none'!r}"
    if not parts.hostname:
        return f"{url!r}: no host name"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return f"{url!r}: a mirror is a host only (e.g. https://mirror.example.com); remove the path, query or fragment"
    if parts.username is not None or parts.password is not None:
        return f"{url!r}: credentials do not belong in the URL; use `docker login <mirror>` instead"
    return None


def check_values(config: dict, keys: Iterable[str]) -> list[str]:
    """Problems with the values of the given keys that this module knows the shape of.

    Only keys being changed are checked: what dockerd already runs with is its business.
    """
    keys = set(keys)
    problems = []
    if "registry-mirrors" in keys and "registry-mirrors" in config:
        mirrors = config["registry-mirrors"]
        if not isinstance(mirrors, list):
            problems.append(f"registry-mirrors must be a list of URLs, found {type(mirrors).__name__}")
        else:
            problems.extend(f"registry-mirrors: {why}" for why in map(validate_registry_mirror, mirrors) if why)
    runtimes = config.get("runtimes", {})
    if "runtimes" in keys and "runtimes" in config:
        if not isinstance(runtimes, dict):
            problems.append(f"runtimes must be an object of runtime names, found {type(runtimes).__name__}")
        else:
            for name, spec in runtimes.items():
                if not isinstance(spec, dict) or not isinstance(spec.get("path"), str) or not spec["path"]:
                    example = '{"path": "nvidia-container-runtime"}'
                    problems.append(f"runtimes.{name} needs a non-empty 'path' (e.g. {example})")
    default = config.get("default-runtime")
    known = BUILTIN_RUNTIMES | (set(runtimes) if isinstance(runtimes, dict) else set())
    if "default-runtime" in keys and default is not None and default not in known:
        problems.append(f"default-runtime {default!r} is not one of the runtimes in daemon.json")
    return problems


# --- dockerd flags given in the systemd unit --------------------------------------


def _unit_lines(text: str) -> list[str]:
    """Logical lines of a unit file: continuations joined, comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#;"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def effective_service(files: list[tuple[str, str]]) -> tuple[list[str], dict[str, str], list[str]]:
    """ExecStart command lines, Environment and EnvironmentFile paths of a service.

    files are (path, text) in systemd's order: the unit file, then drop-ins. An empty
    `ExecStart=` resets the list, as systemd does; the last assignment wins.
    """
    exec_start: list[str] = []
    environment: dict[str, str] = {}
    env_files: list[str] = []
    for _path, text in files:
        section = ""
        for line in _unit_lines(text):
            if line.startswith("["):
                section = line
                continue
            if section != "[Service]" or "=" not in line:
                continue
            key, value = (part.strip() for part in line.split("=", 1))
            if key == "ExecStart":
                exec_start = [value] if value else []
            elif key == "Environment":
                for item in shlex.split(value):
                    name, val = item.split("=", 1) if "=" in item else (item, "")
                    environment[name] = val
            elif key == "EnvironmentFile":
                env_files = [] if not value else [*env_files, value]
    return exec_start, environment, env_files


def parse_env_file(text: str) -> dict[str, str]:
    """KEY=VALUE lines of an EnvironmentFile (quotes removed)."""
    env = {}
    for line in _unit_lines(text):
        name, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name.strip()):
            parts = shlex.split(value) if value.strip() else []
            env[name.strip()] = " ".join(parts)
    return env


def expand(command: str, env: dict[str, str]) -> list[str]:
    """Split an ExecStart value as systemd does for what matters here: $VAR expands to
    words, ${VAR} to one word; unknown variables expand to nothing."""
    command = command.lstrip("-@+!:")
    words: list[str] = []
    for word in shlex.split(command):
        whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if whole:
            words.extend(env.get(whole.group(1), "").split())
            continue
        words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), word))
    return words


def flag_keys(argv: list[str]) -> dict[str, str]:
    """daemon.json keys that dockerd flags in argv set: {key: flag as written}."""
    keys: dict[str, str] = {}
    for word in argv[1:]:
        if not word.startswith("-") or word in ("-", "--"):
            continue
        name = word.lstrip("-").split("=", 1)[0]
        if word.startswith("--"):
            names = [name]
        elif len(name) > 1 and name[1:2] != "=":
            # -Dl warn style bundles; -Hunix:///x is -H with a value.
            names = [name[0]] if name[0] in ("H", "g", "l", "s", "b", "G", "p") else list(name)
        else:
            names = [name]
        for flag in names:
            if flag in IGNORED_FLAGS:
                continue
            keys.setdefault(FLAG_TO_KEY.get(flag, flag), word.split("=", 1)[0])
    return keys


def find_flag_conflicts(config: dict, argv: list[str]) -> list[str]:
    """Keys set both in config and as dockerd flags, as readable sentences."""
    return [
        f"{key!r} is set in daemon.json and as the dockerd flag {flag} in the service's ExecStart"
        for key, flag in sorted(flag_keys(argv).items())
        if key in config
    ]


def unit_file_order(service: str, existing: Iterable[str], dirs: Iterable[str] = UNIT_DIRS) -> list[str]:
    """Which of the existing paths systemd reads for service, in order.

    The first unit file found in UNIT_DIRS (highest priority first) is the unit; drop-ins
    from every directory apply in the order of their file names.
    """
    existing = set(existing)
    dirs = list(dirs)
    unit = next((f"{d}/{service}" for d in dirs if f"{d}/{service}" in existing), None)
    if unit is None:
        return []
    dropins: dict[str, str] = {}
    for directory in reversed(dirs):
        prefix = f"{directory}/{service}.d/"
        for path in sorted(p for p in existing if p.startswith(prefix) and p.endswith(".conf")):
            dropins[path[len(prefix) :]] = path  # a higher-priority directory masks the same name
    return [unit] + [dropins[name] for name in sorted(dropins)]
