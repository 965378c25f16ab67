"""Test doubles for the memory watchdog: a fake /proc, a fake clock and a fake Docker
Engine API on a unix socket (the real HTTP protocol, so the watchdog's own client is
exercised). Also used by benchmarks/watchdog_latency.py."""

from __future__ import annotations

import http.server
import json
import os
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

# About what a DGX Spark (GB10, 128 GB unified memory) reports: MemTotal ~121.7 GiB.
GB10_MEMTOTAL_KIB = 127_605_464


class FakeProc:
    """A /proc root holding meminfo and pressure/memory that tests rewrite at will."""

    def __init__(self, root: Path, total_kib: int = GB10_MEMTOTAL_KIB) -> None:
        self.root = Path(root)
        self.total_kib = total_kib
        (self.root / "pressure").mkdir(parents=True, exist_ok=True)
        self.set(50.0)

    def set(self, used_pct: float, swap_used_kib: int = 0, psi_some: float = 0.0) -> None:
        available = round(self.total_kib * (100.0 - used_pct) / 100.0)
        text = (
            f"MemTotal:       {self.total_kib} kB\n"
            f"MemFree:        {max(available - 1024, 0)} kB\n"
            f"MemAvailable:   {available} kB\n"
            "Buffers:            2048 kB\n"
            "Cached:          1048576 kB\n"
            "SwapCached:            0 kB\n"
            "Active:          4194304 kB\n"
            "SwapTotal:      16777212 kB\n"
            f"SwapFree:       {16777212 - swap_used_kib} kB\n"
            "HugePages_Total:       0\n"
            "Hugepagesize:       2048 kB\n"
        )
        # Replaced atomically: a reader never sees half a file.
        tmp = self.root / ".meminfo.tmp"
        tmp.write_text(text, encoding="ascii")
        os.replace(tmp, self.root / "meminfo")
        (self.root / "pressure" / "memory").write_text(
            f"some avg10={psi_some:.2f} avg60=0.00 avg300=0.00 total=12345\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=678\n",
            encoding="ascii",
        )


class FakeClock:
    """Monotonic and wall time that move only when told (sleep advances them)."""

    def __init__(self, wall: float = 1_800_000_000.0) -> None:
        self.mono = 1000.0
        self.wall = wall

    def monotonic(self) -> float:
        return self.mono

    def time(self) -> float:
        return self.wall

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


def docker_time(epoch: float) -> str:
    """Docker's RFC 3339 with nanoseconds, as State.StartedAt shows it."""
    whole = int(epoch)
    nanos = round((epoch - whole) * 1e9)
    stamp = datetime.fromtimestamp(whole, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{nanos:09d}Z"


@dataclass
class Call:
    method: str
    path: str
    at: float  # time.monotonic() of the real clock when the request arrived


@dataclass
class Container:
    name: str
    running: bool
    started_at: float
    cid: str = ""
    dead: threading.Event = field(default_factory=threading.Event)


class FakeDocker:
    """Answers GET /containers/{name}/json, POST .../stop?t= and POST .../kill like the
    Docker Engine, records every call, and can be slow, fail, or ignore stop."""

    def __init__(self, socket_path: str | Path) -> None:
        self.socket_path = str(socket_path)
        self.containers: dict[str, Container] = {}
        self.calls: list[Call] = []
        self.delay: dict[str, float] = {}  # action -> seconds before answering
        self.status: dict[str, int] = {}  # action -> forced HTTP status (failure)
        self.stop_takes: float = 0.0  # seconds the container needs to exit after SIGTERM
        self.hooks: dict[str, Callable[[], None]] = {}  # action -> called on arrival (once)
        self.call_event = threading.Condition()
        self._server: socketserver.ThreadingUnixStreamServer | None = None

    # -- state

    def run(self, name: str, started_at: float, running: bool = True) -> Container:
        box = Container(name, running, started_at, cid=f"{abs(hash((name, started_at))):064x}"[:64])
        self.containers[name] = box
        return box

    def actions(self, action: str | None = None) -> list[Call]:
        wanted = [c for c in self.calls if c.method == "POST"]
        return [c for c in wanted if c.path.split("?")[0].endswith("/" + action)] if action else wanted

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
        """Waits (real time) until predicate() holds; woken by each call, else every 10 ms."""
        end = time.monotonic() + timeout
        with self.call_event:
            while not predicate():
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.call_event.wait(min(left, 0.01))
        return True

    # -- server

    def start(self) -> FakeDocker:
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                pass

            def do_GET(self) -> None:
                fake._handle(self, "GET")

            def do_POST(self) -> None:
                fake._handle(self, "POST")

        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        server = socketserver.ThreadingUnixStreamServer(self.socket_path, Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self._server = server
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for box in self.containers.values():
            box.dead.set()
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)

    def __enter__(self) -> FakeDocker:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- protocol

    def _handle(self, req: http.server.BaseHTTPRequestHandler, method: str) -> None:  # noqa: PLR0911
        path = req.path
        with self.call_event:
            self.calls.append(Call(method, path, time.monotonic()))
            self.call_event.notify_all()
        parts = path.split("?")[0].strip("/").split("/")
        action = parts[2] if len(parts) == 3 else ""
        hook = self.hooks.pop(action, None)
        if hook:
            hook()
        if self.delay.get(action):
            time.sleep(self.delay[action])
        if action in self.status:
            return self._reply(req, self.status[action], {"message": f"forced failure of {action}"})
        if len(parts) != 3 or parts[0] != "containers":
            return self._reply(req, 404, {"message": "page not found"})
        box = self.containers.get(parts[1])
        if box is None:
            return self._reply(req, 404, {"message": f"No such container: {parts[1]}"})
        if method == "GET" and action == "json":
            return self._reply(req, 200, self._inspect(box))
        if method == "POST" and action == "stop":
            return self._stop(req, box, path)
        if method == "POST" and action == "kill":
            if not box.running:
                return self._reply(req, 409, {"message": f"Container {box.cid} is not running"})
            box.running = False
            box.dead.set()
            return self._reply(req, 204, None)
        return self._reply(req, 405, {"message": "method not allowed"})

    def _stop(self, req: http.server.BaseHTTPRequestHandler, box: Container, path: str) -> None:
        if not box.running:
            return self._reply(req, 304, None)
        timeout = float(path.partition("t=")[2] or 10)
        # Like Docker: SIGTERM, wait up to t for the exit, then SIGKILL; the answer comes
        # once the container is gone (a kill meanwhile ends the wait too).
        box.dead.clear()
        box.dead.wait(min(self.stop_takes, timeout))
        box.running = False
        box.dead.set()
        return self._reply(req, 204, None)

    def _inspect(self, box: Container) -> dict:
        return {
            "Id": box.cid,
            "Name": "/" + box.name,
            "State": {
                "Status": "running" if box.running else "exited",
                "Running": box.running,
                "Pid": 4242 if box.running else 0,
                "StartedAt": docker_time(box.started_at),
                "FinishedAt": "0001-01-01T00:00:00Z",
            },
            "HostConfig": {"RestartPolicy": {"Name": "unless-stopped", "MaximumRetryCount": 0}},
        }

    @staticmethod
    def _reply(req: http.server.BaseHTTPRequestHandler, status: int, body: dict | None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        req.send_response(status)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        if data:
            req.wfile.write(data)
