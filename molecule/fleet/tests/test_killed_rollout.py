"""A rollout whose controller dies: `ansible-playbook playbooks/rollout.yml` killed with SIGKILL
(its whole process group, as a laptop closed mid-run: no cleanup, no rescue) at the worst
moments, judged from the boxes' side, then the same rollout run again.

Runs after test_fleet.py, on the boxes it leaves: every box healthy and on a known-good
deployment (the first two on vllm_max_num_seqs 8, the third undone to the profile's 16).

What each box goes through is watched from inside it: a probe asks its API's /health and
`docker inspect`s its container every 0.2 s, so the time it was without a serving container
is measured where a client would see it, whatever the controller did. (In this test bed the
controller reaches the boxes through `docker exec`, as over SSH the module of the task that
was running when the controller died goes on to its end on the box: its result is lost, not
its Docker calls; the tasks after it never run.)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from spark_testinfra import PROJECT
from test_fleet import BOXES, ROLLOUT, box, by_host, flag, inspect, record, rollout, serves

PROBE_LOG = "/tmp/killed-rollout-probe.log"
PROBE_PID = "/tmp/killed-rollout-probe.pid"
# One line every 0.2 s: the time, whether /health answered, the container's id and status.
PROBE = (f"echo $$ > {PROBE_PID}; while :; do "
         "t=$(date +%s.%N); "
         "if curl -fsS --max-time 1 -o /dev/null http://127.0.0.1:8000/health; then h=up; else h=down; fi; "
         "c=$(docker inspect -f '{{.Id}} {{.State.Status}}' vllm 2>/dev/null) || c='none none'; "
         f"echo \"$t $h $c\" >> {PROBE_LOG}; sleep 0.2; done")


def start_probes() -> None:
    for name in BOXES:
        box(name).check_output(f"rm -f {PROBE_LOG}")
        subprocess.run(["docker", "exec", "-d", name, "sh", "-c", PROBE], check=True)


def stop_probes() -> dict[str, list[tuple[float, str, str, str]]]:
    """Each box's probe lines: (time, up/down, container id, container status)."""
    lines = {}
    for name in BOXES:
        box(name).run(f"kill $(cat {PROBE_PID})")
        lines[name] = [(float(t), h, c, s) for t, h, c, s in
                       (line.split() for line in box(name).check_output(f"cat {PROBE_LOG}").splitlines())]
    return lines


def outages(lines: list[tuple[float, str, str, str]]) -> list[dict]:
    """The spans the box's API did not answer: from the first failed probe to the next answer
    (a span still open at the end lasts to the last probe), with the container states seen."""
    spans: list[dict] = []
    for when, health, _, status in lines:
        if health == "down" and (not spans or "end" in spans[-1]):
            spans.append({"start": when, "states": []})
        if spans and "end" not in spans[-1]:
            spans[-1]["states"].append(status)
            if health == "up":
                spans[-1]["end"] = when
    for span in spans:
        span["seconds"] = round(span.get("end", lines[-1][0]) - span["start"], 1)
        # Of it, the time no container ran (stopped, removed, made but not started yet).
        idle = [when for when, _, _, status in lines
                if span["start"] <= when <= span.get("end", lines[-1][0]) and status != "running"]
        span["no_running_container_seconds"] = round(idle[-1] - idle[0] + 0.2, 1) if idle else 0.0
        span["closed"] = "end" in span
        span["states"] = sorted(set(span["states"]))
    return spans


def figures_of(probes: dict, killed_at: float, before: float) -> dict[str, list[dict]]:
    """Each box's outages from `before` seconds ahead of the kill, each with when the box
    served again counted from the kill."""
    figures = {name: outages([p for p in probes[name] if p[0] >= killed_at - before]) for name in BOXES}
    for span in (span for spans in figures.values() for span in spans if span.get("end", 0) >= killed_at):
        span["serving_again_after_kill_seconds"] = round(span["end"] - killed_at, 1)
    return figures


