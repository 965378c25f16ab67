"""Loads the watchdog program (a plain script shipped by roles/watchdog) as a module."""

from __future__ import annotations

import importlib.util
import io
import json
import select
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fakes import FakeClock, FakeDocker, FakeProc  # noqa: E402

PROGRAM = HERE.parents[2] / "roles" / "watchdog" / "files" / "sparkfleet_watchdog.py"


def _load():
    spec = importlib.util.spec_from_file_location("sparkfleet_watchdog", PROGRAM)
    module = importlib.util.module_from_spec(spec)
    sys.modules["sparkfleet_watchdog"] = module
    spec.loader.exec_module(module)
    return module


wd = _load()


class Harness:
    """One watchdog with a fake /proc, a fake clock and a fake Docker; drives its loop
    one sample at a time and reads back its log lines."""

    def __init__(self, tmp_path: Path, docker_latency_s: float = 0.0, **settings) -> None:
        self.clock = FakeClock()
        self.proc = FakeProc(tmp_path / "proc")
        # Unix socket paths are limited to 107 bytes: pytest's tmp_path can be longer.
        self.socket = Path(tempfile.mkdtemp(prefix="wd-")) / "docker.sock"
        self.docker = FakeDocker(self.socket)
        self.out = io.StringIO()
        raw = {"proc_root": str(self.proc.root), "docker_socket": str(self.socket), "containers": ["vllm"]}
        raw.update(settings)
        self.config = wd.parse_config(raw)
        self.dog = wd.Watchdog(self.config, clock=self.clock, out=self.out)
        self.sent = 0
        self.sent_at: list[tuple[str, str, float]] = []  # method, path, simulated time of sending
        real_send = self.dog.docker._send

        def counting_send(method: str, path: str):
            conn = real_send(method, path)
            self.sent += 1
            self.sent_at.append((method, path, self.clock.monotonic()))
            return conn

        self.dog.docker._send = counting_send
        if docker_latency_s:
            self._simulate_docker_latency(docker_latency_s)

    def _simulate_docker_latency(self, latency_s: float) -> None:
        """Every Docker answer takes latency_s of simulated time (a busy Docker Engine): a call the watchdog waits
        for holds its loop that long; an answer it collects later is there no sooner."""
        clock, api = self.clock, self.dog.docker
        real_call, real_request_inspect = api._call, getattr(api, "request_inspect", None)

        def slow_call(method: str, path: str):
            answer = real_call(method, path)
            clock.advance(latency_s)
            return answer

        class SlowPending(wd.PendingRequest):
            def poll(self):
                if clock.monotonic() < self.sent_at + latency_s:
                    return None
                select.select([self.conn.sock], [], [], 2.0)
                return super().poll()

        def slow_request_inspect(name: str, now: float):
            pending = real_request_inspect(name, now)
            return SlowPending(pending.conn, pending.sent_at)

        api._call, api.request_inspect = slow_call, slow_request_inspect

    def step(self, used_pct: float | None = None) -> float:
        """Sets memory (if given), runs one iteration, sleeps (fake) what it asked."""
        if used_pct is not None:
            self.proc.set(used_pct)
        self._let_quick_answers_arrive()
        interval = self.dog.step()
        # Every request the watchdog sent has reached the fake Docker before anything is
        # asserted (its server threads run in real time).
        assert self.docker.wait_for(lambda: len(self.docker.calls) >= self.sent), "request never arrived"
        self.clock.sleep(interval)
        return interval

    def _let_quick_answers_arrive(self) -> None:
        # Fake time runs far ahead of the fake Docker's threads: when Docker is meant to
        # answer at once, wait (real time) for the answer so that fake seconds do not pass
        # before it; slow-Docker tests keep the race they are about.
        for w in self.dog.watched:
            waits = [(w.pending, self.docker.stop_takes or self.docker.delay.get("stop")),
                     (getattr(w, "inspecting", None), self.docker.delay.get("json"))]
            for pending, slow in waits:
                if not slow and pending is not None and pending.conn.sock is not None:
                    select.select([pending.conn.sock], [], [], 2.0)

    def before_reread(self, change) -> None:
        """Calls change() once, at the re-read of meminfo the watchdog makes just before acting."""
        real = self.dog.reread_meminfo

        def reread():
            self.dog.reread_meminfo = real
            change()
            return real()

        self.dog.reread_meminfo = reread

    def run_for(self, seconds: float, used_pct: float | None = None) -> None:
        end = self.clock.monotonic() + seconds
        while self.clock.monotonic() < end:
            self.step(used_pct)

    def events(self, name: str | None = None) -> list[dict]:
        lines = [json.loads(line) for line in self.out.getvalue().splitlines()]
        return [e for e in lines if name is None or e["event"] == name]

    def started(self, ago_s: float, name: str = "vllm"):
        return self.docker.run(name, self.clock.time() - ago_s)


@pytest.fixture
def harness(tmp_path):
    made = []

    def make(docker_up: bool = True, **settings) -> Harness:
        h = Harness(tmp_path, **settings)
        if docker_up:
            h.docker.start()
        made.append(h)
        return h

    yield make
    for h in made:
        h.docker.close()
        shutil.rmtree(h.socket.parent, ignore_errors=True)
