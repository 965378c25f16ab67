# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sparkfleet-watchdog: stops watched Docker containers before unified memory runs out.

On a DGX Spark CPU and GPU share one pool of memory and cgroup limits do not see CUDA
allocations, so the only trustworthy signal is /proc/meminfo:
used% = (MemTotal - MemAvailable) / MemTotal. Of the watched containers that run, one at a
time is chosen to go first (Watchdog.choose: one loading, else the lowest priority, else
the last started). When used% stays above that container's threshold (a higher one during
the grace period after it started, to allow for weights loading and profiling; a hard
ceiling that acts at once), that container alone is stopped through the Docker Engine
API on its unix socket (`docker stop` frees every child process and Docker records a
manual stop, so `unless-stopped` does not bring it back), killed if memory has not
recovered by a deadline, and left alone for a cool-down; only then may the next one go.

Standard library only: runs on Ubuntu 24.04's python3 and Debian bookworm's python3.11.
One JSON line per state change and per action goes to stdout (the journal under systemd).
The /proc root, the Docker socket and the clock are injectable for deterministic tests.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # The daemon speaks plain HTTP over a unix socket: without this, http.client would
    # load OpenSSL (about 5 MB resident) for HTTPS it never uses.
    sys.modules.setdefault("ssl", None)  # type: ignore[arg-type]

import argparse
import ctypes
import dataclasses
import http.client
import json
import math
import os
import re
import resource
import select
import signal
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TextIO

VERSION = "1.0.0"
PROG = "sparkfleet-watchdog"
DEFAULT_CONFIG = "/etc/sparkfleet/watchdog.json"
EXIT_CONFIG = 2
EXIT_RUNTIME = 1

# Docker's own rule for container names (daemon/names.go); anything else cannot be watched.
NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")

# Global settings: name -> (default, minimum, maximum). Thresholds are percentages.
SETTINGS: dict[str, tuple[float, float, float]] = {
    "poll_fast_s": (0.05, 0.005, 0.1),
    "poll_slow_s": (1.0, 0.005, 1.0),
    "fill_rate_pct_per_s": (16.0, 0.1, 100.0),
    "samples_to_act": (3, 1, 100),
    "confirm_interval_s": (0.02, 0.001, 0.1),
    "hysteresis_pct": (1.0, 0.0, 20.0),
    "inspect_interval_s": (2.0, 0.1, 60.0),
    "docker_timeout_s": (5.0, 0.1, 120.0),
    "stop_timeout_s": (10, 0, 3600),
    "kill_after_s": (5.0, 0.1, 3600.0),
    "cooldown_s": (60.0, 0.0, 86400.0),
    "retry_s": (1.0, 0.05, 60.0),
    "textfile_interval_s": (15.0, 1.0, 3600.0),
}
INT_SETTINGS = {"samples_to_act", "stop_timeout_s"}
CONTAINER_DEFAULTS: dict[str, float] = {
    "startup_threshold": 96.0,
    "steady_threshold": 90.0,
    "ceiling": 98.0,
    "grace_s": 300.0,
}
# Which container goes first when memory runs short (see Watchdog.choose): the lowest priority, so a user
# ranks deployments by what they are worth keeping. Per container only: a role-wide default would rank nothing.
PRIORITY_DEFAULT, PRIORITY_MIN, PRIORITY_MAX = 100, 0, 1000
CONTAINER_KEYS = ("name", *CONTAINER_DEFAULTS, "priority")
TOP_KEYS = {"proc_root", "docker_socket", "dry_run", "textfile", "state_dir", "containers", *SETTINGS}
# Thresholds are percentages of MemTotal. Below this one a threshold cannot be meant: the
# shipped profile's weights alone (Qwen3.5-35B-A3B-FP8, 34.22 GiB) take 28% of a Spark's
# 121.7 GiB, so vLLM would be stopped while it loads; 0.9 is a fraction, not 90%.
MIN_THRESHOLD_PCT = 50.0
THRESHOLD_KEYS = ("startup_threshold", "steady_threshold", "ceiling")
# While meminfo cannot be read the watchdog is blind: it says so again this often.
BLIND_REMINDER_S = 60.0
# The measured rate of change of used% is an exponentially weighted average over time: a
# sample dt seconds after the previous one weighs 1 - exp(-dt / RATE_TAU_S), so a 1 s poll
# that sees a ramp sets the rate almost alone and 20 ms confirmation re-reads barely move it.
RATE_TAU_S = 0.25
# At the measured rate, sleep this fraction of the time memory needs to reach the threshold:
# the average lags a ramp that has just started or is speeding up, so sample at least twice
# before the predicted crossing.
RATE_LEAD = 0.5


class ConfigError(Exception):
    """The configuration cannot be used; the message says what and how to fix it."""


class DockerError(Exception):
    """The Docker Engine API could not be reached or answered with an error."""


@dataclass(frozen=True)
class ContainerConfig:
    name: str
    startup_threshold: float
    steady_threshold: float
    ceiling: float
    grace_s: float
    priority: int = PRIORITY_DEFAULT


@dataclass(frozen=True)
class Config:
    containers: tuple[ContainerConfig, ...]
    proc_root: str = "/proc"
    docker_socket: str = "/run/docker.sock"
    dry_run: bool = False
    textfile: str = ""
    # Where the stops in force are recorded (stopped/<container>.json); empty: not recorded.
    state_dir: str = ""
    poll_fast_s: float = 0.05
    poll_slow_s: float = 1.0
    fill_rate_pct_per_s: float = 16.0
    samples_to_act: int = 3
    confirm_interval_s: float = 0.02
    hysteresis_pct: float = 1.0
    inspect_interval_s: float = 2.0
    docker_timeout_s: float = 5.0
    stop_timeout_s: int = 10
    kill_after_s: float = 5.0
    cooldown_s: float = 60.0
    retry_s: float = 1.0
    textfile_interval_s: float = 15.0


# ----------------------------------------------------------------------------- config


def _number(where: str, value: Any, low: float, high: float, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where} = {value!r} is not a number; expected a number between {low:g} and {high:g}")
    if integer and int(value) != value:
        raise ConfigError(f"{where} = {value!r} is not a whole number; expected an integer from {low:g} to {high:g}")
    if not low <= value <= high:
        raise ConfigError(f"{where} = {value!r} is out of range; expected a value between {low:g} and {high:g}")
    return int(value) if integer else float(value)


