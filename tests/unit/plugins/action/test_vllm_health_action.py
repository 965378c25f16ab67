# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The health gate's action: progress messages that name vLLM's start-up phase, the timeout that says
where it was stuck, and the start's figures (time to ready, TTFT, phases) for the record. The module's
slices are played back: each answer as the module on the host gives it."""

from __future__ import annotations

from unittest import mock

import pytest
from ansible.plugins.action import ActionBase

from ansible_collections.sparkfleet.serving.plugins.action import vllm_health as action
from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_startup import iso_utc

STARTED = 1_800_000_000.0
ENGINE = "(EngineCore pid=280) INFO 12-01 10:00:05 [core.py:154] Initializing a V1 LLM engine (v0.34.0) with config:"
LOADING = "(EngineCore pid=280) INFO 12-01 10:00:20 [model_runner.py:412] Loading model from scratch..."
AUTOTUNE = ("(EngineCore pid=280) INFO 12-01 10:05:06 [kernel_warmup.py:603] Using FlashInfer autotune cache file: "
            "/root/.cache/vllm/x.json. Pass --disable-flashinfer-autotune to skip autotuning.")
SERVER = "(APIServer pid=1) INFO 12-01 10:24:00 [entry.py:139] Starting vLLM server on http://0.0.0.0:8000"
READY = "(APIServer pid=1) INFO:     Application startup complete."


def answer(at: float, lines: list[tuple[float, str]] = (), **more: object) -> dict:
    """A slice's answer: the server not up yet, checked `at` seconds after the container started."""
    base = {"state": "waiting", "stage": "none", "detail": "/health: [Errno 111] Connection refused",
            "last_log_line": "INFO ...", "restart_count": 0, "started_at": iso_utc(STARTED),
            "checked_at": STARTED + at, "startup_watched": True,
            "startup_lines": [[STARTED + t, line] for t, line in lines], "log_since": iso_utc(STARTED + at)}
    return {**base, **more}


def gate(answers: list[dict], timeout: float = 1800, clock_step: float = 25.0) -> tuple[dict, list[str], list[dict]]:
    """Runs the action on the answers (one per slice); the wait's clock advances clock_step a slice."""
    plugin = action.ActionModule.__new__(action.ActionModule)
    plugin._task = mock.Mock(args={"timeout": timeout, "progress_interval": 25})
    calls: list[dict] = []
    replies = iter(answers)

    def execute(module_name: str, module_args: dict, task_vars: dict) -> dict:
        calls.append(module_args)
        return next(replies)

    plugin._execute_module = execute
    ticks = iter(range(0, 10_000, int(clock_step)))
    printed: list[str] = []
    with mock.patch.object(ActionBase, "run", return_value={}), \
            mock.patch.object(action.display, "display", side_effect=printed.append), \
            mock.patch.object(action, "sliced_wait",
                              side_effect=lambda run, t, s: ((run(s), float(tick + clock_step)) for tick in ticks)):
        result = plugin.run(task_vars={"inventory_hostname": "spark-1"})
    return result, printed, calls


def test_progress_names_the_phase_from_the_log_and_counts_from_the_containers_start():
    result, printed, calls = gate([
        answer(20, [(5, ENGINE), (20, LOADING)]),
        answer(190, [(20, LOADING), (65, AUTOTUNE)]),
        answer(1450, [(1440, SERVER), (1445, READY)], state="ready", stage="chat", healthy_at=STARTED + 1446,
               ready_at=STARTED + 1447, ttft_s=0.412, detail="/v1/chat/completions answered (2 streamed chunks)"),
    ])
    assert printed[0].startswith("vllm_health: spark-1: vllm: loading weights for 0 s (20 s since the container "
                                 "started; budget 30 min, 29 min 35 s left); passed: none")
    assert printed[1].startswith("vllm_health: spark-1: vllm: autotuning kernels for 2 min 5 s (3 min 10 s since "
                                 "the container started; budget 30 min, 29 min 10 s left)")
    # Each slice after the first reads the log from where the one before stopped.
    assert "log_since" not in calls[0]
    assert calls[1]["log_since"] == iso_utc(STARTED + 20) and calls[1]["read_startup"] is True
    assert result["state"] == "ready"
    startup = result["startup"]
    assert startup["time_to_ready_s"] == 1446.0
    assert startup["ttft_s"] == 0.412
    assert startup["vllm_version"] == "0.34.0"
    assert startup["phases_s"] == {"start": 5.0, "engine": 15.0, "weights": 45.0, "autotune": 1375.0,
                                   "api_server": 5.0}
    assert "startup_lines" not in result


def test_the_same_line_read_twice_counts_once():
    watch = action.StartupWatch()
    watch.add(answer(20, [(5, ENGINE), (20, LOADING)]))
    watch.add(answer(40, [(20, LOADING)]))
    assert len(watch.lines) == 2


def test_a_timeout_says_the_phase_it_was_stuck_in():
    result, _printed, _calls = gate([answer(20, [(5, ENGINE)]), answer(600, [(65, AUTOTUNE)])],
                                    timeout=50, clock_step=25)
    assert result["failed"] is True
    assert result["msg"].startswith("vLLM did not become ready: not ready after 50 s: vLLM was autotuning kernels "
                                    "for the last 8 min 55 s (its last start-up line: ")
    assert "raise vllm_health_timeout" in result["msg"]
    assert "https://github.com/spark-arena/recipe-registry/pull/19" in result["msg"]
    assert result["phase"] == "autotune"


def test_a_container_that_died_says_in_which_phase():
    result, _printed, _calls = gate([answer(20, [(5, ENGINE), (20, LOADING)], state="failed",
                                            reason="container exited with code 1", exit_code=1, log_tail=[])])
    assert result["msg"].startswith("vLLM did not become ready: container exited with code 1 while loading weights.")


def test_a_server_that_answered_at_once_leaves_no_figures_and_stops_reading_its_log():
    result, printed, calls = gate([
        answer(86_400, startup_watched=False, startup_lines=[], state="waiting", stage="models"),
        answer(86_420, startup_watched=False, startup_lines=[], state="ready", stage="chat",
               healthy_at=STARTED + 86_400, ttft_s=0.05),
    ])
    assert calls[1]["read_startup"] is False
    assert result["state"] == "ready"
    assert result["startup"] == {}
    # Its progress says the API server is up (it answered /health), not that vLLM is starting.
    assert printed[0].startswith("vllm_health: spark-1: vllm: API server up (24 h 0 min since the container started;")


def test_a_first_completion_not_streamed_says_why_it_has_no_ttft():
    result, _printed, _calls = gate([
        answer(20, [(5, ENGINE), (15, READY)], state="ready", stage="chat", healthy_at=STARTED + 16,
               ttft_note="the server answered the streamed request with one body"),
    ])
    assert result["startup"]["ttft_s"] is None
    assert result["startup"]["ttft_note"] == "the server answered the streamed request with one body"


@pytest.mark.parametrize("started_at", ["", "0001-01-01T00:00:00Z-ish"])
def test_no_start_time_no_figures(started_at: str):
    watch = action.StartupWatch()
    watch.add(answer(20, [(5, ENGINE)], started_at=started_at))
    assert watch.summary(STARTED + 30, {}) == {}
