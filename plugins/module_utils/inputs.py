# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Checks of what the modules are given, at the boundary, before any rule reads it.

AnsibleModule checks the type of each option; these check what it cannot: the shape of a
dict option (gpu_facts, facts), the content of files the modules read (config.json,
/proc/meminfo) and ranges. Each problem names the option or file, what was found and
what is expected, so no Python exception reaches the user.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ansible_collections.sparkfleet.serving.plugins.module_utils.gpu_facts import parse_meminfo
from ansible_collections.sparkfleet.serving.plugins.module_utils.versions import parse_version


class InputError(ValueError):
    """An option or a file cannot be used; the message says which, what was found and what is expected."""


def describe(value: Any) -> str:
    """A short, bounded description of a found value for messages."""
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{type(value).__name__} {text}"


# --- shapes of nested dicts -------------------------------------------------------
# A schema is a type or tuple of types, INT (a whole number, not a bool), COUNT (a
# whole number >= 1), a dict {key: schema} (every key optional, None allowed for each),
# or a one-item list [schema] (a list of items of that schema).
INT = "whole number"
COUNT = "whole number >= 1"


def _matches(value: Any, kind: Any) -> bool:
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == COUNT:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 1
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


def _expected(kind: Any) -> str:
    if isinstance(kind, str):
        return f"a {kind}"
    if isinstance(kind, dict):
        return "an object"
    if isinstance(kind, list):
        return "a list"
    names = {str: "a string", bool: "true or false", float: "a number", int: "a whole number"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def shape_problems(value: Any, schema: Any, where: str) -> list[str]:  # noqa: PLR0911 - one return per schema kind
    """Every place where value does not fit schema, as "where: found X, expected Y"."""
    if value is None:
        return []
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return [f"{where}: found {describe(value)}, expected an object"]
        pairs = [(key, sub) for key, sub in schema.items() if key in value]
        return [p for key, sub in pairs for p in shape_problems(value[key], sub, f"{where}.{key}")]
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{where}: found {describe(value)}, expected a list"]
        return [p for i, item in enumerate(value) for p in shape_problems(item, schema[0], f"{where}[{i}]")]
    if not _matches(value, schema):
        return [f"{where}: found {describe(value)}, expected {_expected(schema)}"]
    return []


GPU_ENTRY = {
    "index": INT,
    "name": str,
    "uuid": str,
    "driver_version": str,
    "compute_cap": str,
    "memory_total_mib": INT,
    "pci_bus_id": str,
}

# ansible_facts.sparkfleet_gpu as gpu_facts returns it (the parts the checks read).
GPU_FACTS = {
    "present": bool,
    "reason": str,
    "count": INT,
    "gpus": [GPU_ENTRY],
    "names": [str],
    "compute_caps": [str],
    "driver_version": str,
    "cuda_driver_version": str,
    "toolkit": {"present": bool, "version": str, "full_version": str, "path": str},
    "kernel_module": {"version": str, "flavour": str, "architecture": str},
    "architecture": str,
    "unified_memory": bool,
    "memory": {"total_bytes": INT, "available_bytes": INT, "free_bytes": INT, "used_bytes": INT},
    "container_toolkit": {"present": bool, "package_version": str},
}


def check_gpu_facts(facts: dict, option: str) -> None:
    """Raise InputError when a gpu_facts dict has a value of the wrong kind (e.g. a GPU without a name)."""
    problems = shape_problems(facts, GPU_FACTS, option)
    gpus = facts.get("gpus")
    for index, gpu in enumerate(gpus if isinstance(gpus, list) else []):
        if isinstance(gpu, dict) and not isinstance(gpu.get("name"), str):
            problems.append(f"{option}.gpus[{index}]: no name; expected each GPU with its name as gpu_facts gives it")
    if problems:
        raise InputError(
            f"{option} is not what sparkfleet.serving.gpu_facts returns: "
            + "; ".join(problems)
            + ". Pass ansible_facts['sparkfleet_gpu'] as gathered."
        )


def check_version_option(value: str | None, option: str) -> None:
    """Raise InputError when a version option is not a dotted number such as 580.95.05."""
    if value is None or value == "":
        return
    try:
        parse_version(value)
    except ValueError as err:
        raise InputError(f"{option}: {err}") from None


def check_range(value: float | None, option: str, low: float | None = None, high: float | None = None) -> None:
    """Raise InputError when value is outside [low, high] (None: unbounded) or not finite."""
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{option}: found {value}, expected a finite number")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"between {low} and {high}" if low is not None and high is not None else ""
        bounds = bounds or (f"at least {low}" if low is not None else f"at most {high}")
        raise InputError(f"{option}: found {value}, expected {bounds}")


# --- files --------------------------------------------------------------------------


def read_text_file(path: str, option: str, what: str) -> str | None:
    """A text file's content; None when it does not exist; InputError when it cannot be a text file.

    what says what the file should be, for the message (e.g. "a model's config.json").
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise InputError(f"{option} {path} is a directory; expected {what}") from None
    except NotADirectoryError:
        raise InputError(f"{option} {path}: a part of the path is a file, not a directory; expected {what}") from None
    except OSError as err:
        raise InputError(f"{option} {path} cannot be read ({err.strerror}); expected {what}") from None
    return decode_text(data, path, option, what)


def decode_text(data: bytes, path: str, option: str, what: str) -> str:
    """A file's bytes as UTF-8 text; InputError naming the first byte that is not (as read_text_file says)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(
            f"{option} {path} is not text (byte {data[err.start]:#04x} at offset {err.start} is not UTF-8); "
            f"expected {what}"
        ) from None


