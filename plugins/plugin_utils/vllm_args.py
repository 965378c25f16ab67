# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Turns the vLLM role's settings into the `vllm serve` argument list.

One place decides the order and spelling of the flags, so the container's command line is
stable (a changed order would recreate the container) and testable without Docker.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_forms import flag_name, tri_state

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
    # JSON (vLLM's SpeculativeConfig); last, so that a deployment without one keeps its earlier argv.
    ("speculative_config", "--speculative-config"),
)
# (setting, flag) for on/off switches; emitted only when true (vLLM's defaults are off).
_SWITCHES = (("enforce_eager", "--enforce-eager"),)
# (setting, flag) for vLLM's tri-state switches (argparse.BooleanOptionalAction, default None):
# true -> --flag, false -> --no-flag, None or "" -> neither (vLLM decides per model).
_TRI_STATE = (("enable_prefix_caching", "--enable-prefix-caching"),)

# The flags of vLLM's parallel layout and multi-node mode, with their short forms (vLLM 0.19.1,
# vllm/engine/arg_utils.py, EngineArgs.add_cli_args; vllm/entrypoints/cli/serve.py for --headless).
# The role writes them itself: from vllm_tensor_parallel_size and vllm_pipeline_parallel_size for
# the members of a cluster (plugins/plugin_utils/cluster_plan.py), none on a box of its own. Given
# again in extra_args they fight the role's: -tp 2 on one Spark (one GPU) stops vLLM with "World
# size (2) is larger than the number of available GPUs (1) in this node" (vllm/config/parallel.py:719).
LAYOUT_FLAGS = {
    "--tensor-parallel-size": "-tp", "--pipeline-parallel-size": "-pp", "--nnodes": "-n", "--node-rank": "-r",
    "--master-addr": None, "--master-port": None, "--headless": None,
}

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
    settings = checked_settings(settings)
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
        args.append(_number(extra))
    return args


# Settings that are on/off; "false" as a string must mean off, not a non-empty (true) string.
_BOOLEAN_KEYS = (*(key for key, _flag in _SWITCHES), "enable_auto_tool_choice", "text_only")
_TEXT_KEYS = ("model_path", "reasoning_parser", "tool_call_parser")
# Tri-state keys (true, false or unset) are checked by tri_state().
KNOWN_KEYS = frozenset(
    (*(key for key, _flag in _VALUED), *_BOOLEAN_KEYS, *(key for key, _flag in _TRI_STATE), *_TEXT_KEYS, "extra_args")
)


def _found(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def checked_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """settings with on/off values made booleans; ValueError naming the key for anything vLLM cannot be given.

    A value is given to vLLM as a word of its command line, so only text and finite numbers
    are values; a boolean, a list or NaN in a valued key is a mistake, as is a string for
    extra_args (it would be split into characters) or an unknown key (a typo is silently
    ignored otherwise).
    """
    unknown = sorted(str(key) for key in settings if key not in KNOWN_KEYS)
    if unknown:
        known = ", ".join(sorted(KNOWN_KEYS))
        raise ValueError(f"unknown setting(s) {', '.join(unknown)}; expected keys among {known}")
    result = dict(settings)
    for key in _BOOLEAN_KEYS:
        value = settings.get(key)
        if value is None or isinstance(value, bool):
            continue
        try:
            result[key] = boolean(value, strict=True)
        except TypeError:
            raise ValueError(f"{key}: found {_found(value)}, expected true or false") from None
    for key, _flag in _VALUED:
        value = settings.get(key)
        if value is not None and not isinstance(value, str) and not _is_number(value):
            raise ValueError(f"{key}: found {_found(value)}, expected a string or a finite number")
    for key in _TEXT_KEYS:
        value = settings.get(key)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{key}: found {_found(value)}, expected a string")
    extra = settings.get("extra_args")
    if extra is not None:
        if not isinstance(extra, (list, tuple)):
            raise ValueError(
                f"extra_args: found {_found(extra)}, expected a list of arguments such as "
                "['--trust-remote-code'] (a string would be split into characters)"
            )
        for index, item in enumerate(extra):
            if not isinstance(item, str) and not _is_number(item):
                raise ValueError(f"extra_args[{index}]: found {_found(item)}, expected a string (or a number)")
        _refuse_layout_flags(extra)
    return result


def _refuse_layout_flags(extra: Any) -> None:
    owned = {**{long: long for long in LAYOUT_FLAGS}, **{short: long for long, short in LAYOUT_FLAGS.items() if short}}
    for index, item in enumerate(extra):
        long = owned.get(flag_name(item))
        if long:
            raise ValueError(
                f"extra_args[{index}]: found {item!r}, which the role sets itself ({long}): set "
                "vllm_tensor_parallel_size and vllm_pipeline_parallel_size, and put the boxes that serve one model "
                "together in a child group of `clusters` (roles/vllm/README.md, Clusters); a Spark has one GPU, and "
                'vLLM stops a -tp 2 without --nnodes with "World size (2) is larger than the number of available '
                'GPUs (1) in this node"')
