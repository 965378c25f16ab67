"""The fleet playbooks on the cluster, run as a user runs them (playbooks/status.yml, rollout.yml,
benchmark.yml): the cluster is one unit. Status shows it as one row; a rollout of a changed setting
restarts the three members as one canary; a rollout of a change the stand-in vLLM refuses at start (less free
memory than --gpu-memory-utilization asks for: vLLM's "Free memory on device" check) rolls every member
back together, and the cluster serves through its head again; the benchmark runs through the head.

Runs after test_cluster.py (file order), on the cluster it leaves serving. The tests run in this order.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from spark_testinfra import run_playbook

# The scenario's boxes and how to reach them: test_cluster.py's (one place for the scenario's names).
from test_cluster import HEAD, LINK, SECOND, WORKER, box, chat, env, inspect, started

CLUSTER = "trio1"
MEMBERS = list(LINK)
PLAYBOOKS = Path(__file__).resolve().parents[3] / "playbooks"
# The scenario's extra environment (molecule.yml), which -e vllm_extra_env replaces.
EXTRA_ENV = {"VLLM_STANDIN_STARTUP_SECONDS": "3"}
REPORTS = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp")) / "cluster-fleet"
# A rollout stages the weights first (the model role), which would fetch them anew from the scenario's stand-in
# hub: the staged weights get the manifest the model role writes after fetching a selection (model_include) of a
# commit that -e model_revision pins, so that the model role plans from the manifest alone and asks no hub (as
# molecule/preflight/tests/test_site_check_play.py does). The selection is config.json: the stand-in
# shard is a sparse file of 34 GiB, too long to hash here.
COMMIT = "7" * 40
MANIFEST = f"""
import hashlib, json, os
d = "/srv/models/Qwen3.5-35B-A3B-FP8"
st = os.stat(d + "/config.json")
digest = hashlib.sha256(open(d + "/config.json", "rb").read()).hexdigest()
json.dump({{"format": 1, "source": "huggingface", "endpoint": "https://huggingface.co",
           "repo": "Qwen/Qwen3.5-35B-A3B-FP8", "revision": "{COMMIT}", "commit": "{COMMIT}",
           "copied_from": None, "written_at": "2026-11-30T00:00:00Z", "include": ["config.json"], "exclude": [],
           "files": [{{"path": "config.json", "size": st.st_size, "sha256": digest, "mtime": st.st_mtime}}]}},
          open(d + "/sparkfleet-manifest.json", "w"))
"""

# Where each playbook writes its JSON report.
REPORT_VARIABLE = {"status.yml": "status_json_path", "rollout.yml": "rollout_summary_file",
                   "benchmark.yml": "benchmark_json_path"}


def run(playbook: str, report: str, extra: dict) -> tuple[subprocess.CompletedProcess, dict | None]:
    """The playbook with its JSON report written to REPORTS/report (None when it was not written)."""
    REPORTS.mkdir(parents=True, exist_ok=True)
    path = REPORTS / report
    path.unlink(missing_ok=True)
    done = run_playbook(PLAYBOOKS / playbook, {**extra, REPORT_VARIABLE[playbook]: str(path)})
    return done, json.loads(path.read_text()) if path.exists() else None


def test_status_shows_the_cluster_as_one_row():
    done, status = run("status.yml", "status.json", {})
    assert done.returncode == 0, done.stdout[-4000:]
    assert status is not None
    [cluster] = status["clusters"]
    assert (cluster["host"], cluster["head"], cluster["members"]) == (CLUSTER, HEAD, MEMBERS)
    assert cluster["member_containers"] == dict.fromkeys(MEMBERS, "running")
    assert cluster["health"] == "ok" and status["healthy"] == 3
    # Each box's own row stays in the JSON: the workers serve no API and say so.
    rows = {row["host"]: row for row in status["hosts"]}
    assert [rows[name]["cluster_role"] for name in MEMBERS] == ["head", "worker", "worker"]
    for name in (WORKER, SECOND):
        assert rows[name]["health"].startswith("no API (worker of " + CLUSTER), name
    assert f"{HEAD} (head) running, {WORKER} running, {SECOND} running" in done.stdout


@pytest.fixture(scope="module")
def pinned_weights() -> dict:
    """The weights' manifest on every member; the extra variables that pin their commit."""
    for name in MEMBERS:
        box(name).check_output("python3 -c %s", MANIFEST)
    return {"model_revision": COMMIT, "model_include": ["config.json"]}