def start_rollout(extra: dict, summary: Path) -> subprocess.Popen:
    """The rollout in a process group of its own, as a terminal runs it; its output beside the summary."""
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(PROJECT / ".ansible" / "collections")}
    command = ["ansible-playbook", "--inventory", str(Path(env["MOLECULE_INVENTORY_FILE"]).parent),
               "--extra-vars", json.dumps({**extra, "rollout_summary_file": str(summary)}), str(ROLLOUT)]
    with summary.with_suffix(".log").open("w") as log:
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def wait_on_box(name: str, condition: str, controller: subprocess.Popen) -> None:
    """Blocks until the shell condition holds inside the box (checked every 0.05 s); fails when
    the controller ends first (the moment to kill it never came)."""
    waiting = subprocess.Popen(["docker", "exec", name, "sh", "-c", f"until {condition}; do sleep 0.05; done"])
    while waiting.poll() is None:
        if controller.poll() is not None:
            waiting.kill()
            pytest.fail(f"the rollout ended (rc {controller.returncode}) before: {condition}")
        time.sleep(0.05)
    assert waiting.returncode == 0, f"could not watch {name} for: {condition}"


def container(field: str) -> str:
    return f"\"$(docker inspect -f '{{{{{field}}}}}' vllm 2>/dev/null)\""


def kill_when(controller: subprocess.Popen, name: str, condition: str) -> None:
    """SIGKILL to the controller's whole process group once the condition holds on the box."""
    try:
        wait_on_box(name, condition, controller)
    finally:
        with contextlib.suppress(ProcessLookupError):  # ended on its own
            os.killpg(controller.pid, signal.SIGKILL)
        controller.wait()


