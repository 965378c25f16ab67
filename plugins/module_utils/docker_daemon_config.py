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
import difflib
import json
import math
import re
import shlex
from collections.abc import Callable, Iterable
from decimal import Decimal
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


# What daemon.json must be, for the messages about a file that cannot be read as one.
DAEMON_JSON_WHAT = "the daemon.json file, UTF-8 JSON as dockerd reads it (left as it is)"


class DaemonJsonError(ValueError):
    """daemon.json (or a value for it) cannot be used; the message says why."""


class JsonNumber:
    """A number from daemon.json, kept as the literal text it was written with.

    Python's float cannot hold every JSON number (1e400 becomes inf, which json.dumps
    writes as Infinity, which no JSON parser accepts) and would reformat others (1.10 ->
    1.1). A foreign key's number is written back exactly as it was read. It compares
    equal to the same value given as an int or a float, so re-setting a key to its
    current value is no change.
    """

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def decimal(self) -> Decimal:
        return Decimal(self.text)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, JsonNumber):
            return self.decimal() == other.decimal()
        if isinstance(other, bool) or not isinstance(other, (int, float)):
            return NotImplemented
        if isinstance(other, float) and not math.isfinite(other):
            return False
        return self.decimal() == Decimal(other)

    def __hash__(self) -> int:
        return hash(self.decimal())

    def __repr__(self) -> str:
        return self.text

    def is_integer(self) -> bool:
        return re.fullmatch(r"-?\d+", self.text) is not None

    def plain(self) -> int | float | str:
        """The value as Python has it: int, finite float, else the literal text."""
        if self.is_integer():
            return int(self.text)
        value = float(self.text)
        return value if math.isfinite(value) else self.text


def _refuse_constant(path: str) -> Callable[[str], None]:
    def refuse(name: str) -> None:
        raise DaemonJsonError(
            f"{path} is not usable: it holds {name}, which is not JSON (dockerd's parser refuses it). "
            "The file was left as it is; fix that value and run again."
        )

    return refuse


def parse_daemon_json(text: str, path: str) -> dict:
    """Return the object in daemon.json text; blank text is an empty configuration.

    Numbers are kept as JsonNumber (their literal text). Raises DaemonJsonError naming
    the file and the parse error when the text is not a JSON object, repeats a key (Go
    keeps the last one silently; we would lose one) or holds NaN / Infinity.
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
        data = json.loads(
            text,
            object_pairs_hook=no_duplicates,
            parse_float=JsonNumber,
            parse_int=JsonNumber,
            parse_constant=_refuse_constant(path),
        )
    except json.JSONDecodeError as err:
        raise DaemonJsonError(
            f"{path} is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}. "
            "The file was left as it is; fix it (or move it away) and run again."
        ) from err
    except RecursionError as err:
        raise DaemonJsonError(f"{path} is not usable: its objects are nested too deeply to read") from err
    if not isinstance(data, dict):
        found = type(data).__name__
        found = "number" if isinstance(data, JsonNumber) else found
        raise DaemonJsonError(f"{path} is not usable: expected a JSON object at the top level, found {found}")
    return data


def plain(value: Any) -> Any:
    """The configuration with JsonNumber turned into int / float (or text when too large): for results."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, JsonNumber):
        return value.plain()
    return value


