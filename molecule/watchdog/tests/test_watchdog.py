"""Verify the memory watchdog on a simulated Spark: a hardened systemd service that makes
the box's REAL Docker engine stop the `vllm` container when (test-controlled) meminfo
crosses the threshold, and the container stays stopped despite `unless-stopped`."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import pytest
from spark_testinfra import recap_changed, run_playbook, set_memory

UNIT = "sparkfleet-watchdog.service"
PROGRAM = "/usr/local/lib/sparkfleet/sparkfleet_watchdog.py"
CONFIG = "/etc/sparkfleet/watchdog.json"
TEXTFILE = "/var/lib/prometheus/node-exporter/sparkfleet_watchdog.prom"
IMAGE = "sparkfleet-sim/busybox"
GRACE = 12  # watchdog_grace_seconds in molecule.yml
CONVERGE = Path(__file__).resolve().parents[1] / "converge.yml"
UNIT_FILE = f"/etc/systemd/system/{UNIT}"


STOP_RECORDS = "/var/lib/sparkfleet-watchdog/stopped"


def unit_properties(host) -> dict[str, str]:
    out = host.check_output(f"systemctl show {UNIT}")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def main_pid(host) -> int:
    return int(host.check_output(f"systemctl show -p MainPID --value {UNIT}"))


def running(host, name: str = "vllm") -> bool:
    return host.run(f"docker inspect -f '{{{{.State.Running}}}}' {name}").stdout.strip() == "true"


def wait_for(predicate, timeout: float, interval: float = 0.1) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def events(host, since: str) -> list[dict]:
    out = host.check_output(f"journalctl -u {UNIT} --since '{since}' -o cat --no-pager")
    return [json.loads(line[line.index("{"):]) for line in out.splitlines() if '{"event"' in line]


def logged(host, since: str, name: str) -> dict:
    """The first `name` event since `since`. journald stores the service's lines a moment
    after they are written, and on a loaded test machine that moment has exceeded 5 s: the
    wait is a liveness bound, not a timing."""
    assert wait_for(lambda: any(e["event"] == name for e in events(host, since)), 20), events(host, since)
    return next(e for e in events(host, since) if e["event"] == name)


def watch_state(host) -> str:
    text = host.run(f"cat {TEXTFILE}").stdout
    return next((line.split('state="')[1].split('"')[0] for line in text.splitlines()
                 if line.startswith("sparkfleet_watchdog_state{") and line.endswith(" 1")), "")


# Like vLLM, exits on SIGTERM (busybox sleep as PID 1 would ignore it).
EXITS_ON_SIGTERM = "sh -c 'trap \"exit 0\" TERM; sleep 3600 & wait'"
IGNORES_SIGTERM = "sleep 3600"


@pytest.fixture
def vllm(host):
    """Starts a `vllm` container (restart policy unless-stopped) with memory at 50%;
    returns the journal time to read the watchdog's events from."""

    def start(command: str = EXITS_ON_SIGTERM) -> str:
        set_memory(host, 50)
        # The previous action's cool-down must be over before a new one can happen.
        assert wait_for(lambda: watch_state(host) in ("idle", "armed"), 15), watch_state(host)
        host.run("docker rm -f vllm")
        since = host.check_output("date '+%Y-%m-%d %H:%M:%S'")
        host.check_output(f"docker run -d --name vllm --restart unless-stopped {IMAGE} {command}")
        assert wait_for(lambda: watch_state(host) == "armed", 10), "the watchdog did not see the container start"
        return since

    yield start
    set_memory(host, 50)
    host.run("docker rm -f vllm")


def seconds_since_start(host) -> float:
    started = host.check_output("date -d \"$(docker inspect -f '{{.State.StartedAt}}' vllm)\" +%s.%N")
    return float(host.check_output("date +%s.%N")) - float(started)


def test_unit_is_active_enabled_and_restarts_always(host):
    service = host.service("sparkfleet-watchdog")
    assert service.is_running
    assert service.is_enabled
    props = unit_properties(host)
    assert props["Restart"] == "always"
    assert props["OOMScoreAdjust"] == "-1000"
    assert "docker.service" in props["After"].split()
    assert "docker.service" in props["Wants"].split()
    assert props["ExecStart"].find(f"{PROGRAM} --config {CONFIG}") > 0


def test_unit_is_sandboxed(host):
    props = unit_properties(host)
    expected = {
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "PrivateNetwork": "yes",
        "NoNewPrivileges": "yes",
        "RestrictAddressFamilies": "AF_UNIX",
        "MemoryMax": str(64 * 1024 * 1024),
        "MemorySwapMax": "0",
        "LimitMEMLOCK": "infinity",
        "CapabilityBoundingSet": "cap_ipc_lock",
        "ProtectKernelTunables": "yes",
        "ProtectControlGroups": "yes",
        "MemoryDenyWriteExecute": "yes",
        "LockPersonality": "yes",
        "RestrictNamespaces": "yes",
    }
    assert {key: props.get(key) for key in expected} == expected
    assert props["SystemCallFilter"]
    assert props["ReadWritePaths"] == "-/var/lib/prometheus/node-exporter"
    assert props["StateDirectory"] == "sparkfleet-watchdog"


