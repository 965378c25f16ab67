# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout's batches of units and its summary (plugins/plugin_utils/rollout.py) from the outcomes boxes keep."""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.serving.plugins.plugin_utils.rollout import (
    RolloutError,
    argv_changes,
    flag_values,
    serial_counts,
    summarize,
    units,
)

# As ansible-inventory builds `groups`: two boxes alone and the cluster pair1 (head m1).
GROUPS = {"all": ["s1", "m1", "m2", "s2"], "ungrouped": [], "spark": ["s1", "m1", "m2", "s2"],
          "clusters": ["m1", "m2"], "pair1": ["m1", "m2"]}

OLD = ["/model", "--served-model-name", "qwen3.5-35b", "--gpu-memory-utilization", "0.75", "--enforce-eager"]
NEW = ["/model", "--served-model-name", "qwen3.5-35b", "--gpu-memory-utilization", "0.8", "--max-num-seqs", "8"]


def record(argv: list[str], image_id: str = "sha256:" + "a" * 64) -> dict:
    return {"image": "vllm/vllm-openai:v0.19.1-cu130", "image_id": image_id, "argv": argv,
            "served_model_name": "qwen3.5-35b", "model": {"repo": "Qwen/Qwen3.5-35B-A3B-FP8", "commit": "c2"}}


def test_flag_values_reads_values_flags_and_the_model():
    assert flag_values(OLD) == {"model": "/model", "--served-model-name": "qwen3.5-35b",
                                "--gpu-memory-utilization": "0.75", "--enforce-eager": None}
    assert flag_values(["--max-model-len=16384"]) == {"--max-model-len": "16384"}


def test_argv_changes_names_changed_new_and_removed_flags():
    assert argv_changes(OLD, NEW) == ["--gpu-memory-utilization 0.75 -> 0.8", "--max-num-seqs 8 (new)",
                                      "--enforce-eager removed (was (flag))"]
    assert argv_changes(OLD, OLD) == []


def test_a_rollout_stopped_by_a_rolled_back_box():
    outcomes = {
        "fleet-1": {"state": "deployed", "batch": 1, "before": record(OLD), "after": record(NEW)},
        "fleet-2": {"state": "rolled_back", "batch": 2, "before": record(OLD), "after": record(OLD),
                    "failure": {"task": "Wait until vLLM answers", "message": "vLLM did not become ready",
                                "diagnosis": ["Less free memory at start-up than asked for"]}},
        "fleet-3": {"state": "staged", "before": record(OLD)},
    }
    summary = summarize(outcomes, ["fleet-1", "fleet-2", "fleet-3"])
    assert summary["complete"] is False
    assert summary["deployed"] == ["fleet-1"]
    assert summary["rolled_back"] == ["fleet-2"]
    assert summary["not_reached"] == ["fleet-3"]
    lines = summary["lines"]
    assert lines[0].startswith("fleet-1: deployed and health-gated (batch 1); "
                               "runs vllm/vllm-openai:v0.19.1-cu130 (aaaaaaaaaaaa)")
    assert "changed: --gpu-memory-utilization 0.75 -> 0.8" in lines[0]
    assert "rolled back" in lines[1] and "why: Less free memory at start-up than asked for" in lines[1]
    assert lines[2].startswith("fleet-3: not reached")


def test_a_finished_rollout_is_complete_and_a_missing_host_is_not():
    done = {"a": {"state": "unchanged", "before": record(NEW), "after": record(NEW)}}
    assert summarize(done, ["a"])["complete"] is True
    assert summarize(done, ["a", "b"])["hosts"][1]["state"] == "not_staged"
    assert summarize(done, ["a", "b"])["complete"] is False


def test_the_message_stands_in_for_a_missing_diagnosis():
    outcome = {"state": "rollback_failed", "failure": {"task": "t", "message": "boom"}, "rollback_error": "gone"}
    entry = summarize({"x": outcome}, ["x"])["hosts"][0]
    assert entry["why"] == ["boom"] and entry["rolled_back"] is True
    assert "rollback error: gone" in entry["line"]