def serves_again(name: str, timeout: float = 120) -> bool:
    """Whether the box serves again on its own (no controller), within timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if box(name).run("curl -fsS --max-time 2 -o /dev/null http://127.0.0.1:8000/health").rc == 0:
            return True
        time.sleep(0.5)
    return False


def runs_last_run(name: str) -> bool:
    """last-run.json names what the container runs."""
    return ["serve", *record(name, "last-run")["argv"]] == inspect(name)["Args"]


@dataclass
class Killed:
    """A rollout killed once, then run again: what the boxes ran before it, right after the
    kill (container, known-good and last-run records), what the probes saw, and the re-run."""

    change: dict
    before: dict = field(default_factory=dict)
    back: bool = False
    after_kill: dict = field(default_factory=dict)
    probes: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)
    result: object = None
    summary: dict = field(default_factory=dict)


def killed_rollout(tmp: Path, change: dict, box_name: str, conditions: list[str]) -> Killed:
    """Runs the rollout of the change, kills it once the conditions held on the box one after
    the other (in the last, CONTAINER_ID is the container's id at that moment), watches the box come
    back alone, then runs the same rollout again."""
    run = Killed(change, {name: (inspect(name), record(name)) for name in BOXES})
    start_probes()
    controller = start_rollout(change, tmp / "killed.json")
    for condition in conditions[:-1]:
        wait_on_box(box_name, condition, controller)
    kill_when(controller, box_name, conditions[-1].replace("CONTAINER_ID", inspect(box_name)["Id"]))
    killed_at = time.time()
    run.back = serves_again(box_name)
    run.after_kill = {name: (inspect(name), record(name), record(name, "last-run")) for name in BOXES}
    run.probes = stop_probes()
    run.result, run.summary = rollout(tmp, change)
    run.figures = figures_of(run.probes, killed_at, 60)
    report(tmp, tmp.name.rstrip("0123456789"), run.figures)
    return run


def report(tmp: Path, case: str, figures: dict) -> None:
    """The figures, for the benchmark notes and a failing test's message."""
    out = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", tmp)) / f"killed-rollout-{case}.json"
    out.write_text(json.dumps(figures, indent=2))
    print(case, json.dumps(figures))


# --- killed while the canary restarts -----------------------------------------------------------

@pytest.fixture(scope="module")
def killed_restart(tmp_path_factory) -> Killed:
    """A --max-num-seqs no box runs, rolled out; the controller killed the moment the canary's
    old container stops running (stopped, removed, or replaced), before the new one is gated."""
    infos = [inspect(name) for name in BOXES]
    seqs = next(n for n in (4, 6, 12) if all(flag(info, "--max-num-seqs") != str(n) for info in infos))
    running_other = f"[ {container('.Id')} != CONTAINER_ID ] || [ {container('.State.Status')} != running ]"
    return killed_rollout(tmp_path_factory.mktemp("killed-restart"), {"vllm_max_num_seqs": seqs}, BOXES[0],
                          [running_other])


def test_the_canary_serves_again_without_the_controller(killed_restart):
    run, canary = killed_restart, BOXES[0]
    assert run.back, run.figures
    # One restart (the old container, then the new one), ended with the box serving: the
    # module that made the container anew ran to its end, the controller long dead.
    ids = list(dict.fromkeys(container_id for _, _, container_id, _ in run.probes[canary]))
    assert ids == [run.before[canary][0]["Id"], run.after_kill[canary][0]["Id"]], run.figures
    assert run.probes[canary][-1][1] == "up" and run.figures[canary][-1]["closed"], run.figures


def test_the_boxes_after_the_canary_were_never_touched(killed_restart):
    run = killed_restart
    for name in BOXES[1:]:
        seen = {(c, status) for _, _, c, status in run.probes[name]}
        assert seen == {(run.before[name][0]["Id"], "running")}, run.figures
        assert run.after_kill[name][0]["Id"] == run.before[name][0]["Id"]


def test_the_records_say_what_runs_and_only_what_passed_a_gate(killed_restart):
    run, canary = killed_restart, BOXES[0]
    info, known_good, last_run = run.after_kill[canary]
    # The killed run made the container anew (its module went on to its end on the box)...
    assert flag(info, "--max-num-seqs") == str(run.change["vllm_max_num_seqs"])
    # ...last-run.json names it...
    assert ["serve", *last_run["argv"]] == info["Args"]
    # ...and known-good.json is still the deployment that passed a gate: the change never did.
    assert known_good == run.before[canary][1]


def test_rerunning_the_killed_rollout_finishes_it_and_says_what_it_found(killed_restart):
    run, canary = killed_restart, BOXES[0]
    assert run.result.returncode == 0, run.result.stdout[-3000:]
    assert run.summary["complete"] is True
    hosts = by_host(run.summary)
    assert [hosts[n]["state"] for n in BOXES] == ["deployed"] * len(BOXES)
    assert run.summary["found_mid_rollout"] == [canary]
    assert "found mid-rollout" in hosts[canary]["line"]
    # The canary already ran the change: gated and recorded, not restarted again.
    assert inspect(canary)["Id"] == run.after_kill[canary][0]["Id"]
    for name in BOXES:
        assert flag(inspect(name), "--max-num-seqs") == str(run.change["vllm_max_num_seqs"])
        assert ["serve", *record(name)["argv"]] == inspect(name)["Args"]
        assert runs_last_run(name)
        assert serves(name)


# --- killed while a box that cannot serve the change is rolled back -------------------------------

@pytest.fixture(scope="module")
def killed_rollback(killed_restart, tmp_path_factory) -> Killed:
    """After it, on its change: the change the second box cannot serve too (test_fleet.py's
    gpu_memory_utilization 0.8: see molecule.yml); the controller killed once the container of
    the change there is replaced by the rollback's."""
    the_change_runs = "docker inspect -f '{{.Args}}' vllm 2>/dev/null | grep -q -- '--gpu-memory-utilization 0.8'"
    return killed_rollout(tmp_path_factory.mktemp("killed-rollback"),
                          {**killed_restart.change, "vllm_gpu_memory_utilization": 0.8}, BOXES[1],
                          [the_change_runs, f"[ {container('.Id')} != CONTAINER_ID ]"])


def test_the_box_killed_in_its_rollback_is_back_on_its_known_good_deployment(killed_rollback):
    run, failing = killed_rollback, BOXES[1]
    info, known_good, last_run = run.after_kill[failing]
    assert run.back, run.figures
    assert info["Args"] == run.before[failing][0]["Args"] and info["State"]["Running"] is True
    assert known_good == run.before[failing][1]
    # last-run.json names the known-good deployment it runs, not the change that failed.
    assert ["serve", *last_run["argv"]] == info["Args"]


def test_rerunning_the_rollout_killed_in_a_rollback_stops_it_again(killed_rollback):
    run = killed_rollback
    hosts = by_host(run.summary)
    assert run.result.returncode != 0 and run.summary["complete"] is False
    # The canary passed its gate in the killed run: already on the change.
    assert [hosts[n]["state"] for n in BOXES] == ["unchanged", "rolled_back", "staged"]
    # The killed rollback had made the known-good container anew and recorded it as run.
    assert run.summary["found_mid_rollout"] == []
    assert flag(inspect(BOXES[0]), "--gpu-memory-utilization") == "0.8"
    assert inspect(BOXES[2])["Id"] == run.before[BOXES[2]][0]["Id"]
    for name in BOXES:
        assert runs_last_run(name)
        assert serves(name)