def test_the_running_process_is_confined(host):
    pid = main_pid(host)
    status = host.file(f"/proc/{pid}/status").content_string
    assert "NoNewPrivs:\t1" in status
    assert "Seccomp:\t2" in status
    # Its own mount and network namespaces; / is read-only inside them.
    for ns in ("mnt", "net"):
        assert host.check_output(f"readlink /proc/{pid}/ns/{ns}") != host.check_output(f"readlink /proc/1/ns/{ns}")
    root = next(line.split() for line in host.file(f"/proc/{pid}/mountinfo").content_string.splitlines()
                if line.split()[4] == "/")
    assert "ro" in root[5].split(",")
    rss_kib = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    assert rss_kib < 25 * 1024


def test_deployed_config_passes_its_own_check_and_a_bad_one_does_not(host):
    ok = host.run(f"python3 -I -B {PROGRAM} --check-config --config {CONFIG}")
    assert ok.rc == 0, ok.stderr
    assert "watching vllm (startup 96% for 12 s, steady 90%, ceiling 98%)" in ok.stdout
    host.check_output("""printf '{"steady_threshold": 97}' > /tmp/wd-bad.json""")
    bad = host.run(f"python3 -I -B {PROGRAM} --check-config --config /tmp/wd-bad.json")
    assert bad.rc == 2
    assert "steady_threshold 97 <= startup_threshold 96" in bad.stderr


def test_a_rerun_puts_back_what_was_changed_on_the_box(host):
    """The role reads its files in one call and skips its copy and template tasks when they
    are as it would write them: anything else on the box must still be put back."""
    host.check_output(f"chmod 0600 {PROGRAM} && echo '# edited by hand' >> {UNIT_FILE}")
    host.check_output(f"printf '{{}}' > {CONFIG}")
    before = main_pid(host)
    result = run_playbook(CONVERGE)
    assert result.returncode == 0, result.stdout[-3000:]
    assert recap_changed(result.stdout) >= 3
    assert host.file(PROGRAM).mode == 0o644
    assert "# edited by hand" not in host.file(UNIT_FILE).content_string
    assert json.loads(host.file(CONFIG).content_string)["containers"][0]["name"] == "vllm"
    # The handler restarted the service onto the repaired files.
    assert wait_for(lambda: main_pid(host) not in (0, before), timeout=30)
    again = run_playbook(CONVERGE)
    assert again.returncode == 0, again.stdout[-3000:]
    assert recap_changed(again.stdout) == 0


def test_grace_then_steady_threshold_stops_the_real_container(host, vllm):
    since = vllm()
    started = host.check_output("docker inspect -f '{{.State.StartedAt}}' vllm")
    set_memory(host, 93)  # over steady (90), under startup (96): allowed in the grace period
    while seconds_since_start(host) < GRACE - 1.5:
        assert running(host), "stopped during the grace period below the startup threshold"
        time.sleep(0.2)
    assert wait_for(lambda: not running(host), 10, 0.05), "the watchdog did not stop the container"
    assert seconds_since_start(host) >= GRACE
    phase = logged(host, since, "phase")
    assert (phase["previous"], phase["phase"], phase["threshold"]) == ("startup", "steady", 90)
    stop = logged(host, since, "stop")
    assert (stop["phase"], stop["threshold"], stop["result"]) == ("steady", 90, "requested")
    assert stop["used_pct"] == pytest.approx(93, abs=0.01)
    assert logged(host, since, "stopped")["http_status"] == 204
    assert not any(e["event"] == "kill" for e in events(host, since)), "a clean stop was escalated"
    # Stopped, not restarted or removed.
    assert host.check_output("docker inspect -f '{{.State.StartedAt}}' vllm") == started


def test_hard_ceiling_stops_at_once_even_in_grace(host, vllm):
    since = vllm()
    set_memory(host, 99)
    # Liveness bound only; the event below proves it acted in the grace period (phase startup).
    assert wait_for(lambda: not running(host), 10, 0.05), "the ceiling did not act within 10 s"
    stop = logged(host, since, "stop")
    assert (stop["phase"], stop["trigger"], stop["threshold"]) == ("startup", "ceiling", 98)


def test_a_container_ignoring_sigterm_is_killed_when_memory_stays_high(host, vllm):
    since = vllm(IGNORES_SIGTERM)
    set_memory(host, 99)
    # kill after 5 s (watchdog_kill_after_seconds), well before Docker's own 10 s.
    assert wait_for(lambda: not running(host), 15, 0.05), "not killed"
    kill = logged(host, since, "kill")
    assert kill["reason"] == "memory not recovered after stop"
    # The watchdog's kill (after its 5 s), not Docker's own at the end of the 10 s stop timeout.
    assert 5 <= kill["after_s"] < 10
    assert host.check_output("docker inspect -f '{{.State.ExitCode}}' vllm") == "137"


