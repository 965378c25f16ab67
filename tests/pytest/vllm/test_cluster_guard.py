"""The vllm role's cluster guard (roles/vllm/files/sparkfleet_vllm_cluster_guard.py), the program a cluster worker's
sparkfleet-vllm-cluster-guard@<container>.service runs: when it judges the head gone, what it records, and when it
leaves the worker alone (a short outage, a head that boots after its worker, a cluster the role starts anew).

Its loop is driven one look at a time with a fake clock, a fake Docker and a head that answers or not; then the
program itself runs against a Docker Engine API on a unix socket and a real listener standing for the head's
master port.
"""

from __future__ import annotations

import http.server
import importlib.util
import io
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PROGRAM = Path(__file__).resolve().parents[3] / "roles" / "vllm" / "files" / "sparkfleet_vllm_cluster_guard.py"


def _load():
    spec = importlib.util.spec_from_file_location("sparkfleet_vllm_cluster_guard", PROGRAM)
    module = importlib.util.module_from_spec(spec)
    sys.modules["sparkfleet_vllm_cluster_guard"] = module
    spec.loader.exec_module(module)
    return module


guard_mod = _load()

HEAD = "192.168.100.10"
# What the vllm role's cluster plan gives a worker (molecule/cluster: tensor 2 over two Sparks), after the profile's
# arguments; the scenario's --distributed-timeout-seconds 30.
WORKER_ARGV = ["serve", "/models/m", "--served-model-name", "m", "--distributed-timeout-seconds", "30",
               "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1", "--nnodes", "2", "--node-rank", "1",
               "--master-addr", HEAD, "--master-port", "29501", "--headless"]
BOUND = 30.0
INTERVAL = 2.0
WALL0 = 1_800_000_000.0


class FakeClock:
    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall = WALL0

    def monotonic(self) -> float:
        return self.mono

    def time(self) -> float:
        return self.wall

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


class FakeDocker:
    def __init__(self, clock: FakeClock, argv: list[str] | None = None) -> None:
        self.clock = clock
        self.argv = list(argv or WORKER_ARGV)
        self.container: object | None = None
        self.stops: list[float] = []
        self.down = False
        self.on_inspect: list = []  # callables run at each inspect (to change the world between two looks)

    def start(self, started_ago: float = 0.0) -> None:
        self.container = guard_mod.Container(f"id-{len(self.stops)}-{self.clock.wall}", True,
                                             self.clock.wall - started_ago, self.argv, 120)

    def inspect(self, name: str):
        assert name == "vllm"
        for hook in self.on_inspect:
            hook()
        if self.down:
            raise guard_mod.DockerError("connection refused")
        return self.container

    def stop(self, name: str, stop_timeout: int | None) -> None:
        assert (name, stop_timeout) == ("vllm", 120)
        self.stops.append(self.clock.wall)
        c = self.container
        self.container = guard_mod.Container(c.container_id, False, c.started_at, c.argv, c.stop_timeout)


class Head:
    """The head's master port as the guard's probe finds it."""

    def __init__(self) -> None:
        self.up = True
        self.probes: list[tuple[str, int]] = []

    def probe(self, target, timeout: float) -> str | None:
        assert timeout < INTERVAL
        self.probes.append((target.master_addr, target.master_port))
        return None if self.up else "connection refused"


@dataclass
class Rig:
    clock: FakeClock
    docker: FakeDocker
    head: Head
    guard: object
    out: io.StringIO
    record: Path

    def look(self, seconds: float = 0.0) -> None:
        """One look of the guard, then the time until the next."""
        self.guard.tick()
        self.clock.advance(seconds or INTERVAL)

    def run_for(self, seconds: float) -> None:
        end = self.clock.mono + seconds
        while self.clock.mono < end:
            self.look()

    def log(self) -> str:
        return self.out.getvalue()


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    clock = FakeClock()
    docker = FakeDocker(clock)
    head = Head()
    out = io.StringIO()
    settings = guard_mod.Settings("vllm", str(tmp_path), BOUND, INTERVAL)
    guard = guard_mod.Guard(settings, docker, probe_fn=head.probe, clock=clock, out=out)
    return Rig(clock, docker, head, guard, out, tmp_path / "cluster-guard-vllm.json")


def test_the_head_and_its_bounds_come_from_the_workers_own_arguments():
    target = guard_mod.cluster_target(WORKER_ARGV)
    assert (target.master_addr, target.master_port, target.distributed_timeout_s) == (HEAD, 29501, 30.0)
    assert target.address == "192.168.100.10:29501"
    # vLLM's other spellings (FlexibleArgumentParser: --flag=value, underscores) and its defaults.
    spelled = ["serve", "m", "--nnodes=2", "--node_rank=1", "--master_addr=10.0.0.1", "--headless"]
    assert guard_mod.cluster_target(spelled) == guard_mod.Target("10.0.0.1", 29501, 600.0)
    assert guard_mod.Target("fd00::1", 29501, 1.0).address == "[fd00::1]:29501"
    # A head, a box of its own, or arguments that make no sense: nothing to guard.
    head = [word for word in WORKER_ARGV if word != "--headless"]
    head[head.index("--node-rank") + 1] = "0"
    assert guard_mod.cluster_target(head) is None
    assert guard_mod.cluster_target(["serve", "m", "--headless"]) is None
    assert guard_mod.cluster_target(["serve", "m", "--nnodes", "two", "--node-rank", "1", "--headless"]) is None


