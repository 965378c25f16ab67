# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout summary (plugins/plugin_utils/rollout.py) from the outcomes boxes keep."""

from __future__ import annotations

from ansible_collections.sparkfleet.serving.plugins.plugin_utils.rollout import argv_changes, flag_values, summarize

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