def test_stopped_container_stays_stopped_despite_unless_stopped(host, vllm):
    vllm()
    set_memory(host, 99)
    assert wait_for(lambda: not running(host), 10, 0.05)
    set_memory(host, 50)
    pid = main_pid(host)
    assert host.check_output("docker inspect -f '{{.HostConfig.RestartPolicy.Name}}' vllm") == "unless-stopped"
    # Docker recorded a manual stop: neither time nor a daemon restart brings it back.
    host.check_output("systemctl restart docker")
    assert wait_for(lambda: host.run("docker info").rc == 0, 30)
    time.sleep(3)
    assert not running(host)
    # The watchdog rode out the Docker restart: same process, still active.
    assert main_pid(host) == pid
    assert host.service("sparkfleet-watchdog").is_running


def test_a_stop_is_on_record_until_the_container_runs_again(host, vllm):
    """The program writes the stop in force in its state directory, through the unit's sandbox, and removes it
    once the container was started again after the stop."""
    record = f"{STOP_RECORDS}/vllm.json"
    since = vllm()
    set_memory(host, 99)
    assert wait_for(lambda: host.file(record).exists, 10, 0.05), "no stop on record"
    found = json.loads(host.file(record).content_string)
    assert (found["container"], found["trigger"], found["threshold"]) == ("vllm", "ceiling", 98)
    assert logged(host, since, "stop_recorded")["path"] == record
    set_memory(host, 50)
    host.check_output("docker start vllm")
    # Cleared at the watchdog's next look at the container (every 2 s at most).
    assert wait_for(lambda: not host.file(record).exists, 10), "the stop stayed on record after a start"
    assert logged(host, since, "stop_cleared")["container"] == "vllm"


def test_prometheus_textfile(host):
    text = host.file(TEXTFILE).content_string
    assert "sparkfleet_watchdog_up 1" in text
    stops = next(line for line in text.splitlines()
                 if line.startswith('sparkfleet_watchdog_actions_total{container="vllm",action="stop"}'))
    assert int(stops.split()[-1]) >= 1


# --- several deployments on one box ----------------------------------------------------------------
# The role's default watches the vllm role's deployments (vllm_deployments), each with its priority. Two run here:
# `chat` (priority 200, a real HTTP server on the box's port 8000) and `coder` (priority 10). Past their grace
# period, with memory over the steady threshold, the watchdog stops one: the lowest priority, and chat keeps answering.
DEPLOYMENTS = [{"name": "chat", "port": 8000, "priority": 200}, {"name": "coder", "port": 8001, "priority": 10}]


def answers(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=3) as conn:
            conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
            return conn.recv(16).startswith(b"HTTP/1.")
    except OSError:
        return False


@pytest.fixture
def two_deployments(host):
    converged = run_playbook(CONVERGE, {"vllm_deployments": DEPLOYMENTS})
    assert converged.returncode == 0, converged.stdout[-3000:]
    set_memory(host, 50)
    assert wait_for(lambda: watch_state(host) in ("idle", "armed"), 15), watch_state(host)
    host.run("docker rm -f chat coder vllm")
    host.run("mkdir -p /tmp/www && echo ok > /tmp/www/index.html")
    host.check_output(f"docker run -d --name chat --network host -v /tmp/www:/www --restart unless-stopped {IMAGE} "
                      "httpd -f -p 8000 -h /www")
    host.check_output(f"docker run -d --name coder --restart unless-stopped {IMAGE} {EXITS_ON_SIGTERM}")
    yield host.check_output("date '+%Y-%m-%d %H:%M:%S'")
    set_memory(host, 50)
    host.run("docker rm -f chat coder")
    restored = run_playbook(CONVERGE)
    assert restored.returncode == 0, restored.stdout[-3000:]


def test_with_two_deployments_the_lowest_priority_is_stopped_and_the_other_keeps_serving(host, two_deployments):
    config = json.loads(host.file(CONFIG).content_string)
    assert [(c["name"], c.get("priority")) for c in config["containers"]] == [("chat", 200), ("coder", 10)]
    # The box's address on the test bed's network, as the controller reaches it.
    address = subprocess.check_output(
        ["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
         host.backend.get_hostname()], text=True).strip()
    assert wait_for(lambda: answers(address, 8000), 10), "chat's HTTP server does not answer"
    # Past the grace period neither is loading: the rule goes by priority.
    time.sleep(GRACE + 1)
    set_memory(host, 93)
    assert wait_for(lambda: not running(host, "coder"), 15, 0.05), "the watchdog did not stop coder"
    stop = logged(host, two_deployments, "stop")
    assert (stop["container"], stop["chosen_by"]) == ("coder", "priority")
    record = json.loads(host.file(f"{STOP_RECORDS}/coder.json").content_string)
    assert (record["container"], record["chosen_by"]) == ("coder", "priority")
    # The memory recovers (the test says so): chat was never stopped, and answers.
    set_memory(host, 50)
    assert running(host, "chat")
    assert answers(address, 8000)
    assert not any(e["event"] == "stop" and e["container"] == "chat" for e in events(host, two_deployments))
