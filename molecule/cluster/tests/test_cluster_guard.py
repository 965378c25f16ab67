"""The cluster guard on each worker (roles/vllm/files/sparkfleet_vllm_cluster_guard.py, run by
sparkfleet-vllm-cluster-guard@vllm.service): a headless worker does not notice that its head is gone, so the guard
watches the head's master port (torch's store, which the stand-in keeps open while it serves, as vLLM's head does)
and, once the head has been unreachable for vllm_cluster_head_lost_s (30 s, the default), stops the worker and
records why. Every worker has its own guard (two here, of three members), each watching the head alone. The cluster
is then down as one unit, the status says why, the boot unit leaves the workers stopped, and the next run serves
again with every member: after the head's vLLM killed, and after its box powered off (the head, back at boot, does
not find its workers and gives up). vllm_cluster_head_lost_s: 0 removes the guards.

Runs after test_cluster.py and test_cluster_fleet.py (file order), on the cluster they leave serving. The tests run
in this order.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path

# The scenario's boxes, how to reach them and how it runs the role again: test_cluster.py's (one place for them).
import test_cluster
from spark_testinfra import eventually, recap_changed, run_playbook
from test_cluster import HEAD, LINK, SCENARIO, WORKER, WORKERS, box, inspect, started

SERVICE = "sparkfleet-vllm-cluster-guard@vllm.service"
# The container's own unit file (roles/vllm/vars/main.yml, __vllm_cluster_guard_unit).
UNIT = f"/etc/systemd/system/{SERVICE}"
PROGRAM = "/usr/local/lib/sparkfleet/sparkfleet-vllm-cluster-guard"
RECORD = "/var/lib/sparkfleet/vllm/cluster-guard-vllm.json"
BOOT = ("/usr/local/lib/sparkfleet/sparkfleet-vllm-cluster-boot start vllm /var/lib/sparkfleet/vllm"
        " /var/lib/sparkfleet-watchdog/stopped")
MASTER = f"{LINK[HEAD]}:29501"
# The role's default bound, and the guard's look every 2 s.
BOUND, INTERVAL = 30, 2
REPORT = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp")) / "cluster-guard-status.json"


def docker_time(text: str) -> float:
    """Docker's RFC 3339 with nanoseconds (State.StartedAt, FinishedAt) as epoch seconds."""
    whole, fraction = [*text.rstrip("Z").split(".", 1), "0"][:2]
    base = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    return base + float(f"0.{fraction}")


def guard_journal(worker: str = WORKER) -> str:
    return box(worker).check_output(f"journalctl -b -u {SERVICE} --no-pager -o cat")


def show_timing(capsys, fault: str, seconds: float) -> None:
    """In the verify step's output (where CI's log keeps it), although the test passes."""
    with capsys.disabled():
        print(f"\n[cluster guard] {fault} -> worker stopped: {seconds:.2f} s (bound {BOUND} s, a look every"
              f" {INTERVAL} s)")


def worker_stopped_after(end: float, worker: str = WORKER) -> tuple[float, dict]:
    """Once the guard has stopped the worker: the seconds from `end` (the head's end) to the worker's, as Docker
    recorded it (one clock: the boxes share the kernel), and the guard's record."""
    assert eventually(lambda: not inspect(worker)["State"]["Running"], BOUND + 30), guard_journal(worker)
    state = inspect(worker)["State"]
    # Stopped as `docker stop` stops it: not the power cut's 255, and Docker does not restart it.
    assert state["ExitCode"] != 255 and not state["Restarting"]
    record = json.loads(box(worker).file(RECORD).content_string)
    assert (record["reason"], record["head"], record["head_lost_s"]) == ("head unreachable", MASTER, BOUND)
    assert record["stopped_by"] == "sparkfleet-vllm-cluster-guard"
    # The bound, the look after it, the look again before acting and the stop itself.
    assert BOUND <= docker_time(record["stopped_at"]) - docker_time(record["unreachable_since"]) <= BOUND + 8
    assert f"its cluster's head {MASTER} (the master port, torch.distributed's store) was unreachable since" \
        in record["message"]
    assert record["message"] in guard_journal(worker)
    return docker_time(state["FinishedAt"]) - end, record


def test_each_worker_alone_watches_its_heads_master_port():
    head = box(HEAD)
    assert not head.file(UNIT).exists and not head.file(PROGRAM).exists
    for name in WORKERS:
        worker = box(name)
        assert worker.check_output(f"systemctl is-enabled {SERVICE}") == "enabled", name
        assert worker.check_output(f"systemctl is-active {SERVICE}") == "active", name
        assert eventually(lambda n=name: f"head {MASTER} reachable" in guard_journal(n), 30), guard_journal(name)
        assert f"vllm: watches its head {MASTER} every 2 s; stops it once the head has been unreachable for 30 s" \
            in guard_journal(name)
        # What it looks at: the head's master port, open while the head serves (as torch's store is).
        assert test_cluster.connects(name, LINK[HEAD], 29501)
    assert test_cluster.chat()