def test_environment_changes_are_told_by_key_never_by_value():
    before = {**record(OLD), "env_keys": ["A", "B"], "env_sha256": "1"}
    after = {**record(OLD), "env_keys": ["A", "C"], "env_sha256": "2"}
    entry = summarize({"x": {"state": "deployed", "before": before, "after": after}}, ["x"])["hosts"][0]
    assert entry["changes"] == ["environment changed, added C, removed B"]
    same = {**after, "env_sha256": "1", "env_keys": ["A", "B"]}
    assert summarize({"x": {"state": "deployed", "before": before, "after": same}}, ["x"])["hosts"][0]["changes"] == []


# --- batches of units ---------------------------------------------------------------------------

@pytest.mark.parametrize(("batches", "hosts", "serial"), [
    # One canary unit, half of the 3 units (1), the rest: the cluster's two hosts are one batch.
    ([1, "50%", "100%"], ["s1", "m1", "m2", "s2"], [1, 2, 1]),
    # The cluster first: the canary is the whole cluster.
    ([1, "50%", "100%"], ["m1", "m2", "s1", "s2"], [2, 1, 1]),
    # The last size repeats; the list names every batch.
    ([1], ["s1", "m1", "m2", "s2"], [1, 2, 1]),
    (["2"], ["s1", "m1", "m2", "s2"], [3, 1]),
    ("100%", ["s1", "m1", "m2", "s2"], [4]),
    # Without a cluster, as Ansible's own serial would batch the hosts.
    ([1, "50%", "100%"], ["s1", "s2", "s3", "s4"], [1, 2, 1]),
])
def test_batches_count_units_and_end_between_them(batches, hosts, serial):
    groups = {**GROUPS, "spark": hosts}
    assert serial_counts(batches, hosts, groups) == serial
    assert sum(serial) == len(hosts)


def test_a_units_head_is_the_clusters_and_a_box_is_its_own():
    # pair1's head is its first host in the inventory (m2 here), whatever the play's host order says.
    groups = {**GROUPS, "pair1": ["m2", "m1"]}
    assert units(["s1", "m1", "m2"], groups) == [
        {"name": "s1", "members": ["s1"], "head": "s1", "cluster": False},
        {"name": "pair1", "members": ["m2", "m1"], "head": "m2", "cluster": True}]
    outcomes = {host: {"state": "deployed", "batch": 1, "before": record(OLD), "after": record(NEW)}
                for host in ("m1", "m2")}
    summary = summarize(outcomes, ["m1", "m2"], groups)
    assert summary["units"][0]["head"] == "m2"
    assert summary["lines"][0].startswith("cluster pair1 (m2 head, m1): deployed")


def test_members_apart_in_the_host_order_are_refused():
    with pytest.raises(RolloutError, match=r"pair1 .*not next to each other.*list them together"):
        serial_counts([1], ["m1", "s1", "m2"], GROUPS)


def test_a_member_left_out_of_the_run_is_refused():
    with pytest.raises(RolloutError, match="m2 is not in this run"):
        serial_counts([1], ["s1", "m1"], GROUPS)


@pytest.mark.parametrize("bad", [0, "0%", "-1", "half", True, 1.5, []])
def test_a_batch_size_below_one_unit_is_refused(bad):
    with pytest.raises(RolloutError, match="rollout_batches"):
        serial_counts(bad if bad == [] else [1, bad], ["s1", "s2"], GROUPS)


def test_a_cluster_is_one_line_of_the_summary_with_each_members_why():
    failure = {"state": "rolled_back", "batch": 1, "before": record(OLD), "after": record(OLD)}
    outcomes = {
        "m1": {**failure, "failure": {"task": "Fail with the diagnosis of the head", "message": "no completion",
                                      "diagnosis": ["A member did not join"]}},
        "m2": {**failure, "failure": {"task": "Fail with the diagnosis of this worker", "message": "worker exited"}},
        "s1": {"state": "staged", "before": record(OLD)},
    }
    summary = summarize(outcomes, ["m1", "m2", "s1"], GROUPS)
    assert summary["rolled_back"] == ["m1", "m2"] and summary["not_reached"] == ["s1"]
    assert [u["name"] for u in summary["units"]] == ["pair1", "s1"]
    assert summary["units"][0]["members"] == ["m1", "m2"] and summary["units"][0]["head"] == "m1"
    assert len(summary["lines"]) == 2
    line = summary["lines"][0]
    assert line.startswith("cluster pair1 (m1 head, m2): FAILED, rolled back to its last known-good deployment")
    assert "(batch 1)" in line
    assert "why: m1: A member did not join (in task: Fail with the diagnosis of the head); m2: worker exited" in line
    # Each member's own entry stays in the JSON.
    assert [e["host"] for e in summary["hosts"]] == ["m1", "m2", "s1"]