def _check_threshold(where: str, value: float) -> None:
    """Refuses a threshold that would stop the container at once or while it loads."""
    if value < MIN_THRESHOLD_PCT:
        hint = (f"it looks like a fraction: write {value * 100:g} for {value * 100:g}%"
                if 0 < value <= 1 else "the container would be stopped as soon as it loads its model")
        raise ConfigError(
            f"{where} = {value:g} is a percentage of memory used and {value:g}% cannot be meant ({hint}); "
            f"expected a value between {MIN_THRESHOLD_PCT:g} and 100"
        )


def _container(index: int, raw: Any, defaults: dict[str, float]) -> ContainerConfig:
    where = f"containers[{index}]"
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} = {raw!r}; expected a container name or a mapping with at least 'name'")
    unknown = sorted(set(raw) - set(CONTAINER_KEYS))
    if unknown:
        raise ConfigError(f"{where} has unknown keys {unknown}; expected only {', '.join(CONTAINER_KEYS)}")
    name = raw.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ConfigError(
            f"{where}.name = {name!r} is not a Docker container name; "
            "expected letters, digits and _ . - (starting with a letter or digit)"
        )
    values = {}
    for key, default in defaults.items():
        high = 1e9 if key == "grace_s" else 100.0
        values[key] = _number(f"{where}.{key} ({name})", raw.get(key, default), 0.0, high)
    for key in THRESHOLD_KEYS:
        _check_threshold(f"{where}.{key} ({name})", values[key])
    if not values["steady_threshold"] <= values["startup_threshold"] <= values["ceiling"]:
        raise ConfigError(
            f"{where} ({name}): steady_threshold {values['steady_threshold']:g} <= startup_threshold "
            f"{values['startup_threshold']:g} <= ceiling {values['ceiling']:g} does not hold; the grace period may "
            "allow more memory than steady state and the hard ceiling is the highest; fix the thresholds "
            "(role variables watchdog_steady_threshold, watchdog_startup_threshold, watchdog_hard_ceiling)"
        )
    try:
        priority = int(_number(f"{where}.priority ({name})", raw.get("priority", PRIORITY_DEFAULT),
                               PRIORITY_MIN, PRIORITY_MAX, integer=True))
    except ConfigError as exc:
        raise ConfigError(f"{exc} (when memory runs short the lowest priority is stopped first; "
                          f"default {PRIORITY_DEFAULT})") from exc
    return ContainerConfig(name=name, priority=priority, **values)


def parse_config(raw: Any) -> Config:
    """Validates a decoded config document and returns the Config it describes."""
    if not isinstance(raw, dict):
        raise ConfigError(f"the config is a {type(raw).__name__}; expected a JSON object")
    # Keys starting with "_" are comments (the role notes that Ansible manages the file).
    unknown = sorted(key for key in set(raw) - TOP_KEYS - set(CONTAINER_DEFAULTS) if not str(key).startswith("_"))
    if unknown:
        raise ConfigError(f"unknown keys {unknown}; expected some of {sorted(TOP_KEYS | set(CONTAINER_DEFAULTS))}")
    values: dict[str, Any] = {}
    for key, (default, low, high) in SETTINGS.items():
        values[key] = _number(key, raw.get(key, default), low, high, integer=key in INT_SETTINGS)
    if values["poll_fast_s"] > values["poll_slow_s"]:
        raise ConfigError(
            f"poll_fast_s {values['poll_fast_s']:g} is above poll_slow_s {values['poll_slow_s']:g}; "
            "expected the fast (near-threshold) interval to be the shorter one"
        )
    if values["confirm_interval_s"] > values["poll_fast_s"]:
        raise ConfigError(
            f"confirm_interval_s {values['confirm_interval_s']:g} is above poll_fast_s {values['poll_fast_s']:g}; "
            "expected the re-reads that confirm a crossing to come no later than the next fast poll"
        )
    for key in ("proc_root", "docker_socket", "textfile", "state_dir"):
        value = raw.get(key, getattr(Config, key))
        if not isinstance(value, str) or (value and not value.startswith("/")):
            raise ConfigError(f"{key} = {value!r}; expected an absolute path")
        values[key] = value
    if not values["proc_root"] or not values["docker_socket"]:
        raise ConfigError("proc_root and docker_socket must not be empty; expected absolute paths")
    dry_run = raw.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise ConfigError(f"dry_run = {dry_run!r}; expected true or false")
    defaults = {key: raw.get(key, default) for key, default in CONTAINER_DEFAULTS.items()}
    containers = raw.get("containers", ["vllm"])
    if not isinstance(containers, list) or not containers:
        raise ConfigError(f"containers = {containers!r}; expected a non-empty list of containers to watch")
    parsed = tuple(_container(i, item, defaults) for i, item in enumerate(containers))
    names = [c.name for c in parsed]
    if len(set(names)) != len(names):
        raise ConfigError(f"containers lists a name twice ({names}); expected each container once")
    return Config(containers=parsed, dry_run=dry_run, **values)


def load_config(path: str) -> Config:
    try:
        with open(path, encoding="utf-8") as handle:
            raw = json.load(handle)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}; expected a readable JSON file") from exc
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc}); expected a JSON object") from exc
    try:
        return parse_config(raw)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


# ----------------------------------------------------------------------------- signals


@dataclass(frozen=True)
class MemSample:
    total_kib: int
    available_kib: int
    swap_total_kib: int = 0
    swap_free_kib: int = 0

    @property
    def used_pct(self) -> float:
        return 100.0 * (self.total_kib - self.available_kib) / self.total_kib


def read_meminfo(proc_root: str) -> MemSample:
    """The memory figures, read afresh (the file may be replaced between reads in tests)."""
    with open(os.path.join(proc_root, "meminfo"), "rb") as handle:
        data = handle.read(8192)
    fields: dict[bytes, int] = {}
    for line in data.split(b"\n"):
        key, _sep, rest = line.partition(b":")
        if key in (b"MemTotal", b"MemAvailable", b"SwapTotal", b"SwapFree"):
            number = rest.split()[:1]
            if not number or not number[0].isdigit():
                shown = line.decode("ascii", "replace").strip()
                raise ValueError(f"meminfo line {shown!r} has no number; expected '{key.decode()}: <kB> kB'")
            fields[key] = int(number[0])
    if fields.get(b"MemTotal", 0) <= 0 or b"MemAvailable" not in fields:
        raise ValueError("meminfo has no MemTotal/MemAvailable (kernel older than 3.14?)")
    if fields[b"MemAvailable"] > fields[b"MemTotal"]:
        raise ValueError(
            f"meminfo MemAvailable {fields[b'MemAvailable']} kB is above MemTotal {fields[b'MemTotal']} kB"
        )
    return MemSample(
        fields[b"MemTotal"], fields[b"MemAvailable"], fields.get(b"SwapTotal", 0), fields.get(b"SwapFree", 0)
    )


