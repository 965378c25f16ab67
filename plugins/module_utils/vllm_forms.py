# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Values as vLLM 0.19.1 reads them from its command line: token counts (--max-model-len),
tri-state switches (--enable-prefix-caching / --no-enable-prefix-caching) and the flags of extra
arguments with their values, for the checks that run on the box and for the controller's argument
list alike.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ansible_collections.sparkfleet.serving.plugins.module_utils.inputs import InputError, describe

# vLLM 0.19.1 reads --max-model-len with human_readable_int_or_auto (vllm/engine/arg_utils.py):
# a whole number, -1 or "auto" (fit the context to the KV cache), or a number with a
# decimal (k m g t: 10^3...) or binary (K M G T: 2^10..., whole numbers only) suffix.
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
AUTO_LENGTH = -1


_LENGTH = re.compile(r"(?P<number>\d+(?:\.\d+)?)(?P<suffix>[kKmMgGtT])")


def vllm_length(value: Any, option: str) -> int | None:  # noqa: PLR0911 - one return per vLLM form
    """A vLLM token count as vLLM parses it: int, "16k", "16K", "-1" or "auto" (-1); None when unset."""
    expected = "a whole number of tokens, a vLLM form such as 16k (16000) or 16K (16384), or -1 / auto"
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = value.strip() if isinstance(value, str) else ""
    if text == "-1" or text.lower() == "auto":
        return AUTO_LENGTH
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    match = _LENGTH.fullmatch(text)
    if not match or (match.group("suffix") in _BINARY and "." in match.group("number")):
        raise InputError(f"{option}: found {describe(value)}, expected {expected}")
    number, suffix = match.group("number"), match.group("suffix")
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    return int(number) * _BINARY[suffix]


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


def flag_name(argument: Any) -> str:
    """An argument as the flag vLLM reads ('' when it is not one): `--tensor_parallel_size=2` is
    --tensor-parallel-size (vLLM's FlexibleArgumentParser takes underscores for dashes,
    vllm/utils/argparse_utils.py)."""
    text = str(argument)
    if not text.startswith("-"):
        return ""
    name = text.split("=", 1)[0]
    return name if not name.startswith("--") else "--" + name[2:].replace("_", "-")


def flag_value(words: list[Any], index: int) -> str:
    """The value of the flag at words[index]: after its `=`, else the next word ('' when there is none)."""
    text = str(words[index])
    if "=" in text:
        return text.split("=", 1)[1]
    return str(words[index + 1]) if index + 1 < len(words) else ""