def meminfo_total(path: str, option: str = "meminfo_path") -> int | None:
    """MemTotal in bytes from a meminfo file; None when the file does not exist.

    Raises InputError when the file is binary, a directory, or has no MemTotal line.
    """
    expected = "a /proc/meminfo file with a 'MemTotal: <n> kB' line"
    text = read_text_file(path, option, expected)
    if text is None:
        return None
    total = parse_meminfo(text)["total_bytes"]
    if not total:
        raise InputError(f"{option} {path} has no usable MemTotal line; expected {expected}")
    return total


# The config.json numbers serving_plan reads, as Hugging Face transformers writes them.
_ARCHITECTURE = {
    "model_type": str,
    "num_hidden_layers": COUNT,
    "full_attention_interval": COUNT,
    "num_key_value_heads": COUNT,
    "num_attention_heads": COUNT,
    "head_dim": COUNT,
    "hidden_size": COUNT,
    "linear_num_key_heads": COUNT,
    "linear_num_value_heads": COUNT,
    "linear_key_head_dim": COUNT,
    "linear_value_head_dim": COUNT,
    "linear_conv_kernel_dim": COUNT,
    "max_position_embeddings": COUNT,
    "mamba_ssm_dtype": str,
    "torch_dtype": str,
    "dtype": str,
    "layer_types": [str],
    "quantization_config": {"quant_method": str, "quant_algo": str},
}
CONFIG_JSON = {**_ARCHITECTURE, "text_config": _ARCHITECTURE}


def load_config_json(path: str) -> dict | None:
    """A model's config.json as a dict, None when absent; InputError naming the file otherwise."""
    expected = "a model's config.json (a JSON object as Hugging Face writes it)"
    text = read_text_file(path, "model_path", expected)
    if text is None:
        return None
    try:
        config = json.loads(text)
    except ValueError as err:
        raise InputError(f"{path} is not valid JSON ({err}); expected {expected}") from None
    except RecursionError:
        raise InputError(f"{path} is nested too deeply to read; expected {expected}") from None
    if not isinstance(config, dict):
        raise InputError(f"{path}: found a JSON {type(config).__name__} at the top level; expected {expected}")
    problems = shape_problems(config, CONFIG_JSON, "config.json")
    if problems:
        raise InputError(f"{path} cannot be read as a model configuration: " + "; ".join(problems))
    return config
