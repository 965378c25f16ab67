# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one format of the roles' read-only probes, and its parser (the sparkfleet.serving.probe_sections
filter; the format and the reason for it: plugins/filter/probe_sections.yml).

A probe is a shell script that prints sections; each begins with a header line

    ### sparkfleet.serving probe: NAME rc=RC

followed by the command's output (standard output and error, as `$(command 2>&1)` keeps them: trailing
newlines removed). Probes print them with one shell function, SECTION_FUNCTION below.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MARK = "### sparkfleet.serving probe: "
HEADER = re.compile(r"^### sparkfleet\.serving probe: (?P<name>\S.*?) rc=(?P<rc>-?\d+)$")
# What each probe script defines and calls as `section NAME COMMAND [ARG...]` (COMMAND may be a shell
# function of the script). The status is read right after the command substitution: an assignment's
# status is its last command substitution's (POSIX, Shell Command Language 2.9.1).
SECTION_FUNCTION = (
    "section() { _probe_name=$1; shift; _probe_out=$(\"$@\" 2>&1); "
    "printf '### sparkfleet.serving probe: %s rc=%s\\n%s\\n' \"$_probe_name\" \"$?\" \"$_probe_out\"; }"
)


class ProbeError(ValueError):
    """The output is not a probe's, or it lacks a section the caller needs."""


def parse_sections(stdout: str, required: Iterable[str] = ()) -> dict[str, dict]:
    """A probe's output -> {NAME: {"rc": int, "output": str, "lines": [str]}} in the order printed."""
    sections: dict[str, dict] = {}
    lines: list[str] | None = None
    for line in stdout.splitlines():
        header = HEADER.match(line)
        if header:
            name = header.group("name")
            if name in sections:
                raise ProbeError(f"the probe printed the section {name!r} twice")
            lines = []
            sections[name] = {"rc": int(header.group("rc")), "lines": lines}
        elif line.startswith(MARK):
            raise ProbeError(f"{line!r} is not a section header (expected '{MARK}NAME rc=NUMBER')")
        elif lines is None:
            raise ProbeError(f"the probe printed {line!r} before its first section: it is not a probe's output")
        else:
            lines.append(line)
    for section in sections.values():
        # `printf '%s\n' "$out"` of an empty output prints one empty line.
        while section["lines"] and section["lines"][-1] == "":
            section["lines"].pop()
        section["output"] = "\n".join(section["lines"])
    missing = [name for name in required if name not in sections]
    if missing:
        raise ProbeError(f"the probe's output lacks the sections {missing}: it did not run to the end")
    return sections