def read_psi(proc_root: str) -> dict[str, float] | None:
    """Memory pressure (PSI avg10 of 'some' and 'full'); logged, never used as the gate."""
    try:
        with open(os.path.join(proc_root, "pressure", "memory"), encoding="ascii") as handle:
            text = handle.read()
    except OSError:
        return None
    psi = {}
    for line in text.splitlines():
        kind, _sep, rest = line.partition(" ")
        for item in rest.split():
            key, _sep, value = item.partition("=")
            if key == "avg10":
                psi[f"psi_{kind}_avg10"] = float(value)
    return psi


class Clock:
    """Real time; tests pass a fake with the same three methods."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


# ----------------------------------------------------------------------------- docker


def parse_docker_time(text: str) -> float | None:
    """Docker's RFC 3339 time with nanoseconds (State.StartedAt) as epoch seconds."""
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", text or "")
    if not match:
        return None
    base = datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    if base.year <= 1:  # "0001-01-01T00:00:00Z": never started
        return None
    seconds = base.timestamp() + float("0." + (match.group(2) or "0"))
    zone = match.group(3)
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return seconds


def iso_time(epoch: float) -> str:
    """Epoch seconds as UTC RFC 3339 with milliseconds (what the stop record says)."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class ContainerState:
    running: bool
    started_at: float | None
    container_id: str = ""


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over the Docker socket: no fork/exec of the docker CLI on the hot path."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class PendingRequest:
    """A request whose answer is collected later, so the loop keeps sampling meanwhile
    (POST /stop blocks for up to its timeout while the container shuts down)."""

    def __init__(self, conn: UnixHTTPConnection, sent_at: float = 0.0) -> None:
        self.conn = conn
        self.sent_at = sent_at  # monotonic time the request was sent
        self.body = b""

    def poll(self) -> int | None:
        """The HTTP status once the answer is there (its body in self.body), else None.
        Never blocks long: Docker answers small JSON documents in one piece."""
        if self.conn.sock is None:
            raise DockerError("connection closed before the answer")
        readable = select.select([self.conn.sock], [], [], 0)[0]
        if not readable:
            return None
        try:
            response = self.conn.getresponse()
            self.body = response.read()
            return response.status
        except (OSError, http.client.HTTPException) as exc:
            raise DockerError(f"no answer: {exc}") from exc
        finally:
            self.conn.close()

    def close(self) -> None:
        self.conn.close()


class DockerAPI:
    def __init__(self, socket_path: str, timeout: float) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def _send(self, method: str, path: str) -> UnixHTTPConnection:
        conn = UnixHTTPConnection(self.socket_path, self.timeout)
        try:
            conn.request(method, path, headers={"Content-Length": "0"} if method == "POST" else {})
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise DockerError(f"{method} {path} via {self.socket_path}: {exc}") from exc
        return conn

    def _call(self, method: str, path: str) -> tuple[int, bytes]:
        conn = self._send(method, path)
        try:
            response = conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise DockerError(f"{method} {path}: {exc}") from exc
        finally:
            conn.close()

    def inspect(self, name: str) -> ContainerState | None:
        """None when there is no such container (idle, not an error)."""
        status, body = self._call("GET", f"/containers/{name}/json")
        return self.parse_inspect(name, status, body)

    def request_inspect(self, name: str, now: float) -> PendingRequest:
        """The same question, answered later (PendingRequest.poll, then parse_inspect)."""
        return PendingRequest(self._send("GET", f"/containers/{name}/json"), now)

    @staticmethod
    def parse_inspect(name: str, status: int, body: bytes) -> ContainerState | None:
        if status == 404:
            return None
        if status != 200:
            raise DockerError(f"inspect {name}: HTTP {status} {body[:200]!r}")
        try:
            doc = json.loads(body)
            state = doc["State"]
            return ContainerState(bool(state["Running"]), parse_docker_time(state.get("StartedAt", "")), doc["Id"])
        except (ValueError, KeyError, TypeError) as exc:
            raise DockerError(f"inspect {name}: unexpected answer ({exc})") from exc

    def request_stop(self, name: str, timeout_s: int) -> PendingRequest:
        return PendingRequest(self._send("POST", f"/containers/{name}/stop?t={timeout_s}"))

    def kill(self, name: str) -> int:
        status, body = self._call("POST", f"/containers/{name}/kill")
        if status not in (204, 404, 409):
            raise DockerError(f"kill {name}: HTTP {status} {body[:200]!r}")
        return status


# ----------------------------------------------------------------------------- watchdog

IDLE, ARMED, STOPPING, COOLDOWN = "idle", "armed", "stopping", "cooldown"
STATES = (IDLE, ARMED, STOPPING, COOLDOWN)
METRIC_PREFIX = "sparkfleet_watchdog_"


def _family(name: str, kind: str, text: str, samples: list[tuple[str, Any]]) -> list[str]:
    """One metric family in the Prometheus text format: HELP, TYPE, then a line per (labels, value)."""
    metric = METRIC_PREFIX + name
    lines = [f"# HELP {metric} {text}", f"# TYPE {metric} {kind}"]
    lines += [f"{metric}{{{labels}}} {value}" if labels else f"{metric} {value}" for labels, value in samples]
    return lines


@dataclass
class Watched:
    cfg: ContainerConfig
    state: str = IDLE
    docker: ContainerState | None = None
    # Monotonic time the inspection behind `docker` was sent (what Docker said is at least that recent), and the
    # inspection in flight, if any: the loop never waits for Docker's answer (see Watchdog.step).
    inspected_at: float = float("-inf")
    inspecting: PendingRequest | None = None
    inspect_sent: float = float("-inf")
    phase: str = ""
    trigger_threshold: float = 0.0
    action_started: float = 0.0
    pending: PendingRequest | None = None
    killed: bool = False
    stopped: bool = False
    recovered: bool = False
    stop_failed: bool = False
    cooldown_until: float = 0.0
    not_before: float = 0.0
    actions: dict[str, int] = field(default_factory=lambda: {"stop": 0, "kill": 0})
    stop_recorded_at: float | None = None  # epoch of the stop in force on record (state_dir), if any
    # Epoch of the stop in force (sent by this run, or on record from an earlier one) and of the last stop sent:
    # the textfile's stop_in_force and last_stop_timestamp_seconds, with or without a state_dir.
    stopped_since: float | None = None
    last_stop_at: float | None = None


class Watchdog:
    def __init__(self, config: Config, clock: Clock | None = None, docker: DockerAPI | None = None,
                 out: TextIO | None = None) -> None:
        self.cfg = config
        self.clock = clock or Clock()
        self.docker = docker or DockerAPI(config.docker_socket, config.docker_timeout_s)
        self.out = out or sys.stdout
        self.watched = [Watched(c) for c in config.containers]
        for w in self.watched:
            w.stop_recorded_at = w.stopped_since = w.last_stop_at = self._read_stop_record(w)
        self.sample: MemSample | None = None
        # The crossing being confirmed is the box's, not a container's: memory is one pool, and one container is
        # stopped per action (see choose). over_count counts consecutive samples over the threshold of the container
        # that would be stopped, in its phase (over_key); another container or phase starts the count again.
        self.over_count = 0
        self.over_key: tuple[str, str] | None = None
        self.confirming = False  # the last sample was over the threshold, more are needed to act
        self.not_before = 0.0  # a stop that Docker could not be asked for is tried again from then
        self.rate_pct_s = 0.0  # measured rate of change of used%, percentage points per second
        self.rate_from: tuple[float, float] | None = None  # (monotonic time, used%) of the last sample
        self.docker_ok: bool | None = None
        self.blind_since: float | None = None  # monotonic time meminfo became unreadable
        self.blind_reminded = 0.0
        self.docker_errors = 0
        self.textfile_due = 0.0
        self.textfile_failing = False
        self.dirty = True
        self.journal = "JOURNAL_STREAM" in os.environ

    # -- logging

    def log(self, event: str, level: int = 6, **fields: Any) -> None:
        """One JSON line: the event, memory figures and what was done."""
        record: dict[str, Any] = {"event": event}
        if self.sample is not None:
            record["used_pct"] = round(self.sample.used_pct, 2)
            record["mem_available_kib"] = self.sample.available_kib
            record["swap_used_kib"] = self.sample.swap_total_kib - self.sample.swap_free_kib
            psi = read_psi(self.cfg.proc_root)
            if psi:
                record.update(psi)
        record.update(fields)
        if self.cfg.dry_run:
            record["dry_run"] = True
        line = json.dumps(record, separators=(",", ":"), sort_keys=False)
        # Under systemd the "<N>" prefix sets the journal priority of the line.
        self.out.write(f"<{level}>{line}\n" if self.journal else line + "\n")
        self.out.flush()
        self.dirty = True

    # -- container state

    def threshold(self, w: Watched) -> tuple[str, float]:
        started = w.docker.started_at if w.docker else None
        if started is not None and self.clock.time() - started < w.cfg.grace_s:
            return "startup", w.cfg.startup_threshold
        return "steady", w.cfg.steady_threshold

    def _set_state(self, w: Watched, state: str, **fields: Any) -> None:
        if w.state != state:
            self.log("state", container=w.cfg.name, previous=w.state, state=state, **fields)
            w.state = state

    def _docker_failed(self, what: str, exc: Exception) -> None:
        self.docker_errors += 1
        if self.docker_ok is not False:
            self.log("docker_unavailable", level=3, what=what, error=str(exc), socket=self.cfg.docker_socket)
        self.docker_ok = False

    def _docker_answered(self) -> None:
        if self.docker_ok is False:
            self.log("docker_available", socket=self.cfg.docker_socket)
        self.docker_ok = True

    def inspect(self, w: Watched, now: float) -> None:
        """Asks Docker about the container and waits for the answer. Only for the
        first inspection of a container (the watchdog knows nothing yet, so nothing to act on is delayed):
        afterwards start_inspection and collect_inspection keep Docker off the loop's path."""
        w.inspect_sent = now
        try:
            found = self.docker.inspect(w.cfg.name)
        except DockerError as exc:
            self._docker_failed(f"inspect {w.cfg.name}", exc)
            return
        self.apply_inspection(w, found, now)

    def start_inspection(self, w: Watched, now: float) -> None:
        """Sends an inspection whose answer a later step collects. A Docker Engine that takes 300 ms to answer
        (a busy box) would otherwise hold the loop 300 ms, whatever memory does meanwhile."""
        w.inspect_sent = now
        try:
            w.inspecting = self.docker.request_inspect(w.cfg.name, now)
        except DockerError as exc:
            self._docker_failed(f"inspect {w.cfg.name}", exc)

    def collect_inspection(self, w: Watched, now: float) -> None:
        """Applies the answer to the inspection in flight if it has come (never waits for it)."""
        pending = w.inspecting
        if pending is None:
            return
        try:
            status = pending.poll()
            if status is None:
                if now - pending.sent_at <= self.cfg.docker_timeout_s:
                    return
                pending.close()
                raise DockerError(f"no answer within docker_timeout_s {self.cfg.docker_timeout_s:g}")
            found = self.docker.parse_inspect(w.cfg.name, status, pending.body)
        except DockerError as exc:
            w.inspecting = None
            self._docker_failed(f"inspect {w.cfg.name}", exc)
            return
        w.inspecting = None
        self.apply_inspection(w, found, pending.sent_at)

    def apply_inspection(self, w: Watched, found: ContainerState | None, sent_at: float) -> None:
        """What Docker said about the container (None: no such container): its state, phase and stop record."""
        w.inspected_at = sent_at
        self._docker_answered()
        before, w.docker = w.docker, found
        running = bool(found and found.running)
        if running:
            self._clear_stop_record(w, found.started_at)
            if w.stopped_since is not None and found.started_at is not None and found.started_at > w.stopped_since:
                w.stopped_since = None
                self.dirty = True
        if w.state in (STOPPING, COOLDOWN):
            return
        if not running:
            self._set_state(w, IDLE, present=found is not None)
            return
        restarted = before is not None and before.running and before.started_at != found.started_at
        phase, limit = self.threshold(w)
        # A container that stays armed keeps its phase here: evaluate() logs the end of its grace
        # period, which may fall on an inspection (setting it here would swallow that line).
        if restarted or w.state != ARMED:
            w.phase = phase
        if restarted:
            self.log("restarted", container=w.cfg.name, phase=w.phase, threshold=limit,
                     started_at=found.started_at)
        self._set_state(w, ARMED, phase=w.phase, threshold=limit, started_at=found.started_at)

    # -- the loop

    def step(self) -> float:
        """One sample and the decisions it leads to; returns how long to sleep."""
        now = self.clock.monotonic()
        try:
            sample = read_meminfo(self.cfg.proc_root)
        except (OSError, ValueError) as exc:
            self.blind(now, exc)
            return self.cfg.poll_slow_s
        self.sample = sample
        self.track_rate(now, sample.used_pct)
        if self.blind_since is not None:
            self.log("meminfo_ok", blind_s=round(now - self.blind_since, 1))
            self.blind_since = None
        for w in self.watched:
            self.collect_inspection(w, now)
            due = now - w.inspect_sent >= self.cfg.inspect_interval_s
            if w.state in (IDLE, ARMED) and w.inspecting is None and due:
                if w.inspected_at == float("-inf"):
                    self.inspect(w, now)
                else:
                    self.start_inspection(w, now)
            # This sample, even if the re-check before an action found meminfo unreadable.
            self.follow(w, sample, now)
        self.evaluate(sample, now)
        self.write_textfile(now)
        return self.cfg.poll_slow_s if self.blind_since is not None else self.next_interval(sample)

    def blind(self, now: float, exc: Exception) -> None:
        """meminfo cannot be read or parsed. Stopping vLLM on a figure the watchdog cannot
        trust would be worse than stopping it late, so nothing is stopped; but a blind
        watchdog must not look healthy: the error goes to the journal at once (priority
        err) and again every BLIND_REMINDER_S (crit) with how long it has lasted, the
        textfile says so, and meminfo is read again every poll_slow_s. (earlyoom exits on
        an unparsable meminfo; under systemd's Restart=always that would only restart into
        the same error, and a transient bad read would leave the box unwatched.)"""
        self.sample = None  # the last figures are stale: no log line may show them
        first = self.blind_since is None
        if first:
            self.blind_since = now
        if first or now - self.blind_reminded >= BLIND_REMINDER_S:
            self.blind_reminded = now
            self.log("meminfo_error", level=3 if first else 2, error=str(exc), proc_root=self.cfg.proc_root,
                     blind_s=round(now - (self.blind_since or now), 1),
                     action=f"nothing is stopped until meminfo reads again; retrying every {self.cfg.poll_slow_s:g} s")
        self.write_textfile(now)

    def track_rate(self, now: float, used: float) -> None:
        """Updates the measured rate of change of used% (time-weighted moving average)."""
        if self.rate_from is not None:
            then, before = self.rate_from
            dt = now - then
            if dt > 0:
                weight = 1.0 - math.exp(-dt / RATE_TAU_S)
                self.rate_pct_s += weight * ((used - before) / dt - self.rate_pct_s)
        self.rate_from = (now, used)

    def follow(self, w: Watched, sample: MemSample, now: float) -> None:
        """One container's own course: the end of its cool-down, its stop in progress, its phase while armed."""
        if w.state == COOLDOWN:
            if now >= w.cooldown_until:
                self.log("cooldown_over", container=w.cfg.name)
                w.state = IDLE
                self.start_inspection(w, now)  # armed again once Docker says the container runs
            return
        if w.state == STOPPING:
            self.progress(w, sample, now)
            return
        if w.state == ARMED:
            phase, limit = self.threshold(w)
            if phase != w.phase:
                self.log("phase", container=w.cfg.name, previous=w.phase, phase=phase, threshold=limit)
                w.phase = phase

    def acting_on(self) -> Watched | None:
        """The container of the action in progress (stopping, or cooling down after it), if any. Until it is over
        no other container is stopped: the memory a stop frees shows in MemAvailable only once the container's
        processes have exited and the driver has released their memory, and acting on the next container before
        then would stop two deployments for one overshoot."""
        return next((w for w in self.watched if w.state in (STOPPING, COOLDOWN)), None)

    def _started(self, w: Watched) -> tuple[float, int]:
        """Sort key: State.StartedAt (unknown counts as oldest), then the position in the config (the later one
        goes first on an exact tie, so the choice never depends on the order Docker answered in)."""
        started = w.docker.started_at if w.docker is not None else None
        return (started if started is not None else float("-inf"), self.watched.index(w))

    def choose(self) -> tuple[Watched, str] | None:
        """The one running container to stop if memory is over, and the rule that chose it:
        "loading": a container in its grace period (weights loading, profiling), the most recently started if
        several - the one whose memory is still growing, and the one that serves nobody yet;
        "priority": else the single lowest priority (the user ranks deployments by what they are worth keeping);
        "last_started": else, among those of the lowest priority, the most recently started (it has served the
        shortest and its clients have the least to lose);
        "only_running": a single container runs, not loading: there is nothing to choose from."""
        armed = [w for w in self.watched if w.state == ARMED]
        if not armed:
            return None
        loading = [w for w in armed if self.threshold(w)[0] == "startup"]
        if loading:
            return max(loading, key=self._started), "loading"
        if len(armed) == 1:
            return armed[0], "only_running"
        lowest = min(w.cfg.priority for w in armed)
        tied = [w for w in armed if w.cfg.priority == lowest]
        if len(tied) == 1:
            return tied[0], "priority"
        return max(tied, key=self._started), "last_started"

    def evaluate(self, sample: MemSample, now: float) -> None:
        """Decides for the box. It is over when used% is over the threshold (in its phase) or the hard ceiling of the
        container that would be stopped - not of any container: each container's thresholds say when it is to be
        stopped, which is what a single watched container always meant, and its grace period stays meaningful
        beside others (a deployment that starts beside one in steady state is allowed its startup threshold while
        it loads, rather than the other's steady one)."""
        self.confirming = False
        if self.acting_on() is not None or now < self.not_before:
            return
        choice = self.choose()
        if choice is None:
            self.over_count, self.over_key = 0, None
            return
        w, chosen_by = choice
        phase, limit = self.threshold(w)
        if (w.cfg.name, phase) != self.over_key:
            self.over_count, self.over_key = 0, (w.cfg.name, phase)
        used = sample.used_pct
        if used >= w.cfg.ceiling:
            self.act(now, "ceiling")
        elif used >= limit:
            self.over_count += 1
            if self.over_count == 1:
                self.log("over_threshold", level=4, container=w.cfg.name, chosen_by=chosen_by, phase=phase,
                         threshold=limit, rate_pct_per_s=round(self.rate_pct_s, 2))
                # Ask Docker now, while the crossing is confirmed: its answers (a restart meanwhile, hence a new
                # grace period and maybe another choice; a container stopped by someone else) are in before the
                # action if Docker answers within the confirmation, and the action never waits for them.
                for other in self.watched:
                    if other.state == ARMED and other.inspecting is None:
                        self.start_inspection(other, now)
            if self.over_count >= self.cfg.samples_to_act:
                self.act(now, "threshold")
            else:
                self.confirming = True
        elif used < limit - self.cfg.hysteresis_pct and self.over_count:
            self.log("below_threshold", container=w.cfg.name, phase=phase, threshold=limit, samples=self.over_count)
            self.over_count = 0

    def act(self, now: float, trigger: str) -> None:
        """Re-checks memory and what Docker last said about the running containers (a restart meanwhile changes the
        threshold and maybe the choice), chooses again, then stops that one container (or says it would). Docker's
        answers to the inspections sent when the crossing began count if they have come; the action does not wait
        for them (a busy Docker Engine answers in hundreds of milliseconds, in which memory rises 5% at 20 GB/s)."""
        decided = self.clock.monotonic()
        for other in self.watched:
            self.collect_inspection(other, now)
        choice = self.choose()
        if choice is None:
            self.over_count = 0
            return
        w, chosen_by = choice
        phase, steady_or_startup = self.threshold(w)
        limit = w.cfg.ceiling if trigger == "ceiling" else steady_or_startup
        try:
            self.sample = self.reread_meminfo()
        except (OSError, ValueError) as exc:
            self.blind(now, exc)
            return
        if self.sample.used_pct < limit:
            self.log("recheck_cleared", container=w.cfg.name, chosen_by=chosen_by, phase=phase, threshold=limit,
                     trigger=trigger)
            self.over_count = 0
            return
        w.trigger_threshold = min(limit, steady_or_startup)
        self.over_count, w.killed, w.stopped, w.recovered, w.stop_failed = 0, False, False, False, False
        w.action_started = now
        why = self._why(w, phase, limit, trigger, chosen_by)
        if self.cfg.dry_run:
            self.log("stop", level=4, container=w.cfg.name, **why, result="dry-run: not stopped")
            self._start_cooldown(w, now)
            return
        try:
            w.pending = self.docker.request_stop(w.cfg.name, self.cfg.stop_timeout_s)
        except DockerError as exc:
            self._docker_failed(f"stop {w.cfg.name}", exc)
            self.not_before = now + self.cfg.retry_s
            self.log("action_failed", level=3, container=w.cfg.name, action="stop", error=str(exc),
                     retry_in_s=self.cfg.retry_s)
            return
        w.actions["stop"] += 1
        self.state_stopping(w, why, decided)

    def _why(self, w: Watched, phase: str, limit: float, trigger: str, chosen_by: str) -> dict[str, Any]:
        """Why this container now, and why it and not another: for the stop line and the stop record."""
        others = [o.cfg.name for o in self.watched if o.state == ARMED and o is not w]
        return {"phase": phase, "threshold": limit, "trigger": trigger, "chosen_by": chosen_by,
                "priority": w.cfg.priority, "others_running": others}

    def reread_meminfo(self) -> MemSample:
        """The re-read just before acting (its own method: tests change memory at this very moment)."""
        return read_meminfo(self.cfg.proc_root)

    def state_stopping(self, w: Watched, why: dict[str, Any], decided: float) -> None:
        took_ms = round((self.clock.monotonic() - decided) * 1000, 1)
        # How old Docker's view of the container was when the watchdog acted on it.
        docker_age_ms = round((decided - w.inspected_at) * 1000, 1)
        self.log("stop", level=4, container=w.cfg.name, **why, rate_pct_per_s=round(self.rate_pct_s, 2),
                 stop_timeout_s=self.cfg.stop_timeout_s, result="requested", took_ms=took_ms,
                 docker_state_age_ms=docker_age_ms)
        w.state = STOPPING
        w.stopped_since = w.last_stop_at = self.clock.time()
        self._write_stop_record(w, why)

    # -- the stop in force, on record

    def _stop_record_path(self, w: Watched) -> str:
        return os.path.join(self.cfg.state_dir, "stopped", f"{w.cfg.name}.json")

    def _read_stop_record(self, w: Watched) -> float | None:
        """The time of the stop on record from an earlier run of the watchdog (it survives restarts and reboots)."""
        if not self.cfg.state_dir:
            return None
        try:
            with open(self._stop_record_path(w), encoding="utf-8") as handle:
                return float(json.load(handle)["stopped_at_epoch"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _write_stop_record(self, w: Watched, why: dict[str, Any]) -> None:
        """Records the stop, after it was sent (it costs the action nothing), for whoever would start the container
        again: a stop that Docker records as any manual one says here that the watchdog made it, and why. The
        sparkfleet.serving.vllm role does not start the container again with the same settings while it is in
        force; inspect() clears it once the container runs again, started after the stop."""
        if not self.cfg.state_dir:
            return
        now = self.clock.time()
        record: dict[str, Any] = {"container": w.cfg.name, "stopped_at": iso_time(now), "stopped_at_epoch": now,
                                  "steady_threshold": w.cfg.steady_threshold, **why}
        if self.sample is not None:
            record["used_pct"] = round(self.sample.used_pct, 2)
            record["mem_available_kib"] = self.sample.available_kib
        if w.docker is not None and w.docker.started_at is not None:
            record["container_started_at"] = iso_time(w.docker.started_at)
        path = self._stop_record_path(w)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(f"{path}.tmp", "w", encoding="utf-8") as handle:
                handle.write(json.dumps(record, sort_keys=True) + "\n")
            os.replace(f"{path}.tmp", path)
        except OSError as exc:
            self.log("record_error", level=3, container=w.cfg.name, path=path, error=str(exc))
            return
        w.stop_recorded_at = now
        self.log("stop_recorded", container=w.cfg.name, path=path)

    def _clear_stop_record(self, w: Watched, started_at: float | None) -> None:
        """A container running again, started after the stop on record, is no longer stopped by the watchdog."""
        if w.stop_recorded_at is None or started_at is None or started_at <= w.stop_recorded_at:
            return
        try:
            os.unlink(self._stop_record_path(w))
        except FileNotFoundError:
            pass
        except OSError as exc:
            self.log("record_error", level=3, container=w.cfg.name, path=self._stop_record_path(w), error=str(exc))
            return
        w.stop_recorded_at = None
        self.log("stop_cleared", container=w.cfg.name, started_at=iso_time(started_at))

    def progress(self, w: Watched, sample: MemSample, now: float) -> None:
        """Follows a stop in progress: Docker's answer, recovery, escalation to kill."""
        elapsed = now - w.action_started
        if not w.recovered and sample.used_pct < w.trigger_threshold:
            w.recovered = True
            self.log("recovered", container=w.cfg.name, took_ms=round(elapsed * 1000, 1))
        if w.pending is not None:
            try:
                status = w.pending.poll()
            except DockerError as exc:
                status = 0
                self.log("connection_lost", level=3, container=w.cfg.name, action="stop", error=str(exc))
            if status is not None:
                w.pending = None
                # 204 stopped, 304 was already stopped, 404 gone: nothing left to kill.
                w.stopped = status in (204, 304, 404)
                took_ms = round(elapsed * 1000, 1)
                if w.stopped:
                    self.log("stopped", container=w.cfg.name, action="stop", http_status=status, took_ms=took_ms)
                else:
                    # Docker refused or failed the stop: sending it again would only repeat the
                    # failure while memory runs out. The stop's deadline stands: kill once
                    # kill_after_s have passed since the stop, unless memory recovers meanwhile.
                    w.stop_failed = True
                    self.docker_errors += 1
                    kill_in = max(self.cfg.kill_after_s - elapsed, 0.0)
                    self.log("action_failed", level=3, container=w.cfg.name, action="stop", http_status=status,
                             took_ms=took_ms, next=f"kill in {kill_in:.2f} s unless memory recovers")
        if (not (w.recovered or w.stopped or w.killed) and elapsed >= self.cfg.kill_after_s
                and now >= w.not_before):
            self.escalate(w, now, elapsed)
        limit = self.cfg.stop_timeout_s + self.cfg.kill_after_s + self.cfg.docker_timeout_s
        if elapsed > limit:
            if w.pending is not None:
                w.pending.close()
                w.pending = None
            self.log("action_timeout", level=3, container=w.cfg.name, waited_s=round(elapsed, 1))
        if w.pending is None and (w.recovered or w.stopped or w.killed or elapsed > limit):
            self._start_cooldown(w, now)

    def escalate(self, w: Watched, now: float, elapsed: float) -> None:
        try:
            status = self.docker.kill(w.cfg.name)
        except DockerError as exc:
            self._docker_failed(f"kill {w.cfg.name}", exc)
            w.not_before = now + self.cfg.retry_s
            self.log("action_failed", level=3, container=w.cfg.name, action="kill", error=str(exc),
                     retry_in_s=self.cfg.retry_s)
            return
        w.killed = True
        w.actions["kill"] += 1
        if w.pending is not None:  # Docker answers the stop once the kill took effect
            w.pending.close()
            w.pending = None
        reason = "memory not recovered after stop" + (" (the stop failed)" if w.stop_failed else "")
        self.log("kill", level=3, container=w.cfg.name, reason=reason,
                 after_s=round(elapsed, 2), http_status=status, threshold=w.trigger_threshold)

    def _start_cooldown(self, w: Watched, now: float) -> None:
        w.cooldown_until = now + self.cfg.cooldown_s
        self._set_state(w, COOLDOWN, cooldown_s=self.cfg.cooldown_s)

    def next_interval(self, sample: MemSample) -> float:
        """How long to sleep. Over a threshold and short of samples_to_act: confirm_interval_s,
        not a whole poll period. Otherwise the time memory needs to reach the threshold
        of the container that would be stopped, clamped to [poll_fast_s, poll_slow_s], whichever is shorter of: at the
        fastest plausible fill rate (like earlyoom's sleep_time_ms: headroom / fill rate,
        rfjakob/earlyoom v1.9.0 main.c), which bounds what can happen unseen between two
        samples; and RATE_LEAD of it at the measured rate, which follows a ramp faster
        than that once a sample has seen it."""
        if self.confirming:
            return self.cfg.confirm_interval_s
        fast, slow = self.cfg.poll_fast_s, self.cfg.poll_slow_s
        # Stopping: follow the recovery closely (no kill if memory comes back). Cooling down: nothing is stopped
        # until it is over.
        if any(w.state == STOPPING for w in self.watched):
            return fast
        if self.acting_on() is not None:
            return slow
        choice = self.choose()
        if choice is None:
            return slow
        # The threshold that decides is the one of the container that would be stopped (see evaluate).
        headroom = self.threshold(choice[0])[1] - sample.used_pct
        ahead = headroom / self.cfg.fill_rate_pct_per_s
        if self.rate_pct_s > 0:
            ahead = min(ahead, RATE_LEAD * headroom / self.rate_pct_s)
        return min(slow, max(fast, ahead))

    # -- metrics

    def write_textfile(self, now: float) -> None:
        """Prometheus textfile (node_exporter's collector), replaced atomically (a temporary file in the same
        directory, renamed): on every change, else every textfile_interval_s. A directory that cannot be written
        (node_exporter not installed yet) is said once in the journal and tried again every textfile_interval_s."""
        if not self.cfg.textfile or (now < self.textfile_due and (self.textfile_failing or not self.dirty)):
            return
        self.dirty, self.textfile_due = False, now + self.cfg.textfile_interval_s
        tmp = f"{self.cfg.textfile}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write("\n".join(self.metrics()) + "\n")
            os.replace(tmp, self.cfg.textfile)
        except OSError as exc:
            if not self.textfile_failing:
                self.textfile_failing = True
                self.log("textfile_error", level=3, error=str(exc),
                         action=f"metrics not written; retrying every {self.cfg.textfile_interval_s:g} s")
            return
        if self.textfile_failing:
            self.textfile_failing = False
            self.log("textfile_ok", path=self.cfg.textfile)

    def metrics(self) -> list[str]:
        """The textfile's lines: the watchdog's health, memory, each container's thresholds, state and stops."""
        lines = _family("up", "gauge", "1 while the memory watchdog runs.", [("", 1)])
        lines += _family("dry_run", "gauge", "1 if the watchdog only logs what it would do.",
                         [("", int(self.cfg.dry_run))])
        lines += _family("docker_errors_total", "counter", "Failed Docker API calls.", [("", self.docker_errors)])
        lines += _family("meminfo_readable", "gauge", "0 while meminfo cannot be read: the watchdog stops nothing.",
                         [("", int(self.blind_since is None))])
        if self.sample is not None:
            lines += _family("memory_used_percent", "gauge", "(MemTotal - MemAvailable) / MemTotal.",
                             [("", f"{self.sample.used_pct:.3f}")])
        per = [(w, f'container="{w.cfg.name}"') for w in self.watched]
        lines += _family("threshold_percent", "gauge", "Threshold in force for the container (its phase's).",
                         [(c, f"{self.threshold(w)[1]:g}") for w, c in per])
        for key, name, text in (
            ("steady_threshold", "steady_threshold_percent", "Threshold after the grace period."),
            ("startup_threshold", "startup_threshold_percent", "Threshold during the grace period after a start."),
            ("ceiling", "ceiling_percent", "Hard ceiling: acted on at once, in any phase."),
            ("grace_s", "grace_seconds", "Grace period after the container starts."),
        ):
            lines += _family(name, "gauge", text, [(c, f"{getattr(w.cfg, key):g}") for w, c in per])
        lines += _family("priority", "gauge", "The container's priority: the lowest is stopped first (after one "
                         "loading).", [(c, w.cfg.priority) for w, c in per])
        choice = self.choose()
        lines += _family("next_to_stop", "gauge", "1 for the running container that would be stopped now if memory "
                         "were over its threshold.", [(c, int(choice is not None and choice[0] is w)) for w, c in per])
        lines += _family("phase_startup", "gauge", "1 while the container is in its grace period.",
                         [(c, int(self.threshold(w)[0] == "startup")) for w, c in per])
        lines += _family("state", "gauge", "Watch state of the container (1 for the current one).",
                         [(f'{c},state="{s}"', int(w.state == s)) for w, c in per for s in STATES])
        lines += _family("actions_total", "counter", "Stops and kills the watchdog did (since it started).",
                         [(f'{c},action="{a}"', n) for w, c in per for a, n in w.actions.items()])
        lines += _family("stop_in_force", "gauge",
                         "1 while a stop by the watchdog is in force (the container has not run again since).",
                         [(c, int(w.stopped_since is not None)) for w, c in per])
        lines += _family("last_stop_timestamp_seconds", "gauge", "When the watchdog last stopped the container.",
                         [(c, f"{w.last_stop_at:.3f}") for w, c in per if w.last_stop_at is not None])
        return lines

    def run(self) -> None:
        while True:
            self.clock.sleep(self.step())


# ----------------------------------------------------------------------------- process


def lock_memory() -> str:
    """mlockall so that the watchdog is not paged out when memory is short. ON_FAULT locks
    pages as they are used instead of reading in every mapped library at once; FUTURE only
    where the lock limit cannot make later allocations fail."""
    mcl_current, mcl_future, mcl_onfault = 1, 2, 4
    libc = ctypes.CDLL(None, use_errno=True)
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    with open("/proc/self/status", encoding="ascii") as handle:
        cap_eff = next((int(line.split()[1], 16) for line in handle if line.startswith("CapEff:")), 0)
    unlimited = soft == resource.RLIM_INFINITY or bool(cap_eff & (1 << 14))  # CAP_IPC_LOCK
    attempts = [(mcl_current | mcl_future | mcl_onfault, "current+future")] if unlimited else []
    attempts.append((mcl_current | mcl_onfault, "current"))
    errors = []
    for flags, label in attempts:
        if libc.mlockall(flags) == 0:
            return label
        errors.append(os.strerror(ctypes.get_errno()))
    return "not locked (" + "; ".join(errors) + f"; RLIMIT_MEMLOCK {soft} bytes, no CAP_IPC_LOCK)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=DEFAULT_CONFIG, help=f"JSON config file (default {DEFAULT_CONFIG})")
    parser.add_argument("--check-config", action="store_true", help="validate the config and exit")
    parser.add_argument("--dry-run", action="store_true", help="log what would be done, stop nothing")
    parser.add_argument("--no-mlock", action="store_true", help="do not lock memory (tests, benchmarks)")
    parser.add_argument("--version", action="version", version=f"{PROG} {VERSION}")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"{PROG}: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.check_config:
        described = ", ".join(
            f"{c.name} (startup {c.startup_threshold:g}% for {c.grace_s:g} s, steady {c.steady_threshold:g}%, "
            f"ceiling {c.ceiling:g}%)" for c in config.containers)
        if len(config.containers) > 1:
            ranks = ", ".join(f"{c.name} {c.priority}" for c in config.containers)
            described += (f"; one stopped at a time: one loading first, then the lowest priority ({ranks}), "
                          "then the last started")
        print(f"{PROG}: config OK: {args.config}: watching {described}")
        return 0
    if args.dry_run:
        config = dataclasses.replace(config, dry_run=True)
    # Self-test before the loop: a meminfo that does not exist (a wrong proc_root) will not
    # appear later, so refuse to start. One that exists but does not parse may be a passing
    # fault: start, and the loop reports it loudly and retries (see Watchdog.blind).
    first: MemSample | None = None
    try:
        first = read_meminfo(config.proc_root)
    except OSError as exc:
        print(f"{PROG}: cannot read {config.proc_root}/meminfo: {exc.strerror}; expected a Linux meminfo file",
              file=sys.stderr)
        return EXIT_RUNTIME
    except ValueError as exc:
        print(f"{PROG}: {config.proc_root}/meminfo: {exc}; starting anyway, nothing is stopped until it reads",
              file=sys.stderr)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    locked = "skipped" if args.no_mlock else lock_memory()
    dog = Watchdog(config)
    dog.sample = first
    dog.log("start", version=VERSION, pid=os.getpid(), mlock=locked, containers=[c.name for c in config.containers],
            docker_socket=config.docker_socket, proc_root=config.proc_root)
    try:
        dog.run()
    except (KeyboardInterrupt, SystemExit):
        dog.log("exit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