def test_a_head_gone_while_serving_stops_the_worker_once_the_bound_has_passed(rig: Rig):
    rig.docker.start(started_ago=600)
    rig.run_for(10)
    rig.head.up = False
    gone_at = rig.clock.wall
    rig.run_for(BOUND)
    assert rig.docker.stops == []
    rig.look()
    # The first look that finds it gone counts; the one at the bound stops the worker.
    assert rig.docker.stops == [gone_at + BOUND]
    record = json.loads(rig.record.read_text())
    assert record["reason"] == "head unreachable" and record["head"] == "192.168.100.10:29501"
    assert record["unreachable_since"] == guard_mod.iso_time(gone_at)
    assert record["stopped_at"] == guard_mod.iso_time(gone_at + BOUND)
    assert (record["error"], record["head_lost_s"]) == ("connection refused", BOUND)
    assert record["stopped_by"] == guard_mod.PROG
    assert f"its cluster's head 192.168.100.10:29501 (the master port, torch.distributed's store) was unreachable " \
           f"since {record['unreachable_since']}" in record["message"]
    assert oct(rig.record.stat().st_mode & 0o777) == "0o644"
    # Stopped: nothing more to do, and nothing done again.
    rig.run_for(60)
    assert len(rig.docker.stops) == 1
    assert "stops the container" in rig.log() and record["message"] in rig.log()


def test_an_outage_shorter_than_the_bound_is_only_logged(rig: Rig):
    rig.docker.start(started_ago=600)
    rig.look()
    rig.head.up = False
    rig.run_for(BOUND - INTERVAL)
    rig.head.up = True
    rig.run_for(10)
    rig.head.up = False
    rig.run_for(BOUND - INTERVAL)
    assert rig.docker.stops == [] and not rig.record.exists()
    assert rig.log().count("unreachable (connection refused)") == 2 and rig.log().count("reachable\n") >= 2


def test_a_worker_that_starts_before_its_head_waits_out_its_own_rendezvous_timeout(rig: Rig):
    """At boot the head's box may come up later: the worker's rendezvous waits --distributed-timeout-seconds (30 s
    here) for it, and the bound counts only from then on."""
    rig.docker.start()
    rig.head.up = False
    rig.run_for(30 + BOUND - INTERVAL)
    assert rig.docker.stops == []
    rig.head.up = True
    rig.look()
    # Once reached, the bound counts from the first look that misses it.
    rig.head.up = False
    rig.run_for(BOUND - INTERVAL)
    assert rig.docker.stops == []
    rig.run_for(2 * INTERVAL)
    assert len(rig.docker.stops) == 1


def test_a_head_never_reached_is_judged_after_the_rendezvous_timeout_and_the_bound(rig: Rig):
    rig.docker.start()
    started = rig.clock.wall
    rig.head.up = False
    rig.run_for(30 + BOUND + INTERVAL)
    assert rig.docker.stops == [started + 30 + BOUND]
    record = json.loads(rig.record.read_text())
    assert record["head_reached_at"] is None and record["unreachable_since"] == guard_mod.iso_time(started)
    assert f"not reached since the container started at {guard_mod.iso_time(started)}" in record["message"]


def test_a_guard_started_beside_a_running_worker_gives_the_head_the_whole_bound(rig: Rig):
    """Restarted (a new program, a reboot of the guard alone) while the head is down: the bound counts from its own
    first look, not from some time before it."""
    rig.docker.start(started_ago=3600)
    rig.head.up = False
    rig.run_for(BOUND - INTERVAL)
    assert rig.docker.stops == []
    rig.run_for(2 * INTERVAL)
    assert len(rig.docker.stops) == 1


def test_the_guard_does_not_stop_a_worker_the_role_has_just_started_anew(rig: Rig):
    rig.docker.start(started_ago=600)
    rig.look()
    rig.head.up = False
    rig.run_for(BOUND)
    assert rig.docker.stops == []

    # Between the look that judges and the stop, the role stops the cluster and starts it anew, head first.
    def restarted() -> None:
        if rig.docker.container.started_at < rig.clock.wall - 1:
            rig.docker.start()
            rig.docker.on_inspect.clear()
    rig.docker.on_inspect.append(lambda: rig.docker.on_inspect.append(restarted))
    rig.look()
    # The look judged the head gone (it looked again before acting) and left the new container alone.
    assert len(rig.head.probes) == 2 + BOUND / INTERVAL and rig.docker.stops == []
    # The new run of the container has its own grace (the head is still starting).
    rig.run_for(20)
    assert rig.docker.stops == []


