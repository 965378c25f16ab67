"""A rollout whose controller dies: `ansible-playbook playbooks/rollout.yml` killed with SIGKILL
(its whole process group, as a laptop closed mid-run: no cleanup, no rescue) at the worst
moments, each seen on the box itself, then the same rollout run again.

Runs after test_fleet.py and test_gateway.py, on the boxes they leave (each healthy, on a
known-good deployment). Each case rolls out to one box (--limit): the kill concerns the box
being restarted, and the boxes of later batches are the ones test_fleet.py shows a stopped
rollout never touches.

What the box goes through is watched from inside it (../../resources/testinfra/killed_controller.py):
a probe asks its API's /health and `docker inspect`s its container every 0.2 s, so the time it
was without a serving container is measured where a client would see it, whatever the
controller did. The kill is triggered by a watcher in the box that sees the moment come (a
container id changes), never by a delay. In this test bed the controller reaches the boxes
through `docker exec`, where the module of the task that was running when the controller died
goes on to its end on the box (its result is lost, not its Docker calls) and the tasks after
it never run, so the box is read only once it has settled. Over SSH (not tested here) sshd may
hang up the module when the controller's session closes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import killed_controller as probe
import pytest
from killed_controller import OLD_CONTAINER_GONE, ControllerEnded, containers_seen
from spark_testinfra import PROJECT, run_playbook
from test_fleet import BOXES, RECORDS, ROLLOUT, box, by_host, flag, inspect, record, serves

# The rollout summary's own judgement (plugins/plugin_utils/rollout.py), through this checkout's link.
sys.path.insert(0, str(PROJECT / ".ansible" / "collections"))
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.rollout import found_mid_rollout

# The container of the change ran (it failed its gate), and another took its place: the
# rollback's docker_container removed it, last-run.json already naming the known-good deployment
# (written just before, roles/vllm/tasks/container.yml).
CHANGE_REPLACED = ("until c=$(docker inspect -f '{{.Id}} {{.Args}}' vllm 2>/dev/null) "
                   "&& [ \"${c#*--gpu-memory-utilization 0.8}\" != \"$c\" ]; do sleep 0.05; done; "
                   "id=${c%% *}; "
                   "until [ \"$(docker inspect -f '{{.Id}}' vllm 2>/dev/null)\" != \"$id\" ]; do sleep 0.05; done")


def start_rollout(extra: dict, summary: Path, limit: str) -> subprocess.Popen:
    """The rollout in a process group of its own, as a terminal runs it; its output beside the summary."""
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(PROJECT / ".ansible" / "collections")}
    command = ["ansible-playbook", "--inventory", str(Path(env["MOLECULE_INVENTORY_FILE"]).parent), "--limit", limit,
               "--extra-vars", json.dumps({**extra, "rollout_summary_file": str(summary)}), str(ROLLOUT)]
    with summary.with_suffix(".log").open("w") as log:
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def bare(deployment: dict) -> dict:
    """A deployment record without the time it passed its gate and how it started (last-run.json has neither)."""
    return {k: v for k, v in deployment.items() if k not in ("deployed_at", "startup")}


@dataclass
class Box:
    """What one box runs and its records: the container, known-good.json, last-run.json, previous.json."""

    info: dict
    known_good: dict
    last_run: dict
    previous: dict

    @classmethod
    def read(cls, name: str) -> Box:
        # A box deployed once has no previous.json yet.
        previous = record(name, "previous") if box(name).file(f"{RECORDS}/previous.json").exists else {}
        return cls(inspect(name), record(name), record(name, "last-run"), previous)


@dataclass
class Killed:
    """A rollout to one box killed once, then run again: the box before it and once settled
    after the kill, what its probe saw, and the re-run's result and summary."""

    name: str
    change: dict
    before: Box
    after_kill: Box | None = None
    probe: list = field(default_factory=list)
    figures: list = field(default_factory=list)
    result: subprocess.CompletedProcess | None = None
    summary: dict = field(default_factory=dict)


def killed_rollout(tmp: Path, change: dict, name: str, script: str, rerun: bool = True) -> Killed:
    """Rolls the change out to the box, kills the controller once the script ends in the box,
    reads the box once settled, then (rerun) runs the same rollout again."""
    run = Killed(name, change, Box.read(name))
    probe.start(name)
    try:
        controller = start_rollout(change, tmp / "killed.json", name)
        killed_at = probe.kill_when(controller, name, script.replace("OLD_ID", run.before.info["Id"]))
        probe.settled(name)
        run.after_kill = Box.read(name)
    except (ControllerEnded, TimeoutError) as error:
        pytest.fail(str(error))
    finally:
        run.probe = probe.stop(name)
    run.figures = probe.outages(run.probe, killed_at)
    report(tmp, run.figures)
    if not rerun:
        return run
    summary = tmp / "rerun.json"
    run.result = run_playbook(ROLLOUT, {**change, "rollout_summary_file": str(summary)}, limit=name)
    run.summary = json.loads(summary.read_text()) if summary.exists() else {}
    return run


def report(tmp: Path, figures: list[dict]) -> None:
    """The figures, for a failing test's message and whoever reads the scenario's files."""
    case = tmp.name.rstrip("0123456789")
    out = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", tmp)) / f"{case}.json"
    out.write_text(json.dumps(figures, indent=2))
    print(case, json.dumps(figures))


# --- killed while the canary restarts -----------------------------------------------------------

@pytest.fixture(scope="module")
def third_box() -> dict:
    """The box neither case rolls out to, before both."""
    return inspect(BOXES[2])


