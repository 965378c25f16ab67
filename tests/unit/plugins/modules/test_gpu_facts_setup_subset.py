# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_facts' gather_subset must give what ansible.builtin.setup gives for the same subset (the check
play relies on it instead of gathering facts): each is run here on this machine and compared."""

from __future__ import annotations

import ast
from importlib.metadata import distribution
from pathlib import Path
from types import SimpleNamespace

from ansible_collections.sparkfleet.serving.plugins.modules import gpu_facts
from ansible_collections.sparkfleet.serving.tests.unit.plugins.hostile import assert_clear_failure, call_module

MEMINFO = "MemTotal:       127601248 kB\nMemAvailable:   121045876 kB\n"
# ansible-core's own setup module, run from the installed file: ansible-test's units sandbox holds
# no ansible.modules (the module itself imports only module_utils, which the sandbox has).
SETUP_PY = str(distribution("ansible-core").locate_file("ansible/modules/setup.py"))


def run_setup() -> None:
    # As a module of the ansible.modules package: setup.py imports AnsibleModule relatively.
    code = compile(Path(SETUP_PY).read_text(encoding="utf-8"), SETUP_PY, "exec")
    exec(code, {"__name__": "__main__", "__package__": "ansible.modules", "__file__": SETUP_PY})


SETUP = SimpleNamespace(main=run_setup)
# Facts that change between two calls a moment apart.
MOVING = ("ansible_date_time", "ansible_env")


def gather(root: Path, **args: object) -> dict:
    (root / "meminfo").write_text(MEMINFO)
    return call_module(gpu_facts, {"meminfo_path": str(root / "meminfo"), "cuda_search_globs": [],
                                   "driver_version_file": str(root / "absent"), **args})


def test_without_a_subset_only_the_gpu_facts_are_returned(tmp_path):
    result = gather(tmp_path)
    assert not result["failed"], result
    assert list(result["ansible_facts"]) == ["sparkfleet_gpu"]


def test_a_subset_gives_the_facts_setup_gives_for_it(tmp_path):
    subset = ["min", "network"]
    ours = gather(tmp_path, gather_subset=subset, fact_path=str(tmp_path / "facts.d"))
    theirs = call_module(SETUP, {"gather_subset": subset, "fact_path": str(tmp_path / "facts.d")})
    assert not ours["failed"] and not theirs["failed"], (ours, theirs)
    facts = dict(ours["ansible_facts"])
    assert facts.pop("sparkfleet_gpu")["memory"]["total_bytes"] == 127601248 * 1024
    assert sorted(facts) == sorted(theirs["ansible_facts"])
    for name in ("ansible_distribution", "ansible_os_family", "ansible_architecture", "ansible_all_ipv6_addresses"):
        assert facts[name] == theirs["ansible_facts"][name], name
    same = {name: value for name, value in facts.items() if name not in MOVING}
    assert same == {name: theirs["ansible_facts"][name] for name in same}


def test_local_facts_are_read_from_fact_path_as_setup_reads_them(tmp_path):
    (tmp_path / "facts.d").mkdir()
    (tmp_path / "facts.d" / "rack.fact").write_text('{"row": 3}\n')
    ours = gather(tmp_path, gather_subset=["!all", "!min", "local"], fact_path=str(tmp_path / "facts.d"))
    assert ours["ansible_facts"]["ansible_local"] == {"rack": {"row": 3}}


def test_an_unknown_subset_is_refused_naming_the_option(tmp_path):
    assert_clear_failure(gather(tmp_path, gather_subset=["min", "gpu"]), "gather_subset")


def setup_minimal_subset() -> set[str]:
    """The collector names setup.py gathers for "min", read from ansible-core's own source."""
    tree = ast.parse(Path(SETUP_PY).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "minimal_gather_subset" for t in node.targets):
            return {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    raise AssertionError(f"no minimal_gather_subset in {SETUP_PY}")


def test_the_min_subset_comes_from_ansible_core_not_from_a_copy():
    # A copy of setup's list drifts when ansible-core changes it; the module must name none of it.
    minimal = setup_minimal_subset()
    assert {"distribution", "platform", "ssh_pub_keys"} <= minimal
    tree = ast.parse(Path(gpu_facts.__file__).read_text(encoding="utf-8"))
    literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not minimal & literals, sorted(minimal & literals)


def test_the_min_subset_alone_gives_the_facts_setup_gives(tmp_path):
    ours = gather(tmp_path, gather_subset=["!all"], fact_path=str(tmp_path / "facts.d"))
    theirs = call_module(SETUP, {"gather_subset": ["!all"], "fact_path": str(tmp_path / "facts.d")})
    facts = dict(ours["ansible_facts"])
    facts.pop("sparkfleet_gpu")
    assert sorted(facts) == sorted(theirs["ansible_facts"])


def test_an_ansible_core_without_the_min_subset_is_named(tmp_path, monkeypatch):
    def ansible_facts(module, gather_subset=None):  # compat.ansible_facts of a release that dropped the set
        return {}

    monkeypatch.setattr(gpu_facts.compat, "ansible_facts", ansible_facts)
    assert_clear_failure(gather(tmp_path, gather_subset=["min"]), "minimal_gather_subset")
