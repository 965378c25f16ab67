# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the vLLM role: the serve argument list and the start-up log diagnosis."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).


def vllm_serve_args(settings: dict) -> list[str]:
    """Settings dict -> the arguments after `vllm serve`."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.vllm_args import build_serve_args

    if not isinstance(settings, dict):
        raise AnsibleFilterError(f"vllm_serve_args expects a dict of settings, got {type(settings).__name__}")
    try:
        return build_serve_args(settings)
    except ValueError as exc:
        raise AnsibleFilterError(f"vllm_serve_args: {exc}") from exc


def log_lines(log: object) -> str | list[str] | None:
    """The log as diagnose reads it: text, or a list of text lines (None, numbers, bytes made text)."""
    if log is None or isinstance(log, str):
        return log
    if isinstance(log, bytes):
        return log.decode("utf-8", "replace")
    if isinstance(log, (list, tuple)):
        return [
            "" if line is None else line.decode("utf-8", "replace") if isinstance(line, bytes) else str(line)
            for line in log
        ]
    raise AnsibleFilterError(
        f"vllm_diagnose expects the log as text or a list of lines, got {type(log).__name__}; "
        "pass a registered result's .stdout or .stdout_lines"
    )


def vllm_diagnose(log: object, exit_code: object = None) -> list[dict]:
    """Log text or list of lines (and the container's exit code) -> the known failures found."""
    from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_diagnosis import diagnose

    if exit_code is not None and not isinstance(exit_code, int):
        try:
            exit_code = int(exit_code)
        except (TypeError, ValueError) as exc:
            raise AnsibleFilterError(f"vllm_diagnose: exit_code must be an integer, got {exit_code!r}") from exc
    return diagnose(log_lines(log), exit_code)


class FilterModule:
    def filters(self) -> dict:
        return {"vllm_serve_args": vllm_serve_args, "vllm_diagnose": vllm_diagnose}
