# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""probe_sections reads what the documented shell function prints, run here by a real /bin/sh; every
probe of the collection prints its sections with that same function."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.filter.probe import probe_sections
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.probe import SECTION_FUNCTION

ROOT = Path(__file__).resolve().parents[4]
# The probes: the firewall's script, the docker, nvidia_runtime and vllm roles' look at the box, the
# status playbook's questions to systemd and ufw.
PROBES = [
    "roles/firewall/files/probe.sh",
    "roles/docker/tasks/preflight.yml",
    "roles/nvidia_runtime/tasks/preflight.yml",
    # tasks_from: clocks (the GPU clock caps unit and its journal).
    "roles/nvidia_runtime/vars/main.yml",
    "playbooks/status.yml",
    "roles/vllm/tasks/install-one.yml",
]


def run(script: str) -> str:
    done = subprocess.run(["/bin/sh", "-c", f"{SECTION_FUNCTION}\n{script}"], capture_output=True, text=True,
                          check=True, env={"PATH": "/usr/bin:/bin"})
    assert done.stderr == ""
    return done.stdout


def test_each_section_has_its_exit_code_and_both_output_streams():
    sections = probe_sections(run(
        "section ok printf 'one\\ntwo\\n'\n"
        "section failing sh -c 'echo out; echo err >&2; exit 3'\n"
        "section silent true\n"
        "section 'file /etc/ufw/after.rules' sh -c 'exit 1'\n"
    ))
    assert list(sections) == ["ok", "failing", "silent", "file /etc/ufw/after.rules"]
    assert sections["ok"] == {"rc": 0, "output": "one\ntwo", "lines": ["one", "two"]}
    assert sections["failing"] == {"rc": 3, "output": "out\nerr", "lines": ["out", "err"]}
    assert sections["silent"] == {"rc": 0, "output": "", "lines": []}
    assert sections["file /etc/ufw/after.rules"]["rc"] == 1


def test_a_function_of_the_script_is_a_command_and_blank_lines_inside_stay():
    sections = probe_sections(run("both() { echo a; echo; echo b; return 5; }\nsection both both\n"))
    assert sections["both"] == {"rc": 5, "output": "a\n\nb", "lines": ["a", "", "b"]}


def test_a_command_that_is_not_there_is_an_answer_not_a_failure():
    sections = probe_sections(run("section missing /no/such/command\n"))
    assert sections["missing"]["rc"] == 127
    assert "/no/such/command" in sections["missing"]["output"]


def test_required_sections_that_are_missing_are_named():
    output = run("section first true\n")
    assert list(probe_sections(output, ["first"])) == ["first"]
    with pytest.raises(AnsibleFilterError, match=r"lacks the sections \['second', 'third'\]: it did not run"):
        probe_sections(output, ["first", "second", "third"])


@pytest.mark.parametrize(("output", "expected"), [
    ("stray\n### sparkfleet.serving probe: a rc=0\n", "printed 'stray' before its first section"),
    ("### sparkfleet.serving probe: a\nx\n", "is not a section header"),
    ("### sparkfleet.serving probe: a rc=zero\n", "is not a section header"),
    ("### sparkfleet.serving probe: a rc=0\n### sparkfleet.serving probe: a rc=1\n", "the section 'a' twice"),
])
def test_output_that_is_not_a_probes_is_refused(output, expected):
    with pytest.raises(AnsibleFilterError, match=expected):
        probe_sections(output)


@pytest.mark.parametrize(("value", "required", "expected"), [
    (None, [], "expected the probe's output as a string, found NoneType"),
    ("", "first", "required must be a list of section names"),
])
def test_wrong_arguments_are_refused(value, required, expected):
    with pytest.raises(AnsibleFilterError, match=expected):
        probe_sections(value, required)


def test_no_output_is_no_sections():
    assert probe_sections("") == {}


@pytest.mark.parametrize("path", [*PROBES, "plugins/filter/probe_sections.yml"])
def test_every_probe_prints_with_the_documented_function(path):
    text = (ROOT / path).read_text()
    assert SECTION_FUNCTION in text, f"{path} does not define section() as plugins/plugin_utils/probe.py does"


def test_no_other_file_defines_another_section_function():
    found = [str(p.relative_to(ROOT)) for pattern in ("roles/**/*", "playbooks/*", "plugins/filter/*")
             for p in ROOT.glob(pattern) if p.is_file() and "section()" in p.read_text(errors="replace")]
    assert sorted(found) == sorted([*PROBES, "plugins/filter/probe_sections.yml"])


def test_the_documented_example_parses():
    example = yaml.safe_load((ROOT / "plugins/filter/probe_sections.yml").read_text())["EXAMPLES"]
    script = yaml.safe_load(example)[0]["ansible.builtin.command"]["argv"][2]
    assert script.splitlines()[0] == SECTION_FUNCTION
