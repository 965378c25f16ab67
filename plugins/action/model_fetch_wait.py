# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action of sparkfleet.serving.model_fetch_wait: the download's wait, with progress.

A module cannot print while it runs, and 35 GB take from minutes to hours. So the wait is
cut in slices: the module reads the download's state file on the box for at most
progress_interval seconds; between slices this action prints, per host, bytes done /
total, percent, rate and ETA. The download itself runs in a systemd unit on the box, so a
timeout here (or a dropped SSH connection) does not stop it: the next run waits again.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.sparkfleet.serving.plugins.module_utils.model_plan import human_bytes, progress_line
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.waiting import sliced_wait, wait_slices

display = Display()
MODULE = "sparkfleet.serving.model_fetch_wait"

# What to do about each error kind the download program reports, naming the role's variables.
HINTS = {
    "RepoNotFound": "Check model_repo_id (owner/name, as on the hub's page) and model_source; a private repository "
                    "answers the same without a valid model_token.",
    "RevisionNotFound": "Check model_revision: a branch, tag or commit of that repository.",
    "EntryNotFound": "A file of the listing is missing on the hub: check model_include / model_exclude and "
                     "model_revision.",
    "GatedRepo": "The repository is gated: accept its conditions on the hub's page with your account, then set "
                 "model_token (from Ansible Vault) to a read token of that account.",
    "BadToken": "The hub refused model_token: create a new read token and put it in Ansible Vault.",
    "HubUnreachable": "The box cannot reach the hub: set model_endpoint to a mirror the box can reach (or fix its "
                      "DNS, proxy or firewall).",
    "DiskFull": "Free space on the weights' filesystem or point model_local_dir at a larger one "
                "(model_disk_margin_bytes is the margin kept).",
    "HashMismatch": "The hub served bytes whose sha256 differs from its own listing; nothing corrupt was kept in "
                    "place. Run again later or use another model_endpoint.",
    "NotWritable": "Set model_local_dir to a writable directory, or remount the one given read-write.",
    "SeedUnreachable": "The seed box could not serve its copy: check model_seed_host / model_seed_address / "
                       "model_seed_port, or set model_lan_copy: false.",
}


def failure_message(state: dict, journal: list[str] | None, unit: str) -> str:
    error = state.get("error") or {}
    kind, message = error.get("kind"), error.get("message")
    if kind or message:
        # The program's own messages usually say what to do already; the hint names the variable otherwise.
        hint = f" {HINTS[kind]}" if kind in HINTS and "model_" not in (message or "") else ""
        return f"The model download failed: {kind or 'error'}: {message or ''}".rstrip() + hint
    tail = "\n".join((journal or [])[-20:])
    return (f"The model download stopped without saying why (state: {state.get('phase') or 'none'}); "
            f"`journalctl -u {unit}` on the box says:\n{tail}")


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp: str | None = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        try:
            timeout, slice_seconds = wait_slices(args, 21600.0)
        except ValueError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        host = (task_vars or {}).get("inventory_hostname", "?")
        unit = str(args.get("unit", "sparkfleet-model-fetch.service"))

        def run_slice(seconds: float) -> dict:
            return self._execute_module(module_name=MODULE, module_args=dict(args, wait_seconds=seconds),
                                        task_vars=task_vars)

        for answer, elapsed in sliced_wait(run_slice, timeout, slice_seconds):
            if answer.get("failed"):
                result.update(answer)
                return result
            state = answer.get("state") or {}
            if answer.get("finished"):
                return self.finish(result, state, answer.get("journal"), unit, elapsed)
            if elapsed >= timeout:
                result.update(failed=True, state=state, error={"kind": "Timeout", "message": ""}, msg=(
                    f"The model download is still running on {host} after {timeout:.0f} s "
                    f"({progress_line(host, state, elapsed)}). It goes on in {unit}; run the play again to wait "
                    "for it, or raise model_timeout."))
                return result
            display.display(progress_line(host, state, elapsed))
        return result

    @staticmethod
    def finish(result: dict, state: dict, journal: list[str] | None, unit: str, elapsed: float) -> dict:
        result.update(state=state, elapsed=round(elapsed, 1), error=state.get("error"),
                      changed=bool(state.get("changed")))
        if state.get("phase") != "done":
            result.update(failed=True, changed=False, msg=failure_message(state, journal, unit),
                          error=state.get("error") or {"kind": "Stopped", "message": ""})
            return result
        result["msg"] = (f"{state.get('files_total', '?')} files, {human_bytes(state.get('bytes_total'))} verified; "
                         f"{human_bytes(state.get('bytes_downloaded', 0))} downloaded, "
                         f"fetched {len(state.get('fetched') or [])}, repaired {len(state.get('repaired') or [])}"
                         + (f", {state['retries']} transient failures retried" if state.get("retries") else ""))
        return result
