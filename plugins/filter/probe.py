# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The roles' read-only probes print sections (plugins/filter/probe_sections.yml says the format and why);
sparkfleet.serving.probe_sections reads them."""

from __future__ import annotations

from collections.abc import Sequence

from ansible.errors import AnsibleFilterError

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).


def probe_sections(stdout: object, required: object = ()) -> dict:
    """A probe's standard output -> {NAME: {"rc", "output", "lines"}}; fails when a required section is missing."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.probe import ProbeError, parse_sections

    if not isinstance(stdout, str):
        found = type(stdout).__name__
        raise AnsibleFilterError(f"probe_sections: expected the probe's output as a string, found {found}")
    if isinstance(required, str) or not isinstance(required, Sequence):
        raise AnsibleFilterError(f"probe_sections: required must be a list of section names, found {required!r}")
    try:
        return parse_sections(stdout, [str(name) for name in required])
    except ProbeError as exc:
        raise AnsibleFilterError(f"probe_sections: {exc}") from exc


class FilterModule:
    def filters(self) -> dict:
        return {"probe_sections": probe_sections}
