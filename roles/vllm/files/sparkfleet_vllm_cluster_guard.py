# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sparkfleet-vllm-cluster-guard: stops a cluster worker's vLLM container once its head is gone.

A worker of a vLLM cluster runs `vllm serve ... --nnodes N --node-rank R --master-addr A --master-port P
--headless`. When the head goes away (killed, crashed, stopped by the memory watchdog, its box powered off),
the headless worker does not notice: its worker process waits on the head's message queue for work that
never comes (run_headless, vllm/entrypoints/cli/serve.py, vLLM 0.19.1), and the cluster stays half up until
someone acts. This program, run by systemd on the worker (the vllm role's
sparkfleet-vllm-cluster-guard@<container>.service), acts instead:

- While the container runs, every --interval seconds it opens a TCP connection to the head's master port
  (A:P, read from the container's own arguments) and closes it. The head's rank 0 holds torch.distributed's
  TCPStore there for as long as its engine lives: vLLM passes tcp://A:P to torch.distributed.init_process_group
  (vllm/distributed/parallel_state.py:1385-1388 and 1422, vLLM 0.19.1), torch's rank 0 starts the store's
  server (torch/distributed/rendezvous.py, _create_c10d_store, torch 2.10.0, which vLLM 0.19.1 pins in
  requirements/cuda.txt) and the default process group keeps it (torch/distributed/distributed_c10d.py,
  _new_process_group_helper: _world.pg_map). A bare connection that closes at once is logged by the store at
  debug level only (torch/csrc/distributed/c10d/TCPStoreLibUvBackend.cpp: "Remote peer closed the connection.").
- Once the head has been unreachable for --head-lost seconds, it stops the container through the Docker Engine
  API (`docker stop`: Docker records a manual stop, so neither a restart policy nor the boot unit starts it
  again) and writes why to STATE_DIR/cluster-guard-<container>.json (the vllm role's status shows it). The
  cluster is then down as one unit; the vllm role's next run starts it anew, head first.
- Before the head was ever reached since the container started, the worker is in its own rendezvous, which
  vLLM ends after --distributed-timeout-seconds (600 s when not given: PyTorch's NCCL default,
  vllm/config/parallel.py ParallelConfig.distributed_timeout_seconds): a head that boots later than its worker
  is waited for that long before the bound counts.
- Once the container runs again (the role, or someone, started it), the record is removed.

Standard library only: Ubuntu 24.04's python3 and Debian bookworm's. One line per change to stdout (the
journal under systemd). Docker, the probe and the clock are injectable for tests
(tests/pytest/vllm/test_cluster_guard.py).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # Plain HTTP over a unix socket: without this, http.client would load OpenSSL for HTTPS it never uses.
    sys.modules.setdefault("ssl", None)  # type: ignore[arg-type]

import argparse
import http.client
import json
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TextIO

PROG = "sparkfleet-vllm-cluster-guard"
# Docker's own rule for container names (moby daemon/names.go).
NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
# vLLM's defaults for the flags read (vllm/config/parallel.py, ParallelConfig, 0.19.1: master_addr, master_port)
# and PyTorch's NCCL process-group timeout that applies when --distributed-timeout-seconds is not given.
DEFAULT_MASTER_ADDR = "127.0.0.1"
DEFAULT_MASTER_PORT = 29501
DEFAULT_DISTRIBUTED_TIMEOUT_S = 600.0


def record_path(state_dir: str, container: str) -> str:
    """Where the guard records its stop of the container (beside the boot unit's marker, cluster-boot-<name>)."""
    return os.path.join(state_dir, f"cluster-guard-{container}.json")


# ----------------------------------------------------------------------------- the container's arguments


@dataclass(frozen=True)
class Target:
    """What a headless worker's arguments say of its head."""

    master_addr: str
    master_port: int
    distributed_timeout_s: float

    @property
    def address(self) -> str:
        host = f"[{self.master_addr}]" if ":" in self.master_addr else self.master_addr
        return f"{host}:{self.master_port}"


def _flags(argv: list[str]) -> dict[str, str]:
    """`--flag value` and `--flag=value` (and vLLM's underscore spellings, which its FlexibleArgumentParser
    accepts) as {flag: value}, the last one winning as argparse's; a flag without a value maps to ''."""
    found: dict[str, str] = {}
    for index, word in enumerate(argv):
        if not word.startswith("--"):
            continue
        name, has_value, value = word.partition("=")
        name = "--" + name[2:].replace("_", "-")
        if not has_value:
            following = argv[index + 1] if index + 1 < len(argv) else ""
            value = "" if following.startswith("--") else following
        found[name] = value
    return found


def cluster_target(argv: list[str]) -> Target | None:
    """The head a container's `vllm serve` arguments name, when they make it a headless worker of a multi-node
    cluster (--headless, --nnodes > 1, --node-rank > 0); None otherwise (nothing to guard)."""
    flags = _flags(argv)
    try:
        nnodes = int(flags.get("--nnodes") or 1)
        rank = int(flags.get("--node-rank") or 0)
        port = int(flags.get("--master-port") or DEFAULT_MASTER_PORT)
        timeout = float(flags.get("--distributed-timeout-seconds") or DEFAULT_DISTRIBUTED_TIMEOUT_S)
    except ValueError:
        return None
    if "--headless" not in flags or nnodes < 2 or rank < 1:
        return None
    return Target(flags.get("--master-addr") or DEFAULT_MASTER_ADDR, port, timeout)


# ----------------------------------------------------------------------------- the head's master port


def probe(target: Target, timeout: float) -> str | None:
    """None when a TCP connection to the head's master port opens; else why not, in a few words."""
    try:
        socket.create_connection((target.master_addr, target.master_port), timeout=timeout).close()
    except ConnectionRefusedError:
        return "connection refused"
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


# ----------------------------------------------------------------------------- docker


class DockerError(Exception):
    pass


def parse_docker_time(text: str) -> float | None:
    """Docker's RFC 3339 time with nanoseconds (State.StartedAt) as epoch seconds; None for the zero time."""
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
    """Epoch seconds as UTC RFC 3339 with milliseconds (what the record says)."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Container:
    container_id: str
    running: bool
    started_at: float | None
    argv: list[str]
    stop_timeout: int | None


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over the Docker socket: no fork of the docker CLI every few seconds."""

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


class DockerAPI:
    def __init__(self, socket_path: str, timeout: float = 5.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def _call(self, method: str, path: str, timeout: float | None = None) -> tuple[int, bytes]:
        conn = UnixHTTPConnection(self.socket_path, timeout or self.timeout)
        try:
            conn.request(method, path, headers={"Content-Length": "0"} if method == "POST" else {})
            response = conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise DockerError(f"{method} {path} via {self.socket_path}: {exc}") from exc
        finally:
            conn.close()

    def inspect(self, name: str) -> Container | None:
        """None when there is no such container."""
        status, body = self._call("GET", f"/containers/{name}/json")
        if status == 404:
            return None
        if status != 200:
            raise DockerError(f"inspect {name}: HTTP {status} {body[:200]!r}")
        try:
            doc = json.loads(body)
            state, config = doc["State"], doc.get("Config") or {}
            argv = [str(word) for word in (doc.get("Args") or [])]
            timeout = config.get("StopTimeout")
            return Container(str(doc["Id"]), bool(state["Running"]), parse_docker_time(state.get("StartedAt", "")),
                             argv, int(timeout) if isinstance(timeout, int) else None)
        except (ValueError, KeyError, TypeError) as exc:
            raise DockerError(f"inspect {name}: unexpected answer ({exc})") from exc

    def stop(self, name: str, stop_timeout: int | None) -> None:
        """`docker stop`: SIGTERM, then SIGKILL after the container's own stop timeout (Docker's default 10 s)."""
        wait = (stop_timeout if stop_timeout is not None and stop_timeout >= 0 else 10) + 30.0
        status, body = self._call("POST", f"/containers/{name}/stop", timeout=wait)
        # 304: already stopped; 404: gone. Either way it no longer runs.
        if status not in (204, 304, 404):
            raise DockerError(f"stop {name}: HTTP {status} {body[:200]!r}")


# ----------------------------------------------------------------------------- the guard


class Clock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


@dataclass(frozen=True)
class Settings:
    container: str
    state_dir: str
    head_lost_s: float
    interval_s: float = 2.0


class Guard:
    """One container's guard; tick() is one look (the container, then the head), run() the loop."""

    def __init__(self, settings: Settings, docker: Any, *, probe_fn: Callable[[Target, float], str | None] = probe,
                 clock: Any = None, out: TextIO | None = None) -> None:
        self.name = settings.container
        self.record = record_path(settings.state_dir, settings.container)
        self.head_lost_s = settings.head_lost_s
        self.interval_s = interval_s = settings.interval_s
        # Below the interval, so that a head that does not answer (its box off) does not slow the loop down.
        self.connect_timeout_s = max(0.2, min(2.0, interval_s * 0.75))
        self.docker = docker
        self.probe = probe_fn
        self.clock = clock or Clock()
        self.out = out or sys.stdout
        self.started_mono = self.clock.monotonic()
        self.docker_ok: bool | None = None
        self.said = ""
        self._forget()

    def _forget(self) -> None:
        """A new run of the container (or none): nothing known of its head yet."""
        self.life: tuple[str, float | None] | None = None
        self.reached_wall: float | None = None  # the head was last reached then (this run of the container)
        self.lost_mono: float | None = None  # the first failed look since it was reached (or since the start)
        self.lost_wall: float | None = None
        self.grace_end_mono = 0.0
        self.last_error = ""

    def log(self, message: str) -> None:
        print(f"{self.name}: {message}", file=self.out, flush=True)

    def say_once(self, message: str) -> None:
        """A state that persists is said once, not at every look."""
        if message != self.said:
            self.said = message
            self.log(message)

    def _inspect(self) -> Container | bool | None:
        """The container, None when there is none, False when Docker did not answer."""
        try:
            found = self.docker.inspect(self.name)
        except DockerError as exc:
            if self.docker_ok is not False:
                self.log(f"Docker does not answer ({exc}): nothing is judged until it does")
            self.docker_ok = False
            return False
        if self.docker_ok is False:
            self.log("Docker answers again")
        self.docker_ok = True
        return found

    def _clear_record(self) -> None:
        """The container runs again after the guard's stop: the stop is no longer in force."""
        try:
            os.unlink(self.record)
        except FileNotFoundError:
            return
        except OSError as exc:
            self.log(f"cannot remove {self.record}: {exc}")
            return
        self.log(f"runs again: {self.record} removed")

    def tick(self) -> None:
        found = self._inspect()
        if found is False:
            return
        if not isinstance(found, Container) or not found.running:
            if self.life is not None:
                self.log("not running: the guard waits until it runs again")
            self._forget()
            self.said = ""
            return
        if os.path.exists(self.record):
            self._clear_record()
        target = cluster_target(found.argv)
        if target is None:
            self.say_once("its arguments make it no headless worker of a cluster (--headless, --nnodes > 1,"
                          " --node-rank > 0): nothing to guard")
            self._forget()
            return
        life = (found.container_id, found.started_at)
        if life != self.life:
            self._forget()
            self.life = life
            now_mono, now_wall = self.clock.monotonic(), self.clock.time()
            # Until the head is first reached, the worker is in its own rendezvous, which vLLM ends after the
            # distributed timeout: the bound counts only from then on (from the container's start).
            started = found.started_at if found.started_at is not None else now_wall
            self.grace_end_mono = now_mono + max(0.0, started + target.distributed_timeout_s - now_wall)
            self.log(f"watches its head {target.address} every {self.interval_s:g} s; stops it once the head has been"
                     f" unreachable for {self.head_lost_s:g} s (before the head is first reached: from"
                     f" {target.distributed_timeout_s:g} s after the container started, its own rendezvous timeout)")
        self._look(found, target)

    def _look(self, found: Container, target: Target) -> None:
        error = self.probe(target, self.connect_timeout_s)
        now_mono, now_wall = self.clock.monotonic(), self.clock.time()
        if error is None:
            if self.lost_mono is not None or self.reached_wall is None:
                self.log(f"head {target.address} reachable")
            self.reached_wall = now_wall
            self.lost_mono = self.lost_wall = None
            self.last_error = ""
            return
        if self.lost_mono is None:
            self.lost_mono, self.lost_wall = now_mono, now_wall
            self.log(f"head {target.address} unreachable ({error})"
                     + ("" if self.reached_wall is not None else ": not reached since the container started"))
        self.last_error = error
        counts_from = self.lost_mono if self.reached_wall is not None else max(self.lost_mono, self.grace_end_mono)
        if now_mono - counts_from >= self.head_lost_s:
            self._stop(found, target)

    def _stop(self, judged: Container, target: Target) -> None:
        # Once more, just before acting: the same run of the container (not one the role has just started anew,
        # head first), and the head still unreachable.
        again = self._inspect()
        if not isinstance(again, Container) or not again.running or again.container_id != judged.container_id \
                or again.started_at != judged.started_at:
            return
        error = self.probe(target, self.connect_timeout_s)
        if error is None:
            self.log(f"head {target.address} reachable again")
            self.reached_wall = self.clock.time()
            self.lost_mono = self.lost_wall = None
            return
        self.log(f"stops the container: head {target.address} unreachable ({error})")
        try:
            self.docker.stop(self.name, judged.stop_timeout)
        except DockerError as exc:
            self.log(f"the stop failed ({exc}): tried again at the next look")
            return
        now = self.clock.time()
        since = self.lost_wall if self.reached_wall is not None else judged.started_at
        document = {
            "format": 1,
            "container": self.name,
            "stopped_by": PROG,
            "stopped_at": iso_time(now),
            "reason": "head unreachable",
            "head": target.address,
            "unreachable_since": iso_time(since) if since is not None else None,
            "head_reached_at": iso_time(self.reached_wall) if self.reached_wall is not None else None,
            "container_started_at": iso_time(judged.started_at) if judged.started_at is not None else None,
            "error": error,
            "head_lost_s": self.head_lost_s,
        }
        what = (f"unreachable since {document['unreachable_since']}" if self.reached_wall is not None
                else f"not reached since the container started at {document['container_started_at']}")
        document["message"] = (
            f"{PROG} stopped {self.name} at {document['stopped_at']}: its cluster's head {target.address} (the master"
            f" port, torch.distributed's store) was {what} ({error}; the bound is {self.head_lost_s:g} s). The cluster"
            " is down as one unit; the vllm role's next run starts it anew, head first.")
        self._write(document)
        self.log(document["message"])
        self._forget()
        self.said = ""

    def _write(self, document: dict[str, Any]) -> None:
        """Written whole or not at all (a reader never sees half a record)."""
        tmp = f"{self.record}.tmp"
        try:
            os.makedirs(os.path.dirname(self.record), exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(document, handle, indent=2, sort_keys=True)
                handle.write("\n")
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.record)
        except OSError as exc:
            self.log(f"cannot write {self.record}: {exc}")

    def run(self, stop: threading.Event) -> None:
        """tick() every interval (from a fixed schedule: a slow look does not shift the next ones) until `stop`."""
        next_at = self.clock.monotonic()
        while not stop.is_set():
            self.tick()
            next_at += self.interval_s
            delay = next_at - self.clock.monotonic()
            if delay < 0:  # a look took longer than the interval: start the schedule again from now
                next_at, delay = self.clock.monotonic(), 0.0
            stop.wait(delay)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="Stops a vLLM cluster worker's container once its head "
                                     "(the master port its arguments name) has been unreachable for a bounded time.")
    parser.add_argument("--container", required=True, help="the worker's container")
    parser.add_argument("--state-dir", required=True, help="where the record of a stop is written (vllm_state_dir)")
    parser.add_argument("--head-lost", type=float, required=True, metavar="SECONDS",
                        help="how long the head may be unreachable before the worker is stopped")
    parser.add_argument("--interval", type=float, default=2.0, metavar="SECONDS", help="between looks (2)")
    parser.add_argument("--docker-socket", default="/run/docker.sock")
    args = parser.parse_args(argv)
    if not NAME_RE.match(args.container):
        parser.error(f"--container {args.container!r} is no Docker container name")
    if args.head_lost <= 0 or not 0.1 <= args.interval <= 60:
        parser.error("--head-lost must be above 0 and --interval within 0.1-60 seconds")
    settings = Settings(args.container, args.state_dir, args.head_lost, args.interval)
    guard = Guard(settings, DockerAPI(args.docker_socket))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    guard.run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
