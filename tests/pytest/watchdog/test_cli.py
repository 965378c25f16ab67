"""The watchdog as a program: --check-config, config errors, and the real loop (real
clock, real process) against the fake Docker API and a meminfo file the test controls."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from conftest import PROGRAM, wd
from fakes import FakeDocker, FakeProc

# The interpreter the daemon runs on (e.g. WATCHDOG_PYTHON=python3.12 for Ubuntu 24.04's).
PYTHON = os.environ.get("WATCHDOG_PYTHON", sys.executable)


def write_config(path, **values) -> str:
    path.write_text(json.dumps(values), encoding="utf-8")
    return str(path)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-I", "-B", str(PROGRAM), *args], capture_output=True, text=True,
                          timeout=30, check=False)


def test_check_config_accepts_the_defaults(tmp_path):
    done = run("--check-config", "--config", write_config(tmp_path / "c.json", containers=["vllm"]))
    assert done.returncode == 0, done.stderr
    assert "config OK" in done.stdout
    assert "vllm (startup 96% for 300 s, steady 90%, ceiling 98%)" in done.stdout
    assert "one stopped at a time" not in done.stdout


def test_check_config_says_the_rule_and_the_priorities_of_several(tmp_path):
    config = write_config(tmp_path / "c.json", containers=["vllm", {"name": "vllm-big", "priority": 500}])
    done = run("--check-config", "--config", config)
    assert done.returncode == 0, done.stderr
    assert ("one stopped at a time: one loading first, then the lowest priority (vllm 100, vllm-big 500), "
            "then the last started") in done.stdout


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"containers": [{"name": "vllm", "startup_threshold": 85}]}, "steady_threshold 90 <= startup_threshold 85"),
        ({"steady_threshold": 97}, "steady_threshold 97 <= startup_threshold 96"),
        ({"ceiling": 95}, "startup_threshold 96 <= ceiling 95"),
        ({"startup_threshold": 101, "ceiling": 101}, "out of range; expected a value between 0 and 100"),
        ({"steady_threshold": -1}, "out of range"),
        ({"steady_threshold": 0, "startup_threshold": 0}, "startup_threshold (vllm) = 0 is a percentage"),
        ({"steady_threshold": 0.9, "startup_threshold": 0.96, "ceiling": 0.98},
         "startup_threshold (vllm) = 0.96 is a percentage of memory used and 0.96% cannot be meant "
         "(it looks like a fraction: write 96 for 96%); expected a value between 50 and 100"),
        ({"containers": [{"name": "vllm", "steady_threshold": 0.9}]},
         "steady_threshold (vllm) = 0.9 is a percentage of memory used and 0.9% cannot be meant "
         "(it looks like a fraction: write 90 for 90%)"),
        ({"steady_threshold": 30}, "30% cannot be meant (the container would be stopped as soon as it loads"),
        ({"grace_s": -5}, "grace_s (vllm) = -5 is out of range"),
        ({"steady_threshold": "90"}, "is not a number"),
        ({"containers": []}, "expected a non-empty list"),
        ({"containers": ["vllm", "vllm"]}, "name twice"),
        ({"containers": ["bad name!"]}, "not a Docker container name"),
        ({"containers": [{"name": "vllm", "treshold": 90}]}, "unknown keys ['treshold']"),
        ({"containers": [{"name": "vllm", "priority": 1001}]}, "containers[0].priority (vllm) = 1001 is out of range"),
        ({"poll_fast_s": 0.5}, "poll_fast_s = 0.5 is out of range"),
        ({"poll_fast_s": 0.1, "poll_slow_s": 0.05}, "poll_fast_s 0.1 is above poll_slow_s 0.05"),
        ({"confirm_interval_s": 0.08}, "confirm_interval_s 0.08 is above poll_fast_s 0.05; expected the re-reads"),
        ({"confirm_interval_s": 0}, "confirm_interval_s = 0 is out of range"),
        ({"samples_to_act": 2.5}, "not a whole number"),
        ({"proc_root": "proc"}, "expected an absolute path"),
        ({"dry_run": "yes"}, "expected true or false"),
        ({"bogus": 1}, "unknown keys ['bogus']"),
    ],
)
def test_check_config_rejects_bad_values_with_a_clear_message(tmp_path, config, message):
    with pytest.raises(wd.ConfigError) as caught:
        wd.parse_config(config)
    assert message in str(caught.value)
    done = run("--check-config", "--config", write_config(tmp_path / "c.json", **config))
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stderr.startswith("sparkfleet-watchdog: config error: ")
    assert done.stdout == ""


def test_unreadable_or_invalid_config_files(tmp_path):
    missing = run("--check-config", "--config", str(tmp_path / "nope.json"))
    assert missing.returncode == 2
    assert "cannot read" in missing.stderr
    (tmp_path / "bad.json").write_text("{containers: [vllm]}")
    broken = run("--check-config", "--config", str(tmp_path / "bad.json"))
    assert broken.returncode == 2
    assert "is not valid JSON" in broken.stderr


def test_refuses_to_start_blind_without_meminfo(tmp_path):
    done = run("--config", write_config(tmp_path / "c.json", proc_root=str(tmp_path / "empty")))
    assert done.returncode == 1
    assert "cannot read" in done.stderr
    assert "meminfo" in done.stderr


@pytest.fixture
def short_dir(tmp_path):
    # A unix socket path must fit in 107 bytes.
    path = tempfile.mkdtemp(prefix="wd-")
    yield path
    subprocess.run(["rm", "-rf", path], check=False)


@pytest.mark.parametrize("dry_run", [False, True])
def test_the_daemon_stops_the_container_when_memory_crosses_the_threshold(tmp_path, short_dir, dry_run):
    proc = FakeProc(tmp_path / "proc")
    proc.set(60)
    textfile = tmp_path / "wd.prom"
    config = write_config(tmp_path / "c.json", proc_root=str(proc.root), docker_socket=f"{short_dir}/docker.sock",
                          containers=[{"name": "vllm", "grace_s": 0}], textfile=str(textfile),
                          inspect_interval_s=0.2)
    with FakeDocker(f"{short_dir}/docker.sock") as docker:
        docker.run("vllm", time.time() - 3600)
        args = [PYTHON, "-I", "-B", str(PROGRAM), "--config", config] + (["--dry-run"] if dry_run else [])
        daemon = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert docker.wait_for(lambda: any(c.path.endswith("/json") for c in docker.calls), 10)
            time.sleep(0.3)
            assert docker.actions() == []
            crossed = time.monotonic()
            proc.set(93)
            if dry_run:
                time.sleep(1.5)
                assert docker.actions() == []
            else:
                # A liveness bound, not a speed test: benchmarks/watchdog_latency.py measures
                # how fast the stop follows the crossing.
                assert docker.wait_for(lambda: docker.actions("stop"), 15), "no stop request within 15 s"
                print(f"stop requested {docker.actions('stop')[0].at - crossed:.3f} s after the crossing")
                assert not docker.containers["vllm"].running
                assert docker.wait_for(lambda: "cooldown" in _state(textfile), 5)
        finally:
            daemon.send_signal(signal.SIGTERM)
            out, err = daemon.communicate(timeout=10)
    assert daemon.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert events[0]["event"] == "start"
    assert events[0]["mlock"]
    assert events[-1]["event"] == "exit"
    stop = next(e for e in events if e["event"] == "stop")
    assert stop["threshold"] == 90
    assert stop.get("dry_run", False) is dry_run


def _state(textfile) -> str:
    try:
        text = textfile.read_text()
    except OSError:
        return ""
    return next((line for line in text.splitlines() if line.endswith(" 1") and "_state{" in line), "")


def test_journal_priority_prefix_under_systemd(tmp_path):
    proc = FakeProc(tmp_path / "proc")
    config = write_config(tmp_path / "c.json", proc_root=str(proc.root), docker_socket=str(tmp_path / "none"))
    env = {**os.environ, "JOURNAL_STREAM": "8:12345"}
    # Unbuffered: a buffered reader would take several lines off the pipe at once and keep
    # all but the first where neither select() nor communicate() can see them.
    daemon = subprocess.Popen([PYTHON, "-I", "-B", str(PROGRAM), "--config", config, "--no-mlock"],
                              stdout=subprocess.PIPE, bufsize=0, env=env)
    lines = []
    try:
        deadline = time.monotonic() + 20
        while not any("docker_unavailable" in line for line in lines) and time.monotonic() < deadline:
            if select.select([daemon.stdout], [], [], 0.5)[0]:
                lines.append(daemon.stdout.readline().decode())
    finally:
        daemon.send_signal(signal.SIGTERM)
        out = daemon.communicate(timeout=10)[0].decode()
    lines += out.splitlines()
    assert lines[0].startswith('<6>{"event":"start"')
    assert any(line.startswith('<3>{"event":"docker_unavailable"') for line in lines)
    assert lines[-1].startswith('<6>{"event":"exit"')


def read_until_event(daemon: subprocess.Popen, event: str, seconds: float) -> str:
    """The daemon's output read up to its first `event` line, for at most `seconds`, from the
    pipe's descriptor (no buffered reader, so select() sees every byte not yet read)."""
    read = b""
    deadline = time.monotonic() + seconds
    fd = daemon.stdout.fileno()
    while time.monotonic() < deadline and select.select([fd], [], [], deadline - time.monotonic())[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        read += chunk
        if any(json.loads(line)["event"] == event for line in read.split(b"\n")[:-1]):
            return read.decode()
    raise AssertionError(f"no {event} event in {seconds} s: {read.decode()}")


def test_the_daemon_survives_a_malformed_meminfo_and_stops_nothing_meanwhile(tmp_path, short_dir):
    proc = FakeProc(tmp_path / "proc")
    (proc.root / "meminfo").write_text("MemTotal:       127605464 kB\nMemAvailable:\n", encoding="ascii")
    config = write_config(tmp_path / "c.json", proc_root=str(proc.root), docker_socket=f"{short_dir}/docker.sock",
                          containers=[{"name": "vllm", "grace_s": 0}], inspect_interval_s=0.2, poll_slow_s=0.2)
    with FakeDocker(f"{short_dir}/docker.sock") as docker:
        docker.run("vllm", time.time() - 3600)
        daemon = subprocess.Popen([PYTHON, "-I", "-B", str(PROGRAM), "--config", config, "--no-mlock"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(1.5)
            assert daemon.poll() is None, "the daemon exited on a malformed meminfo"
            assert docker.actions() == []
            proc.set(93)  # readable again, and over the threshold: it acts now
            assert docker.wait_for(lambda: docker.actions("stop"), 15), "no stop once meminfo read again"
            # The daemon logs its stop once Docker has taken the request: read up to that line
            # before stopping the daemon (a SIGTERM at once can come before the line).
            early = read_until_event(daemon, "stop", 15)
        finally:
            daemon.send_signal(signal.SIGTERM)
            out, err = daemon.communicate(timeout=10)
    assert "Traceback" not in err, err
    assert "meminfo line 'MemAvailable:' has no number" in err
    events = [json.loads(line) for line in (early + out).splitlines()]
    error = next(e for e in events if e["event"] == "meminfo_error")
    assert "MemAvailable" in error["error"]
    assert [e["event"] for e in events].index("meminfo_ok") < [e["event"] for e in events].index("stop")
