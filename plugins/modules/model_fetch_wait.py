#!/usr/bin/python
# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: model_fetch_wait
short_description: Wait for the model download running on the box and report its progress
version_added: 0.1.0
author: sparkfleet maintainers (@sparkfleet)
description:
  - Reads the state file the model role's download program (C(sparkfleet_model_fetch.py)) rewrites while it runs in
    a transient systemd unit, every O(poll_interval) seconds, for at most O(wait_seconds).
  - Returns when the download finished (state C(done) or C(failed)), when the unit stopped without a final state
    (with the unit's last journal lines), or when O(wait_seconds) passed.
  - The action plugin of the same name calls this module in slices until O(timeout) and prints bytes done / total,
    percent, rate and ETA between slices.
  - Only reads; changes nothing on the host.
options:
  state_file:
    description: The download program's state file (its C(--state)).
    type: path
    required: true
  unit:
    description: The transient systemd unit the download runs in.
    type: str
    default: sparkfleet-model-fetch.service
  wait_seconds:
    description: How long this call waits at most.
    type: float
    default: 25
  poll_interval:
    description: Seconds between two reads of the state file.
    type: float
    default: 1
  timeout:
    description:
      - Overall timeout in seconds, used by the action plugin (which makes several calls).
      - The module itself waits at most O(wait_seconds).
    type: float
    default: 21600
  progress_interval:
    description: Seconds between progress lines of the action plugin (at most 30).
    type: float
    default: 25
  journal_lines:
    description: How many of the unit's journal lines to return when it stopped without a final state.
    type: int
    default: 20
extends_documentation_fragment:
  - sparkfleet.serving.checks.READ_ONLY
"""

EXAMPLES = r"""
- name: Wait for the download, printing progress every 25 s
  sparkfleet.serving.model_fetch_wait:
    state_file: /var/lib/sparkfleet/model/fetch-state.json
    timeout: 21600
    progress_interval: 25
"""

RETURN = r"""
finished:
  description: Whether the download is over (successfully or not).
  returned: always
  type: bool
active:
  description: Whether the unit was still active at the last look.
  returned: always
  type: bool
state:
  description: The last state the program wrote (phase, bytes_done, bytes_total, rate_bps, eta_seconds, fetched,
    repaired, changed, error); empty before it wrote one.
  returned: always
  type: dict
journal:
  description: The unit's last journal lines, when it stopped without writing a final state.
  returned: when the unit stopped without a final state
  type: list
  elements: str
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule

FINAL_PHASES = ("done", "failed")


def read_state(path: str) -> dict:
    """The program replaces the file atomically (rename), so a read sees a whole document or none."""
    try:
        with open(path, encoding="utf-8") as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def unit_active(module: AnsibleModule, unit: str) -> bool:
    # An unknown (already collected) unit is "inactive" too.
    answer = module.run_command(["systemctl", "show", "-p", "ActiveState", "--value", unit])
    return answer[0] == 0 and answer[1].strip() in ("active", "activating", "reloading", "deactivating")


def journal(module: AnsibleModule, unit: str, lines: int) -> list[str]:
    out = module.run_command(["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "cat"])[1]
    return out.splitlines()


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            state_file=dict(type="path", required=True),
            unit=dict(type="str", default="sparkfleet-model-fetch.service"),
            wait_seconds=dict(type="float", default=25.0),
            poll_interval=dict(type="float", default=1.0),
            timeout=dict(type="float", default=21600.0),
            progress_interval=dict(type="float", default=25.0),
            journal_lines=dict(type="int", default=20),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["poll_interval"] <= 0 or params["wait_seconds"] < 0:
        module.fail_json(msg=f"poll_interval {params['poll_interval']} must be > 0 and wait_seconds "
                             f"{params['wait_seconds']} >= 0")
    deadline = time.monotonic() + params["wait_seconds"]
    while True:
        state = read_state(params["state_file"])
        if state.get("phase") in FINAL_PHASES:
            module.exit_json(changed=False, finished=True, active=unit_active(module, params["unit"]), state=state)
        active = unit_active(module, params["unit"])
        if not active:
            # Read once more: the program writes its final state just before it exits.
            state = read_state(params["state_file"])
            if state.get("phase") in FINAL_PHASES:
                module.exit_json(changed=False, finished=True, active=False, state=state)
            module.exit_json(changed=False, finished=True, active=False, state=state,
                             journal=journal(module, params["unit"], params["journal_lines"]))
        if time.monotonic() >= deadline:
            module.exit_json(changed=False, finished=False, active=True, state=state)
        time.sleep(max(0.05, min(params["poll_interval"], deadline - time.monotonic())))


if __name__ == "__main__":
    main()