def test_a_cluster_shows_its_worst_members_state():
    outcomes = {"m1": {"state": "deployed", "batch": 1, "before": record(OLD), "after": record(NEW)},
                "m2": {"state": "rollback_failed", "batch": 1, "rollback_error": "gate failed"}}
    summary = summarize(outcomes, ["m1", "m2"], GROUPS)
    assert summary["units"][0]["state"] == "rollback_failed" and summary["complete"] is False
    assert "rollback error: m2: gate failed" in summary["lines"][0]
    deployed = {"m1": outcomes["m1"], "m2": {**outcomes["m1"]}}
    line = summarize(deployed, ["m1", "m2"], GROUPS)["lines"][0]
    assert line.startswith("cluster pair1 (m1 head, m2): deployed and health-gated (batch 1)")
    assert "changed: --gpu-memory-utilization 0.75 -> 0.8" in line


def test_a_box_running_what_never_passed_its_gate_is_found_mid_rollout():
    """last-run.json (no deployed_at) against known-good.json: another spec is found mid-rollout."""
    gated = {**record(OLD), "deployed_at": "2026-01-01T00:00:00Z"}
    outcomes = {
        "a": {"state": "deployed", "batch": 1, "before": gated, "after": record(NEW), "last_run": record(NEW)},
        "b": {"state": "unchanged", "batch": 2, "before": gated, "after": gated, "last_run": record(OLD)},
        "c": {"state": "unchanged", "batch": 3, "before": gated, "after": gated},
    }
    summary = summarize(outcomes, ["a", "b", "c"])
    assert summary["found_mid_rollout"] == ["a"]
    assert "found mid-rollout" in summary["lines"][0]
    assert all("mid-rollout" not in line for line in summary["lines"][1:])


def test_a_box_with_several_deployments_names_each_and_what_changed_on_it():
    coder_old = {**record(OLD), "served_model_name": "coder"}
    coder_new = {**record(NEW), "served_model_name": "coder"}
    outcome = {"state": "deployed", "batch": 1, "before": record(OLD), "after": record(OLD),
               "before_all": {"vllm": record(OLD), "coder": coder_old},
               "after_all": {"vllm": record(OLD), "coder": coder_new}}
    entry = summarize({"fleet-1": outcome}, ["fleet-1"])["hosts"][0]
    assert [d["name"] for d in entry["deployments"]] == ["vllm", "coder"]
    assert entry["deployments"][0]["changes"] == []
    assert entry["changes"] == ["coder: --gpu-memory-utilization 0.75 -> 0.8", "coder: --max-num-seqs 8 (new)",
                                "coder: --enforce-eager removed (was (flag))"]
    assert "vllm: vllm/vllm-openai:v0.19.1-cu130" in entry["line"] and "as coder" in entry["line"]
    assert "changed: coder: --gpu-memory-utilization 0.75 -> 0.8" in entry["line"]


def test_a_deployment_added_to_a_box_is_named_new():
    outcome = {"state": "deployed", "before": record(OLD), "after": record(OLD),
               "before_all": {"vllm": record(OLD)}, "after_all": {"vllm": record(OLD), "coder": record(NEW)}}
    entry = summarize({"b": outcome}, ["b"])["hosts"][0]
    assert entry["changes"] == ["coder: new"]


def test_one_deployment_keeps_the_single_line():
    outcome = {"state": "deployed", "before": record(OLD), "after": record(NEW),
               "before_all": {"vllm": record(OLD)}, "after_all": {"vllm": record(NEW)}}
    line = summarize({"b": outcome}, ["b"])["lines"][0]
    assert line == summarize({"b": {k: v for k, v in outcome.items() if not k.endswith("_all")}}, ["b"])["lines"][0]