def test_a_killed_head_stops_every_worker_within_the_bound_and_the_next_run_serves_again(capsys):
    before = started()
    box(HEAD).check_output(f"kill -9 {inspect(HEAD)['State']['Pid']}")
    end = docker_time(inspect(HEAD)["State"]["FinishedAt"])
    records = {}
    for name in WORKERS:
        taken, records[name] = worker_stopped_after(end, name)
        show_timing(capsys, f"head's vLLM killed ({name})", taken)
        assert BOUND <= taken <= BOUND + 2 * INTERVAL + 5, (name, taken)
        # The head's box is up: its kernel refuses the connection.
        assert records[name]["error"] == "connection refused"
        # The boot unit leaves it stopped, as one stopped by hand, and says why.
        boot = box(name).check_output(BOOT)
        assert "vllm was stopped by the cluster guard, its head gone: left stopped" in boot
        assert not inspect(name)["State"]["Running"]
    record = records[WORKER]
    # The status says why the cluster is down, on the cluster's row and the worker's.
    status = run_playbook(SCENARIO.parents[1] / "playbooks" / "status.yml", {"status_json_path": str(REPORT)})
    assert status.returncode == 0, status.stdout[-4000:]
    report = json.loads(REPORT.read_text())
    [cluster] = report["clusters"]
    why = {name: f"stopped by the cluster guard at {records[name]['stopped_at']}: head {MASTER} unreachable since "
                 f"{records[name]['unreachable_since']}" for name in WORKERS}
    assert cluster["health"] == f"down ({HEAD} exited, " + ", ".join(f"{n} {why[n]}" for n in WORKERS) + ")", \
        cluster["health"]
    assert {row["host"]: row["cluster_guard_stop"] for row in report["hosts"]} == {HEAD: "", **why}
    # The next run starts the cluster anew as one unit, says why the worker was stopped, and the guard lets go.
    out = test_cluster.converge_again()
    assert f"sparkfleet-vllm-cluster-guard stopped vllm at {record['stopped_at']}" in out
    test_cluster.assert_started_anew(before)
    for name in WORKERS:
        assert eventually(lambda n=name: not box(n).file(RECORD).exists, 10), f"the guard's record stayed on {name}"
        assert "vllm: runs again" in guard_journal(name)


def test_a_head_box_powered_off_stops_the_worker_and_the_cluster_stays_down_until_the_next_run(capsys):
    """The head's box loses its power: nothing answers on the link any more. When the box boots again its boot unit
    starts the head (Docker marked it killed), which waits for the stopped workers until its rendezvous timeout and
    fails: the cluster stays down as one unit, with the reasons on the boxes, until the next run."""
    before = started()
    subprocess.run(["docker", "kill", HEAD], check=True, capture_output=True)
    off = docker_time(json.loads(subprocess.check_output(["docker", "inspect", HEAD]))[0]["State"]["FinishedAt"])
    for name in WORKERS:
        taken, record = worker_stopped_after(off, name)
        show_timing(capsys, f"head's box powered off ({name})", taken)
        assert BOUND <= taken <= BOUND + 2 * INTERVAL + 5, (name, taken)
        assert record["error"] != "connection refused"
    subprocess.run(["docker", "start", HEAD], check=True, capture_output=True)

    def head_gave_up() -> bool:
        # The box boots first: its Docker engine does not answer until docker.service is up.
        found = box(HEAD).run("docker inspect vllm")
        if found.rc != 0:
            return False
        state = json.loads(found.stdout)[0]["State"]
        return state["StartedAt"] > before[HEAD] and state["Status"] == "exited"
    assert eventually(head_gave_up, 240, interval=2), box(HEAD).run("docker inspect vllm").stdout[-2000:]
    # The head alone of the three joined its store.
    assert "1/3 clients joined" in box(HEAD).check_output("docker logs vllm 2>&1")
    for name in WORKERS:
        assert not inspect(name)["State"]["Running"] and box(name).file(RECORD).exists, name
    test_cluster.converge_again()
    test_cluster.assert_started_anew(before)
    for name in WORKERS:
        assert eventually(lambda n=name: not box(n).file(RECORD).exists, 10), f"the guard's record stayed on {name}"


def test_no_bound_removes_the_guard_and_the_default_puts_it_back_without_touching_the_cluster():
    before = started()
    done = run_playbook(SCENARIO / "converge.yml", {"vllm_cluster_head_lost_s": 0})
    assert done.returncode == 0, done.output[-4000:]
    for name in WORKERS:
        worker = box(name)
        assert not worker.file(UNIT).exists and not worker.file(PROGRAM).exists, name
        assert worker.run(f"systemctl is-active {SERVICE}").stdout.strip() == "inactive", name
    again = test_cluster.converge_again()
    assert recap_changed(again) > 0
    for name in WORKERS:
        assert box(name).check_output(f"systemctl is-active {SERVICE}") == "active", name
        assert box(name).check_output(f"systemctl is-enabled {SERVICE}") == "enabled", name
    # Neither run restarted a member: the guard is beside the cluster, not part of it.
    assert started() == before
    assert test_cluster.answers()