def test_a_changed_setting_restarts_the_cluster_as_one_canary(pinned_weights):
    before = started()
    done, summary = run("rollout.yml", "rollout-good.json",
                        {**pinned_weights, "vllm_extra_env": {**EXTRA_ENV, "SPARKFLEET_ROLLOUT_MARK": "1"}})
    assert done.returncode == 0, done.stdout[-4000:]
    assert summary is not None and summary["complete"] is True
    # One batch of three hosts: the canary is the whole cluster.
    assert "Batches of hosts, every cluster whole: [3]" in done.stdout
    [unit] = summary["units"]
    assert (unit["name"], unit["members"], unit["state"]) == (CLUSTER, MEMBERS, "deployed")
    assert [entry["batch"] for entry in summary["hosts"]] == [1, 1, 1]
    assert summary["lines"][0].startswith(
        f"cluster {CLUSTER} ({HEAD} head, {WORKER}, {SECOND}): deployed and health-gated")
    for name in MEMBERS:
        assert env(name)["SPARKFLEET_ROLLOUT_MARK"] == "1", name
        assert inspect(name)["State"]["StartedAt"] > before[name], name
    assert chat()


def test_a_change_the_cluster_cannot_serve_rolls_every_member_back(pinned_weights):
    before = {name: inspect(name) for name in MEMBERS}
    # 10 GiB free, where --gpu-memory-utilization 0.75 of the box's 119.7 GiB is asked for.
    bad = {**EXTRA_ENV, "SPARKFLEET_ROLLOUT_MARK": "1", "VLLM_STANDIN_FREE_GIB": "10"}
    done, summary = run("rollout.yml", "rollout-bad.json", {**pinned_weights, "vllm_extra_env": bad})
    assert done.returncode != 0, done.stdout[-4000:]
    assert summary is not None and summary["complete"] is False
    assert summary["rolled_back"] == MEMBERS
    [unit] = summary["units"]
    assert (unit["name"], unit["state"], unit["rolled_back"]) == (CLUSTER, "rolled_back", True)
    line = summary["lines"][0]
    assert line.startswith(f"cluster {CLUSTER} ({HEAD} head, {WORKER}, {SECOND}): FAILED, rolled back"), line
    # The head's diagnosis: vLLM's own text about the memory it found free.
    assert "free memory" in line.lower(), line
    for name in MEMBERS:
        info = inspect(name)
        assert info["State"]["Running"] is True and info["Id"] != before[name]["Id"], name
        assert info["Args"] == before[name]["Args"], name
        assert "VLLM_STANDIN_FREE_GIB" not in env(name), name
    # The head started first, then the workers (the rollback's order).
    assert inspect(HEAD)["State"]["StartedAt"] < inspect(WORKER)["State"]["StartedAt"]
    assert inspect(HEAD)["State"]["StartedAt"] < inspect(SECOND)["State"]["StartedAt"]
    assert chat()


def test_the_benchmark_runs_through_the_head_as_one_row():
    done, bench = run("benchmark.yml", "benchmark.json",
                      {"benchmark_num_prompts": 4, "benchmark_max_concurrency": 2, "benchmark_input_len": 32,
                       "benchmark_output_len": 8})
    assert done.returncode == 0, done.stdout[-4000:]
    assert bench is not None
    [row] = bench["hosts"]
    assert (row["host"], row["members"], row["completed"], row["failed"]) == (CLUSTER, MEMBERS, 4, 0)
    assert list(bench["results"]) == [CLUSTER] and bench["fleet"]["completed"] == 4