def test_a_head_back_just_before_the_stop_is_left_alone(rig: Rig):
    rig.docker.start(started_ago=600)
    rig.look()
    rig.head.up = False
    rig.run_for(BOUND)
    assert rig.docker.stops == []
    calls = len(rig.head.probes)

    def back_on_second_probe(target, timeout: float) -> str | None:
        rig.head.probes.append((target.master_addr, target.master_port))
        return "connection refused" if len(rig.head.probes) == calls + 1 else None
    rig.guard.probe = back_on_second_probe
    rig.look()
    assert rig.docker.stops == [] and "reachable again" in rig.log()


def test_the_record_is_removed_once_the_worker_runs_again(rig: Rig):
    rig.docker.start(started_ago=600)
    rig.look()
    rig.head.up = False
    rig.run_for(BOUND + INTERVAL)
    assert rig.record.exists()
    rig.head.up = True
    rig.docker.start()
    rig.look()
    assert not rig.record.exists()
    assert "runs again" in rig.log()


def test_nothing_is_judged_while_docker_does_not_answer_or_the_box_is_no_worker(rig: Rig):
    rig.docker.down = True
    rig.head.up = False
    rig.run_for(5 * BOUND)
    assert rig.docker.stops == [] and rig.log().count("Docker does not answer") == 1
    rig.docker.down = False
    rig.docker.argv = ["serve", "/models/m", "--port", "8000"]
    rig.docker.start(started_ago=3600)
    rig.run_for(5 * BOUND)
    assert rig.docker.stops == [] and rig.head.probes == []
    assert rig.log().count("nothing to guard") == 1


# --- the program itself ----------------------------------------------------------------------------------------


class DockerAPI(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The Docker Engine API's two calls the guard makes, for one container, on a unix socket."""

    daemon_threads = True

    def __init__(self, path: str, argv: list[str]) -> None:
        self.state = {"Id": "c0ffee", "Args": argv, "Config": {"StopTimeout": 5},
                      "State": {"Running": True, "StartedAt": "2026-12-01T20:00:00.123456789Z"}}
        self.stops: list[float] = []
        super().__init__(path, Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # http.server's name
        pass

    def reply(self, status: int, body: bytes = b"") -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # http.server's naming
        if self.path != "/containers/vllm/json":
            self.reply(404)
            return
        self.reply(200, json.dumps(self.server.state).encode())

    def do_POST(self) -> None:  # http.server's naming
        if self.path != "/containers/vllm/stop":
            self.reply(404)
            return
        self.server.stops.append(time.monotonic())
        self.server.state["State"] = {**self.server.state["State"], "Running": False}
        self.reply(204)


@pytest.fixture
def docker_api() -> Iterator[DockerAPI]:
    # Unix socket paths are limited to 107 bytes: pytest's tmp_path can be longer.
    path = os.path.join(tempfile.mkdtemp(prefix="guard-"), "docker.sock")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    argv = [*WORKER_ARGV[:-5], "127.0.0.1", "--master-port", str(port), "--headless"]
    server = DockerAPI(path, argv)
    server.head = listener
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    listener.close()


def test_the_program_stops_the_worker_through_dockers_api_and_records_why(docker_api: DockerAPI, tmp_path: Path):
    state = tmp_path / "state"
    program = subprocess.Popen(
        [sys.executable, "-I", "-B", str(PROGRAM), "--container", "vllm", "--state-dir", str(state), "--head-lost", "1",
         "--interval", "0.2", "--docker-socket", docker_api.server_address],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # A few looks at the head while it answers.
        time.sleep(1.0)
        # The head goes: its port closes (connection refused).
        gone = time.monotonic()
        docker_api.head.close()
        while not docker_api.stops and time.monotonic() < gone + 10:
            time.sleep(0.05)
        assert docker_api.stops, "the guard did not stop the worker"
        # The bound (1 s), then the first look after it (every 0.2 s), on a loaded machine too.
        assert 1.0 <= docker_api.stops[0] - gone <= 3.0
        record_file = state / "cluster-guard-vllm.json"
        while not record_file.exists() and time.monotonic() < gone + 10:
            time.sleep(0.05)
        record = json.loads(record_file.read_text())
        assert record["head"].startswith("127.0.0.1:") and record["error"] == "connection refused"
        # Started again (the role's next run): the record goes.
        docker_api.state["State"] = {"Running": True, "StartedAt": "2026-12-01T21:00:00Z"}
        while record_file.exists() and time.monotonic() < gone + 15:
            time.sleep(0.05)
        assert not record_file.exists()
    finally:
        program.send_signal(signal.SIGTERM)
        code = program.wait(timeout=10)
        out = program.stdout.read()
    assert code == 0, out
    assert "vllm: watches its head 127.0.0.1:" in out and "reachable\n" in out
    assert "unreachable (connection refused)" in out and "runs again" in out
