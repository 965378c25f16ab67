"""The controller killed during the download: ansible-playbook SIGKILLed (its whole process
group, as a laptop closed mid-run: no cleanup, no rescue) while the weights download, then the
same playbook run again. site.yml runs the same model role.

The download runs on the box in the transient unit sparkfleet-model-fetch.service
(roles/model/tasks/run.yml), so it owes nothing to the controller: it goes on to its end, each
file fetched once, and the re-run finds the weights complete and verified and changes nothing.
The kill comes when the box's own progress state says the download is under way, never after
a delay. Runs after test_model.py (file order), in a directory of its own, removed at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from spark_testinfra import recap_changed
from test_model import (
    PROJECT,
    SCENARIO,
    clear_log,
    commit_files,
    downloaded_bytes,
    faults,
    hub,
    leftovers,
    playbook,
    record_timing,
    requests_log,
    state_of,
    sums_pass,
)

DIRECTORY = "/srv/models/controller-killed"
UNIT = "sparkfleet-model-fetch.service"
REPO = "Qwen/Qwen3.5-35B-A3B-FP8"


def unit_state(host) -> str:
    return host.check_output(f"systemctl show -p ActiveState --value {UNIT}")


def wait_for(what: str, predicate, timeout: float = 120, poll: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := predicate():
            return found
        time.sleep(poll)
    pytest.fail(f"not within {timeout} s: {what}")


def under_way(state: dict) -> dict | None:
    """The box's progress state once 16 MiB are down (of ~100 MB), else None."""
    return state if state.get("phase") == "downloading" and state.get("bytes_done", 0) >= 16 * 1024 * 1024 else None


@pytest.fixture(scope="module")
def killed(host) -> dict:
    """converge.yml into a fresh directory, throttled (about 20 MiB/s in all, 4 files at once:
    ~5 s for the model), SIGKILLed once the box's state shows 16 MiB downloaded; what the box
    said right after the kill and once the unit ended."""
    faults(host, throttle_bps=5 * 1024 * 1024)
    clear_log(host)
    # The previous run's final state must not be mistaken for this one's progress.
    host.run(f"rm -rf /var/lib/sparkfleet/model/fetch-state.json {DIRECTORY}")
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(PROJECT / ".ansible" / "collections")}
    begin = time.monotonic()
    log = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "controller-killed.log"
    with log.open("w") as out:
        controller = subprocess.Popen(
            ["ansible-playbook", "--inventory", str(Path(env["MOLECULE_INVENTORY_FILE"]).parent),
             "--extra-vars", json.dumps({"model_local_dir": DIRECTORY}), str(SCENARIO / "converge.yml")],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        at_kill = wait_for("the download under way", lambda: under_way(state_of(host)))
    finally:
        os.killpg(controller.pid, signal.SIGKILL)
        controller.wait()
    found = {"at_kill": at_kill, "unit_after_kill": unit_state(host), "controller_rc": controller.returncode}
    wait_for("the download's unit to end", lambda: unit_state(host) not in ("active", "activating"))
    found["final"] = state_of(host)
    found["log"] = requests_log(host)
    faults(host)
    record_timing("controller_killed_seconds", time.monotonic() - begin)
    return found


def test_the_download_goes_on_without_the_controller(killed):
    assert killed["controller_rc"] == -signal.SIGKILL
    assert killed["at_kill"]["bytes_done"] < killed["at_kill"]["bytes_total"], killed["at_kill"]
    assert killed["unit_after_kill"] == "active"
    assert killed["final"]["phase"] == "done", killed["final"]


def test_it_fetched_each_file_once_and_left_the_weights_verified(host, killed):
    files = commit_files(hub(host, "GET", "repos")["repos"][REPO], "main")
    assert downloaded_bytes(killed["log"]) == sum(f["size"] for f in files.values())
    assert sums_pass(host, DIRECTORY)
    assert leftovers(host, DIRECTORY) == []


def test_the_rerun_finds_it_complete_and_changes_nothing(host, killed):
    del killed  # after it
    clear_log(host)
    rerun = playbook("converge.yml", {"model_local_dir": DIRECTORY})
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    assert recap_changed(rerun.stdout) == 0
    assert downloaded_bytes(requests_log(host)) == 0
    assert unit_state(host) == "inactive"
    host.run(f"rm -rf {DIRECTORY}")
