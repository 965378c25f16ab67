# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action of sparkfleet.serving.gpu_requirements: the check, on the controller.

The check reads nothing of the box but the facts it is given, so running the module there
would only cost a module call (a Python start with Ansible's module library on the box, and
building the module's payload on the controller). Same options and result as the module,
whose documentation this action shares.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.sparkfleet.serving.plugins.module_utils.gpu_requirements import ARGUMENT_SPEC, evaluate


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp: str | None = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        _validation, params = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        output, error, warnings = evaluate(params)
        result.update(output)
        if warnings:
            result["warnings"] = warnings
        if error:
            result.update(failed=True, msg=error)
        return result
