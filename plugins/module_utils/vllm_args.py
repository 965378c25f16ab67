# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Turns the vLLM role's settings into the `vllm serve` argument list.

One place decides the order and spelling of the flags, so the container's command line is
stable (a changed order would recreate the container) and testable without Docker.
"""

from __future__ import annotations

import json
from typing import Any

# (setting, flag) for settings whose value follows the flag; omitted when None or "".
_VALUED = (
    ("served_model_name", "--served-model-name"),
    ("host", "--host"),
    ("port", "--port"),
    ("dtype", "--dtype"),
    ("quantization", "--quantization"),
    ("max_model_len", "--max-model-len"),
    ("gpu_memory_utilization", "--gpu-memory-utilization"),
    ("max_num_seqs", "--max-num-seqs"),
    ("max_num_batched_tokens", "--max-num-batched-tokens"),
    ("kv_cache_dtype", "--kv-cache-dtype"),
)
# (setting, flag) for on/off switches; emitted only when true (vLLM's defaults are off).
_SWITCHES = (("enforce_eager", "--enforce-eager"),)
# (setting, flag) for vLLM's tri-state switches (argparse.BooleanOptionalAction, default None):
# true -> --flag, false -> --no-flag, None or "" -> neither (vLLM decides per model).
_TRI_STATE = (("enable_prefix_caching", "--enable-prefix-caching"),)

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
# How an unset (null) variable can arrive through Jinja: None, "", or its text "None".
_UNSET = {"", "none", "null"}


def tri_state(value: Any, name: str) -> bool | None:
    """True, False or None (unset) from a setting as Ansible hands it over (bool or text)."""
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _UNSET:
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{name} is {value!r}: expected true, false or null (null leaves it to vLLM's model default)")


# Text-only serving: skip the vision encoder's memory profiling (stalls start-up).
TEXT_ONLY_LIMITS = {"image": 0, "video": 0}


def _number(value: Any) -> str:
    """0.75 stays 0.75, 16384.0 from YAML/Jinja becomes 16384."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _switches(settings: dict[str, Any]) -> list[str]:
    """On/off flags, then tri-state flags (--flag, --no-flag or neither)."""
    flags = [flag for key, flag in _SWITCHES if settings.get(key)]
    for key, flag in _TRI_STATE:
        state = tri_state(settings.get(key), key)
        if state is not None:
            flags.append(flag if state else "--no-" + flag[2:])
    return flags


def build_serve_args(settings: dict[str, Any]) -> list[str]:
    """The arguments after `vllm serve`, in a fixed order.

    settings keys: model_path (required), the keys of _VALUED and _SWITCHES,
    reasoning_parser, tool_call_parser, enable_auto_tool_choice, text_only, extra_args.
    kv_cache_dtype 'auto' is left out (vLLM's default), so is an empty quantization.
    """
    if not settings.get("model_path"):
        raise ValueError("model_path is required: the path of the weights inside the container, e.g. /model")
    args = [str(settings["model_path"])]
    for key, flag in _VALUED:
        value = settings.get(key)
        if value is None or value == "" or (key == "kv_cache_dtype" and value == "auto"):
            continue
        args += [flag, _number(value)]
    args += _switches(settings)
    if settings.get("reasoning_parser"):
        args += ["--reasoning-parser", str(settings["reasoning_parser"])]
    if settings.get("tool_call_parser"):
        if settings.get("enable_auto_tool_choice"):
            args.append("--enable-auto-tool-choice")
        args += ["--tool-call-parser", str(settings["tool_call_parser"])]
    elif settings.get("enable_auto_tool_choice"):
        raise ValueError("enable_auto_tool_choice needs a tool_call_parser (vLLM refuses it alone), e.g. qwen3_coder")
    if settings.get("text_only"):
        args += ["--limit-mm-per-prompt", json.dumps(TEXT_ONLY_LIMITS, separators=(",", ":"))]
    for extra in settings.get("extra_args") or []:
        args.append(str(extra))
    return args