def json_problems(value: Any, where: str) -> list[str]:
    """Why value cannot be written as strict JSON (NaN, Infinity, a non-JSON type), by key path."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{where}: found {value}, which JSON cannot hold (dockerd refuses NaN and Infinity); give a number"]
    if value is None or isinstance(value, (str, bool, int, float, JsonNumber)):
        return []
    if isinstance(value, dict):
        problems = []
        for key, item in value.items():
            if not isinstance(key, str):
                problems.append(f"{where}: key {key!r} is a {type(key).__name__}; JSON keys are strings")
                continue
            problems += json_problems(item, f"{where}.{key}")
        return problems
    if isinstance(value, (list, tuple)):
        return [p for index, item in enumerate(value) for p in json_problems(item, f"{where}[{index}]")]
    return [f"{where}: found a {type(value).__name__}, which is not a JSON value"]


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


def _render_string(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (\ud800 in the file) has no UTF-8 form: keep it escaped.
        return json.dumps(text)
    return json.dumps(text, ensure_ascii=False)


def _render(value: Any, level: int) -> str:  # noqa: PLR0911 - one return per JSON type
    pad, inner = " " * 4 * level, " " * 4 * (level + 1)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{inner}{_render_string(key)}: {_render(item, level + 1)}" for key, item in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        return "[\n" + ",\n".join(f"{inner}{_render(item, level + 1)}" for item in value) + f"\n{pad}]"
    if isinstance(value, JsonNumber):
        return value.text
    if isinstance(value, str):
        return _render_string(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise DaemonJsonError(f"refusing to write {value}: JSON has no NaN or Infinity")
    return json.dumps(value)


def render(config: dict) -> str:
    """daemon.json text as nvidia-ctk and Docker's docs write it (4-space indent).

    Strict JSON only: foreign numbers come back as they were written (JsonNumber), text
    stays UTF-8 (no \\u escapes for non-ASCII), NaN and Infinity are refused.
    """
    return _render(config, 0) + "\n"


_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?)*\.?")
_IPV6 = re.compile(r"[0-9A-Fa-f:.]+(%[A-Za-z0-9._~-]+)?")


def validate_registry_mirror(url: str) -> str | None:  # noqa: PLR0911 - one return per rule reads best
    """Return why url is not a usable registry mirror, or None when it is.

    Docker accepts an http(s) URL of a host (and port) only: no path (Docker 20.10 refuses
    one), query, fragment or credentials (moby registry.ValidateMirror, v20.10.24
    registry/config.go and docker-v29.7.2 daemon/pkg/registry/config.go).
    """
    if not isinstance(url, str):
        return f"{url!r} is a {type(url).__name__}; expected a URL string such as https://mirror.example.com"
    if "://" not in url or url.startswith("://"):
        # urlsplit reads "mirror.example.com:5000" as scheme "mirror.example.com": say what is missing.
        return f"{url!r}: no scheme; expected an http:// or https:// URL such as https://{url or 'mirror.example.com'}"
    if re.search(r"\s", url):
        return f"{url!r}: contains white space; expected a URL such as https://mirror.example.com"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as err:
        return f"{url!r} is not a URL ({err})"
    if parts.scheme not in ("http", "https"):
        return f"{url!r}: expected an http:// or https:// URL, found scheme {parts.scheme!r}"
    if parts.username is not None or parts.password is not None:
        return f"{url!r}: credentials do not belong in the URL; use `docker login <mirror>` instead"
    host = parts.hostname or ""
    if not host:
        return f"{url!r}: no host name"
    if not (_HOST.fullmatch(host) or (":" in host and _IPV6.fullmatch(host))):
        return f"{url!r}: {host!r} is not a host name (letters, digits, '-' and '.') or an IP address"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return f"{url!r}: a mirror is a host only (e.g. https://mirror.example.com); remove the path, query or fragment"
    return None


# Top-level daemon.json keys dockerd reads, with their Go types: the json tags of the Config
# structs in moby v20.10.24 (Debian 12's docker.io: daemon/config/config.go,
# config_common_unix.go, config_unix.go, registry/config.go) and docker-v29.7.2
# (daemon/config/config.go, config_linux.go, daemon/pkg/registry/config.go).
# "any" where the value is not checked here.
KEY_TYPES: dict[str, str] = {
    **dict.fromkeys(
        (
            "allow-direct-routing", "cri-containerd", "debug", "experimental", "icc", "init", "ip-forward",
            "ip-forward-no-drop", "ip-masq", "ip6tables", "iptables", "ipv6", "live-restore", "no-new-privileges",
            "raw-logs", "rootless", "selinux-enabled", "tls", "tlsverify", "userland-proxy",
        ),
        "bool",
    ),
    **dict.fromkeys(
        (
            "cpu-rt-period", "cpu-rt-runtime", "default-stop-timeout", "max-concurrent-downloads",
            "max-concurrent-uploads", "max-download-attempts", "mtu", "network-control-plane-mtu",
            "network-diagnostic-port", "oom-score-adjust", "shutdown-timeout", "swarm-raft-election-tick",
            "swarm-raft-heartbeat-tick",
        ),
        "int",
    ),
    **dict.fromkeys(
        (
            "allow-nondistributable-artifacts", "authorization-plugins", "cdi-spec-dirs", "dns", "dns-opts",
            "dns-search", "exec-opts", "host-gateway-ips", "hosts", "insecure-registries", "labels",
            "node-generic-resources", "registry-mirrors", "storage-opts",
        ),
        "list of strings",
    ),
    **dict.fromkeys(
        (
            "api-cors-header", "bip", "bip6", "bridge", "bridge-accept-fwmark", "cgroup-parent", "cluster-advertise",
            "cluster-store", "containerd", "containerd-namespace", "containerd-plugin-namespace", "data-root",
            "default-cgroupns-mode", "default-gateway", "default-gateway-v6", "default-init", "default-ipc-mode",
            "default-runtime", "default-shm-size", "exec-root", "firewall-backend", "fixed-cidr", "fixed-cidr-v6",
            "graph", "group", "host-gateway-ip", "http-proxy", "https-proxy", "init-path", "ip", "log-driver",
            "log-format", "log-level", "metrics-addr", "min-api-version", "no-proxy", "pidfile", "resolv-conf",
            "seccomp-profile", "storage-driver", "swarm-default-advertise-addr", "tlscacert", "tlscert", "tlskey",
            "userland-proxy-path", "userns-remap",
        ),
        "string",
    ),
    **dict.fromkeys(("log-opts", "cluster-store-opts"), "object of strings"),
    "features": "object of booleans",
    **dict.fromkeys(
        (
            "builder", "default-address-pools", "default-network-opts", "default-ulimits", "deprecated-key-path",
            "nri-opts", "proxies", "runtimes",
        ),
        "any",
    ),
}  # fmt: skip


def _type_problem(key: str, value: Any) -> str | None:
    kind = KEY_TYPES.get(key, "any")
    found = "a number" if isinstance(value, JsonNumber) else f"{value!r} ({type(value).__name__})"
    ok = {
        "bool": lambda v: isinstance(v, bool),
        "int": lambda v: (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, JsonNumber) and v.is_integer()),
        "string": lambda v: isinstance(v, str),
        "list of strings": lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v),
        "object of strings": lambda v: isinstance(v, dict) and all(isinstance(i, str) for i in v.values()),
        "object of booleans": lambda v: isinstance(v, dict) and all(isinstance(i, bool) for i in v.values()),
    }.get(kind, lambda v: True)
    if ok(value):
        return None
    hint = ' (quote numbers: "max-file": "3")' if kind == "object of strings" else ""
    return f"{key}: found {found}, expected a {kind}{hint} (dockerd cannot read it into its configuration)"


def suggest_key(key: str) -> str | None:
    """For a key dockerd does not know that looks like a mistake: the key meant, or None."""
    if key in KEY_TYPES:
        return None
    if "." in key:
        first = key.split(".", 1)[0]
        return first if first in KEY_TYPES else (difflib.get_close_matches(first, KEY_TYPES, 1, 0.8) or [""])[0]
    bare = key.lstrip("-")
    candidates = [FLAG_TO_KEY.get(bare), bare.lower().replace("_", "-")]
    for candidate in candidates:
        if candidate and candidate in KEY_TYPES and candidate != key:
            return candidate
    close = difflib.get_close_matches(bare.lower(), KEY_TYPES, 1, 0.85)
    return close[0] if close else None


def check_keys(settings: dict) -> tuple[list[str], list[str]]:
    """(problems, warnings) about the top-level keys given to set.

    A key that is a dockerd flag name (registry-mirror), a dotted path (log-opts.max-size)
    or a near miss of a known key is a mistake: dockerd ignores a flag name in the file and
    refuses other unknown keys at start-up ("the following directives don't match any
    configuration option", moby daemon/config/config.go findConfigurationConflicts), and
    Debian's dockerd 20.10 cannot --validate. Any other unknown key may come from a newer
    Docker: a warning.
    """
    problems, warnings = [], []
    for key in settings:
        if key in KEY_TYPES:
            continue
        meant = suggest_key(key)
        if "." in key:
            first, rest = key.split(".", 1)
            shown = meant or first
            problems.append(
                f"settings key {key!r}: daemon.json nests objects instead of dotted keys; set "
                f"{{{shown!r}: {{{rest!r}: ...}}}} (dockerd refuses {key!r} at start-up)"
            )
        elif meant:
            problems.append(f"settings key {key!r} is not a daemon.json key; did you mean {meant!r}?")
        else:
            warnings.append(
                f"settings key {key!r} is not a daemon.json key of Docker 20.10 to 29.7; dockerd refuses keys it "
                "does not know at start-up"
            )
    return problems, warnings


def check_runtime(name: str, spec: Any) -> list[str]:  # noqa: PLR0911 - one return per dockerd rule
    """A runtimes entry as dockerd reads it (moby docker-v29.7.2 daemon/runtime_unix.go setupRuntimes)."""
    if name == "runc":
        return ["runtimes.runc: the name 'runc' is reserved by dockerd; choose another name"]
    if not isinstance(spec, dict):
        return [f"runtimes.{name}: found {type(spec).__name__}, expected an object such as {{\"path\": \"...\"}}"]
    path, kind = spec.get("path"), spec.get("runtimeType")
    problems = [
        f"runtimes.{name}.{field}: found {type(spec[field]).__name__}, expected a string"
        for field in ("path", "runtimeType")
        if field in spec and not isinstance(spec[field], str)
    ]
    if problems:
        return problems
    if not path and not kind:
        example = '{"path": "nvidia-container-runtime"}'
        return [f"runtimes.{name} needs a non-empty 'path' or 'runtimeType' (e.g. {example})"]
    if path and kind:
        return [f"runtimes.{name}: 'path' and 'runtimeType' exclude each other; keep one"]
    if path and spec.get("options"):
        return [f"runtimes.{name}: 'options' go with a 'runtimeType', not with a 'path'"]
    if kind and spec.get("runtimeArgs"):
        return [f"runtimes.{name}: 'runtimeArgs' go with a 'path', not with a 'runtimeType'"]
    args = spec.get("runtimeArgs", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return [f"runtimes.{name}.runtimeArgs: expected a list of strings, found {args!r}"]
    if "options" in spec and not isinstance(spec["options"], dict):
        return [f"runtimes.{name}.options: expected an object, found {type(spec['options']).__name__}"]
    return []


def check_values(config: dict, keys: Iterable[str], before: dict | None = None) -> list[str]:
    """Problems with the values of the given keys that this module knows the shape of.

    Only keys being changed are checked, and of runtimes only the entries that change:
    what dockerd already runs with is its business.
    """
    keys = set(keys)
    before = before or {}
    problems = [why for key in sorted(keys) if key in config for why in [_type_problem(key, config[key])] if why]
    if "registry-mirrors" in keys and isinstance(config.get("registry-mirrors"), list):
        mirrors = config["registry-mirrors"]
        problems.extend(f"registry-mirrors: {why}" for why in map(validate_registry_mirror, mirrors) if why)
    runtimes = config.get("runtimes", {})
    if "runtimes" in keys and "runtimes" in config:
        if not isinstance(runtimes, dict):
            problems.append(f"runtimes must be an object of runtime names, found {type(runtimes).__name__}")
        else:
            old = before.get("runtimes") if isinstance(before.get("runtimes"), dict) else {}
            for name, spec in runtimes.items():
                if name not in old or old[name] != spec:
                    problems += check_runtime(name, spec)
    default = config.get("default-runtime")
    known = BUILTIN_RUNTIMES | (set(runtimes) if isinstance(runtimes, dict) else set())
    if "default-runtime" in keys and isinstance(default, str) and default not in known:
        problems.append(f"default-runtime {default!r} is not one of the runtimes in daemon.json")
    return problems


# --- dockerd flags given in the systemd unit --------------------------------------


def _words(text: str) -> list[str]:
    """shlex words; a line with an unbalanced quote (systemd would log and skip it) splits on blanks."""
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


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
                for item in _words(value):
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
            parts = _words(value) if value.strip() else []
            env[name.strip()] = " ".join(parts)
    return env


def expand(command: str, env: dict[str, str]) -> list[str]:
    """Split an ExecStart value as systemd does for what matters here: $VAR expands to
    words, ${VAR} to one word; unknown variables expand to nothing."""
    command = command.lstrip("-@+!:")
    words: list[str] = []
    for word in _words(command):
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