@pytest.fixture(scope="module")
def killed_restart(third_box, tmp_path_factory) -> Killed:
    """A --max-num-seqs the first box does not run, rolled out to it; the controller killed the
    moment its old container stops running, before the new one is gated."""
    seqs = next(n for n in (4, 6, 12) if flag(inspect(BOXES[0]), "--max-num-seqs") != str(n))
    del third_box  # read before it
    return killed_rollout(tmp_path_factory.mktemp("killed-restart"), {"vllm_max_num_seqs": seqs}, BOXES[0],
                          OLD_CONTAINER_GONE)


def what_a_rerun_finds(after: Box) -> bool:
    """Whether the next rollout's summary will say the box was found mid-rollout: its judgement
    of the records phase 1 reads (playbooks/rollout.yml, "Mark the box as staged")."""
    return found_mid_rollout({"before": after.known_good, "last_run": after.last_run})


def gated_before_the_kill(run: Killed) -> bool:
    """Whether the new container passed its gate before the kill landed (the kill comes within
    a fraction of a second of the old container's stop, the gate seconds later: not expected,
    but then known-good.json says so, and so must the re-run)."""
    return bare(run.after_kill.known_good) != bare(run.before.known_good)


def test_the_box_serves_again_without_the_controller(killed_restart):
    run = killed_restart
    # One restart, the old container then the new one: the module that made it anew ran to its
    # end on the box, the controller long dead.
    assert containers_seen(run.probe) == [run.before.info["Id"], run.after_kill.info["Id"]], run.figures
    assert run.after_kill.info["Id"] != run.before.info["Id"]
    assert run.probe[-1][1] == "up" and run.figures and run.figures[-1]["closed"], run.figures


def test_the_records_say_what_runs_and_only_what_passed_a_gate(killed_restart):
    run = killed_restart
    after = run.after_kill
    # The killed run made the container of the change, and last-run.json names it...
    assert flag(after.info, "--max-num-seqs") == str(run.change["vllm_max_num_seqs"])
    assert ["serve", *after.last_run["argv"]] == after.info["Args"]
    if gated_before_the_kill(run):
        # ...known-good.json names it only once it passed its gate, the one before kept as previous.
        assert bare(after.known_good) == after.last_run and after.previous == run.before.known_good
    else:
        # ...and known-good.json is still the deployment that passed a gate: the change never did.
        assert after.known_good == run.before.known_good and after.previous == run.before.previous


def test_rerunning_the_killed_rollout_finishes_it_and_says_what_it_found(killed_restart):
    run = killed_restart
    assert run.result.returncode == 0, run.result.stdout[-3000:]
    assert run.summary["complete"] is True
    entry = by_host(run.summary)[run.name]
    assert what_a_rerun_finds(run.after_kill) is not gated_before_the_kill(run)
    if gated_before_the_kill(run):
        assert (entry["state"], run.summary["found_mid_rollout"]) == ("unchanged", []), entry
        assert "found mid-rollout" not in entry["line"]
    else:
        assert (entry["state"], run.summary["found_mid_rollout"]) == ("deployed", [run.name]), entry
        assert "found mid-rollout" in entry["line"]
    # It already ran the change: gated and recorded, not restarted again.
    info = inspect(run.name)
    assert info["Id"] == run.after_kill.info["Id"]
    assert bare(record(run.name)) == record(run.name, "last-run")
    assert ["serve", *record(run.name)["argv"]] == info["Args"]
    assert record(run.name, "previous") == run.before.known_good
    assert serves(run.name)


# --- killed while a box that cannot serve the change is rolled back -------------------------------

@pytest.fixture(scope="module")
def killed_rollback(killed_restart, tmp_path_factory) -> Killed:
    """After it: gpu_memory_utilization 0.8 rolled out to the second box, which cannot serve it
    (see molecule.yml); the controller killed once the rollback's container takes the place of
    the change's. Not run again: the box is back where test_fleet.py's failed rollout starts,
    whose run shows what this change's rollout does there (the records below say it is there)."""
    del killed_restart  # after it
    return killed_rollout(tmp_path_factory.mktemp("killed-rollback"), {"vllm_gpu_memory_utilization": 0.8}, BOXES[1],
                          CHANGE_REPLACED, rerun=False)


def test_the_box_killed_in_its_rollback_is_back_on_its_known_good_deployment(killed_rollback):
    run = killed_rollback
    after = run.after_kill
    # The old container, the change's, the rollback's: each made once, the last by a module that
    # ran to its end on the box.
    seen = containers_seen(run.probe)
    assert len(seen) == 3 and seen[0] == run.before.info["Id"] and seen[-1] == after.info["Id"], run.figures
    assert after.info["Args"] == run.before.info["Args"]
    assert serves(run.name)


def test_its_records_say_it_runs_its_known_good_deployment(killed_rollback):
    run = killed_rollback
    after = run.after_kill
    assert (after.known_good, after.previous) == (run.before.known_good, run.before.previous)
    # last-run.json names the known-good deployment it runs, not the change that failed: the next
    # rollout finds it on a deployment that passed its gate, not mid-rollout.
    assert after.last_run == bare(after.known_good) and ["serve", *after.last_run["argv"]] == after.info["Args"]
    assert what_a_rerun_finds(after) is False


def test_the_other_box_was_never_touched(third_box, killed_rollback):
    """--limit: the third box kept its container through both killed rollouts and their re-runs."""
    del killed_rollback  # after it
    info = inspect(BOXES[2])
    assert (info["Id"], info["State"]["StartedAt"]) == (third_box["Id"], third_box["State"]["StartedAt"])
