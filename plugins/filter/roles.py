# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sparkfleet.serving.role_default: a variable's default as its own role defines it (roles/ROLE/defaults/main.yml),
so that a port is written once, in the role that listens on it, and every other role reads it from there
(the other role's defaults are not loaded unless that role runs in the same play)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

# The collection's roles/, beside plugins/ (this file is plugins/filter/roles.py).
ROLES = Path(__file__).resolve().parents[2] / "roles"


def read_default(roles: Path, name: str, role: str) -> Any:
    """The literal value of `name` in roles/<role>/defaults/main.yml; a template or a missing name is an error."""
    import yaml

    if not role.replace("_", "").isalnum():
        raise ValueError(f"{role!r} is not a role name of the collection")
    path = roles / role / "defaults" / "main.yml"
    try:
        defaults = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ValueError(f"the role {role!r} has no defaults to read ({exc})") from exc
    if name not in defaults:
        raise ValueError(f"{name!r} is not a default of the role {role!r} ({path})")
    value = defaults[name]
    # A template would be rendered in the other role's context, not the owner's: only literal values.
    if "{{" in str(value) or "{%" in str(value):
        raise ValueError(f"{name!r} of the role {role!r} is a template ({value!r}); only literal defaults are shared")
    return value


def role_default(name: object, role: object) -> Any:
    """'vllm_port' | sparkfleet.serving.role_default('vllm') -> 8000, read from roles/vllm/defaults/main.yml."""
    try:
        return read_default(ROLES, str(name), str(role))
    except ValueError as exc:
        raise AnsibleFilterError(f"role_default: {exc}") from exc


class FilterModule:
    def filters(self) -> dict:
        return {"role_default": role_default}
