# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action of sparkfleet.serving.vllm_health: the long wait, with progress and diagnosis.

A module cannot print while it runs, and a first start of vLLM takes 10 to 30 minutes (kernel
autotuning alone 18 minutes and more on a DGX Spark with vLLM 0.26 and later:
https://github.com/spark-arena/recipe-registry/pull/19). So the wait is cut in slices: the module
polls the server on the host every poll_interval for at most progress_interval seconds and reads
the new lines of the container's log that mark vLLM's start-up phases (module_utils/vllm_startup.py);
between slices this action prints the phase vLLM is in, for how long, the time since the container
started and the budget. When the container dies or the timeout passes, the task fails with the
phase it was in, the diagnosis and the last log lines. A start the gate watched (the server did
not answer at its first probe) ends in `startup`: time to ready, the first completion's time to
first token and each phase's duration, which the role keeps in the deployment record.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_diagnosis import summarize
from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_startup import (
    PHASES,
    current_phase,
    duration_text,
    durations,
    logged_version,
    parse_timestamp,
    timeline,
)
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.waiting import sliced_wait, wait_slices

display = Display()
MODULE = "sparkfleet.serving.vllm_health"
SLOW_FIRST_START = ("a first start of vLLM 0.26 or later autotunes its kernels for 18 minutes and more on a "
                    "DGX Spark (https://github.com/spark-arena/recipe-registry/pull/19)")


class StartupWatch:
    """What the gate learns of one start from the slices' answers: the marker lines (deduplicated: each
    slice reads from the last timestamp read, which Docker includes again), the container's start time
    and whether the gate saw the server before it answered."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, str]] = []
        self.seen: set[tuple[float, str]] = set()
        self.log_since = ""
        self.watched: bool | None = None
        self.started_at = ""

    def add(self, answer: dict) -> None:
        if self.watched is None:
            self.watched = bool(answer.get("startup_watched"))
        self.started_at = answer.get("started_at") or self.started_at
        self.log_since = answer.get("log_since") or self.log_since
        for entry in answer.get("startup_lines") or []:
            key = (float(entry[0]), str(entry[1]))
            if key not in self.seen:
                self.seen.add(key)
                self.lines.append(key)
        self.lines.sort(key=lambda entry: entry[0])

    def started(self) -> float | None:
        """The container's start; None for none (Docker says 0001-01-01T00:00:00Z of a container never started)."""
        at = parse_timestamp(self.started_at)
        return at if at is not None and at > 0 else None

    def phase(self) -> tuple[str, float | None]:
        """The phase now and since when; a server that answered at the gate's first probe is up (its start was not
        watched: its log is not read)."""
        if self.watched is False:
            return "ready", None
        return current_phase(timeline(self.lines), self.started())

    def summary(self, healthy_at: float | None, answer: dict) -> dict:
        """The record's `startup`: empty when the gate did not watch the start (the server answered at once:
        the record keeps the figures of the start that was watched)."""
        started = self.started()
        if not self.watched or started is None or not healthy_at:
            return {}
        ttft = answer.get("ttft_s")
        return {"container_started_at": self.started_at, "time_to_ready_s": round(healthy_at - started, 1),
                "ttft_s": ttft, "ttft_note": "" if ttft is not None else answer.get("ttft_note") or "not measured",
                "phases_s": durations(timeline(self.lines), started, healthy_at),
                "vllm_version": logged_version([line for _at, line in self.lines]) or ""}


def progress(watch: StartupWatch, answer: dict, elapsed: float, timeout: float, now: float) -> str:
    """vllm: autotuning kernels for 2 min 5 s (3 min 10 s since the container started; budget 30 min, 26 min 50 s
    left); the API's last probe and log line."""
    phase, since = watch.phase()
    started = watch.started()
    where = f"vllm: {PHASES.get(phase, phase)}"
    if since is not None and phase != "start":
        where += f" for {duration_text(now - since)}"
    age = f"{duration_text(now - started)} since the container started; " if started is not None else ""
    return (f"{where} ({age}budget {duration_text(timeout)}, {duration_text(max(0.0, timeout - elapsed))} left); "
            f"passed: {answer.get('stage')}, {answer.get('detail')}; log: {answer.get('last_log_line', '')[:200]}")


def stuck(watch: StartupWatch, answer: dict, timeout: float, now: float) -> str:
    """The timeout's reason: the phase vLLM was in, since when, and what to do."""
    phase, since = watch.phase()
    where = PHASES.get(phase, phase)
    if since is not None and phase != "start":
        where += f" for the last {duration_text(now - since)}"
    line = next((text for at, text in reversed(watch.lines)), "")
    seen = f" (its last start-up line: {line.strip()[-160:]!r})" if line else ""
    return (f"not ready after {timeout:.0f} s: vLLM was {where}{seen}; last stage passed: {answer.get('stage')}, "
            f"last probe: {answer.get('detail')}; raise vllm_health_timeout if the start is merely slow: "
            f"{SLOW_FIRST_START}")


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp: str | None = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        try:
            timeout, slice_seconds = wait_slices(args, 1800.0)
        except ValueError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        host = (task_vars or {}).get("inventory_hostname", "?")
        baseline = args.get("baseline_restarts")
        healthy_at = None
        watch = StartupWatch()

        def run_slice(seconds: float) -> dict:
            module_args = dict(args, wait_seconds=seconds)
            if baseline is not None:
                module_args["baseline_restarts"] = baseline
            # After the first slice: go on reading the log only for a start the gate watches.
            if watch.watched is not None:
                module_args.update(read_startup=bool(watch.watched), log_since=watch.log_since)
            return self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars)

        for answer, elapsed in sliced_wait(run_slice, timeout, slice_seconds):
            if answer.get("failed"):
                result.update(answer)
                return result
            watch.add(answer)
            if baseline is None:
                # Restarts from here on mean the container crashed (restart policy unless-stopped).
                baseline = answer.get("restart_count", 0)
            # When /health first answered, even if that was in an earlier slice.
            healthy_at = healthy_at or answer.get("healthy_at")
            if healthy_at:
                answer["healthy_at"] = healthy_at
            answer["elapsed"] = round(elapsed, 1)
            # The host's clock, as the log's timestamps and the container's start are (the controller's may differ).
            now = float(answer.get("checked_at") or 0.0)
            phase, _since = watch.phase()
            answer["phase"] = phase
            answer.pop("startup_lines", None)
            state = answer.get("state")
            if state == "ready":
                result.update(answer)
                result["startup"] = watch.summary(healthy_at, answer)
                return result
            if state == "failed" or elapsed >= timeout:
                why = (f"{answer.get('reason')} while {PHASES.get(phase, phase)}" if state == "failed"
                       else stuck(watch, answer, timeout, now))
                result.update(answer)
                result["failed"] = True
                result["msg"] = f"vLLM did not become ready: {why}.\n" + summarize(
                    answer.get("log_tail"), answer.get("log_tail"), answer.get("exit_code"), args.get("release"))
                return result
            display.display(f"vllm_health: {host}: {progress(watch, answer, elapsed, timeout, now)}")
        return result
