# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the collection's filters share: a filter hands its input to a plain-Python planner (here in
plugin_utils, or in module_utils); a planner's TypeError, ValueError, KeyError or AttributeError is a
mistake in that input, reported as the filter's own error (AnsibleFilterError, named after the filter)
instead of a traceback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ansible.errors import AnsibleFilterError

Result = TypeVar("Result")


def as_filter(what: str, function: Callable[..., Result], *args: Any) -> Result:
    """function(*args), its input mistakes raised as AnsibleFilterError("<what>: ...")."""
    try:
        return function(*args)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise AnsibleFilterError(f"{what}: {exc}") from exc
