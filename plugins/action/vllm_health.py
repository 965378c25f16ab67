# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action of sparkfleet.serving.vllm_health: the long wait, with progress and diagnosis.

A module cannot print while it runs, and a first model load takes 10-15 minutes. So the
wait is cut in slices: the module polls the server on the host every poll_interval for
at most progress_interval seconds; between slices this action prints the elapsed time
and the latest log line. When the container dies or the timeout passes, the task fails
with the diagnosis and the last log lines.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_diagnosis import summarize
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.waiting import sliced_wait, wait_slices

display = Display()
MODULE = "sparkfleet.serving.vllm_health"


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

        def run_slice(seconds: float) -> dict:
            module_args = dict(args, wait_seconds=seconds)
            if baseline is not None:
                module_args["baseline_restarts"] = baseline
            return self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars)

        for answer, elapsed in sliced_wait(run_slice, timeout, slice_seconds):
            if answer.get("failed"):
                result.update(answer)
                return result
            if baseline is None:
                # Restarts from here on mean the container crashed (restart policy unless-stopped).
                baseline = answer.get("restart_count", 0)
            # When /health first answered, even if that was in an earlier slice.
            healthy_at = healthy_at or answer.get("healthy_at")
            if healthy_at:
                answer["healthy_at"] = healthy_at
            answer["elapsed"] = round(elapsed, 1)
            state = answer.get("state")
            if state == "ready":
                result.update(answer)
                return result
            if state == "failed" or elapsed >= timeout:
                why = answer.get("reason") if state == "failed" else (
                    f"not ready after {timeout:.0f} s (last stage passed: {answer.get('stage')}, "
                    f"last probe: {answer.get('detail')}); raise vllm_health_timeout if the first load is slow")
                result.update(answer)
                result["failed"] = True
                result["msg"] = f"vLLM did not become ready: {why}.\n" + summarize(
                    answer.get("log_tail"), answer.get("log_tail"), answer.get("exit_code"), args.get("release"))
                return result
            display.display(
                f"vllm_health: {host}: waiting {elapsed:.0f}s/{timeout:.0f}s, passed: {answer.get('stage')}, "
                f"{answer.get('detail')}; log: {answer.get('last_log_line', '')[:200]}")
        return result
