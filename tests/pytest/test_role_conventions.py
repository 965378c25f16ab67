"""Role conventions: meta/argument_specs.yml is the one source of every role variable.

- every option is prefixed with the role name, typed and described;
- defaults/main.yml holds exactly the options that are not required, with the value the
  spec documents (so that `ansible-doc -t role` prints what the role really uses);
- everything else a role names (registered results, set_fact, task vars, vars/) is
  internal, `__<role>_...`, so that no inventory value is silently outranked by vars/;
- the README variable tables are what `make docs` generates from the specs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())
OUTPUT_TEMPLATE = ROOT / ".config/aar-doc/variables.md.j2"
BEGIN, END = "<!-- BEGIN_ANSIBLE_DOCS -->\n", "<!-- END_ANSIBLE_DOCS -->\n"
# Keys of a task that are not its action (the action is the one key left).
TASK_KEYWORDS = {
    "name", "when", "register", "vars", "loop", "loop_control", "notify", "tags", "become",
    "changed_when", "failed_when", "check_mode", "until", "retries", "delay", "no_log",
    "ignore_errors", "listen", "environment", "delegate_to", "run_once", "block", "rescue",
    "always", "args", "with_items", "diff", "throttle", "timeout", "any_errors_fatal",
}
INCLUDE_ROLE = {"ansible.builtin.import_role", "ansible.builtin.include_role"}
SET_FACT = {"ansible.builtin.set_fact", "set_fact"}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def entry_points(role: Path) -> dict[str, dict]:
    return load(role / "meta/argument_specs.yml")["argument_specs"]


def options(role: Path) -> dict[str, dict]:
    """Every option of every entry point (an option shared by two is described alike)."""
    merged: dict[str, dict] = {}
    for entry in entry_points(role).values():
        merged.update(entry.get("options") or {})
    return merged


def published(role: Path) -> set[str]:
    """The facts a role documents for other roles in its README's "Published results" section: set by the
    role, read by others, so named like its options (as community.docker's modules document RETURN)."""
    text = (role / "README.md").read_text(encoding="utf-8") if (role / "README.md").exists() else ""
    heading = "\n## Published results\n"
    section = text.split(heading, 1)[1].split("\n## ", 1)[0] if heading in text else ""
    return set(re.findall(rf"^`({re.escape(role.name)}_[a-z0-9_]+)`", section, re.MULTILINE))


def same(a: Any, b: Any) -> bool:
    """Equal values of the same YAML types: 580 is not "580", true is not 1."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


# --- argument_specs and defaults/main.yml -----------------------------------------------


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_option_is_typed_described_and_prefixed(role: Path):
    for name, spec in options(role).items():
        assert name.startswith(f"{role.name}_"), f"{name} is not prefixed with {role.name}_"
        assert spec.get("type"), f"{name} has no type"
        assert spec.get("description"), f"{name} has no description"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_defaults_are_exactly_the_optional_options(role: Path):
    defaults = load(role / "defaults/main.yml") or {}
    specs = options(role)
    optional = {name for name, spec in specs.items() if not spec.get("required")}
    assert set(defaults) - set(specs) == set(), "defaulted but not in meta/argument_specs.yml"
    assert optional - set(defaults) == set(), "optional in meta/argument_specs.yml but not in defaults/main.yml"
    assert set(defaults) & (set(specs) - optional) == set(), "required in meta/argument_specs.yml but defaulted"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_spec_defaults_equal_defaults_main(role: Path):
    defaults = load(role / "defaults/main.yml") or {}
    for name, spec in options(role).items():
        if spec.get("required"):
            assert "default" not in spec, f"{name} is required and has a default"
            continue
        assert "default" in spec, f"{name}: meta/argument_specs.yml has no default (ansible-doc would print null)"
        assert same(spec["default"], defaults[name]), (
            f"{name}: meta/argument_specs.yml says {spec['default']!r}, defaults/main.yml has {defaults[name]!r}"
        )


def test_the_comparison_can_fail():
    assert not same("580", 580)
    assert not same(True, 1)
    assert not same({"a": [1, 2]}, {"a": [1, 3]})
    assert same({"a": [1, {"b": "x"}]}, {"a": [1, {"b": "x"}]})


# --- internal variables -------------------------------------------------------------------


def tasks_in(path: Path) -> Iterator[dict]:
    """Every task of a task or handler file, blocks included."""
    stack = list(load(path) or [])
    while stack:
        task = stack.pop()
        yield task
        for key in ("block", "rescue", "always"):
            stack.extend(task.get(key) or [])


def action(task: dict) -> str:
    keys = [k for k in task if k not in TASK_KEYWORDS]
    return keys[0] if keys else ""


def names_set_by(task: dict) -> Iterator[tuple[str, str]]:
    """(how, name) of every variable a task defines for its role."""
    register = task.get("register")
    if register:
        yield "register", register
    if action(task) in SET_FACT:
        yield from (("set_fact", k) for k in task[action(task)] if k != "cacheable")
    if action(task) not in INCLUDE_ROLE:
        yield from (("vars", k) for k in task.get("vars") or {})


def internal_names(role: Path) -> list[tuple[str, str, str]]:
    found = []
    for path in sorted([*role.glob("tasks/*.yml"), *role.glob("handlers/*.yml")]):
        for task in tasks_in(path):
            found.extend((path.relative_to(role).as_posix(), how, name) for how, name in names_set_by(task))
    return found


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_registered_and_set_names_are_internal(role: Path):
    prefix = f"__{role.name}_"
    wrong = [f"{where}: {how} {name}" for where, how, name in internal_names(role)
             if not name.startswith(prefix) and not (how == "set_fact" and name in published(role))]
    assert wrong == [], f"expected __{role.name}_...: {wrong}"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_vars_dir_holds_only_internal_names(role: Path):
    for path in role.glob("vars/*.yml"):
        wrong = [k for k in load(path) or {} if not k.startswith(f"__{role.name}_")]
        assert wrong == [], f"{path.relative_to(ROOT)}: {wrong} look like settings but would outrank the inventory"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_included_roles_get_their_own_parameters(role: Path):
    """vars passed to sparkfleet.serving.X are X's options (checked by its argument_specs)."""
    for path in role.glob("tasks/*.yml"):
        for task in tasks_in(path):
            if action(task) not in INCLUDE_ROLE:
                continue
            target = task[action(task)]["name"].rsplit(".", 1)[-1]
            entry = task[action(task)].get("tasks_from", "main")
            allowed = set(entry_points(ROOT / "roles" / target)[entry].get("options") or {})
            assert set(task.get("vars") or {}) <= allowed, f"{path.name}: {task['name']}"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_role_looking_name_used_is_an_option(role: Path):
    """A `<role>_...` name the role reads but does not declare is a setting nobody documented."""
    declared = set(options(role)) | published(role)
    assert not published(role) & set(options(role)), "a published fact is not a setting"
    # Not after a dot (item.x), an anchor or alias (&x, *x) or a longer name.
    pattern = re.compile(rf"(?<![\w.&*]){re.escape(role.name)}_[a-z0-9_]+")
    files = [p for sub in ("tasks", "handlers", "templates", "vars") for p in (role / sub).glob("*")]
    used = {m.group(0) for p in files for m in pattern.finditer(p.read_text(encoding="utf-8"))}
    assert used - declared == set()


def test_the_internal_name_rule_can_fail(tmp_path: Path):
    role = tmp_path / "demo"
    (role / "tasks").mkdir(parents=True)
    (role / "tasks/main.yml").write_text(
        "- name: t\n  ansible.builtin.command: true\n  register: demo_result\n"
        "- name: b\n  block:\n    - name: f\n      ansible.builtin.set_fact:\n        __demo_ok: 1\n        other: 2\n",
        encoding="utf-8",
    )
    names = [found[2] for found in internal_names(role)]
    assert sorted(names) == ["__demo_ok", "demo_result", "other"]


# --- README variable tables ----------------------------------------------------------------


def generated_block(text: str) -> str:
    assert text.count(BEGIN) == 1 and text.count(END) == 1, "README needs one pair of BEGIN/END_ANSIBLE_DOCS markers"
    return text[text.index(BEGIN) : text.index(END) + len(END)]


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_readme_variable_table_is_generated_from_the_specs(role: Path, tmp_path: Path):
    aar_doc = shutil.which("aar-doc")
    assert aar_doc, "aar-doc is missing: pip install -r requirements-test.txt"
    readme = (role / "README.md").read_text(encoding="utf-8")
    fresh = tmp_path / "README.md"
    fresh.write_text(readme, encoding="utf-8")
    subprocess.run(
        [aar_doc, "--output-file", str(fresh), "--output-template", str(OUTPUT_TEMPLATE), str(role), "markdown"],
        check=True, capture_output=True, text=True,
    )
    assert generated_block(readme) == generated_block(fresh.read_text(encoding="utf-8")), (
        f"{role.name}/README.md is not what meta/argument_specs.yml generates: run `make docs`"
    )
    for name in options(role):
        assert f"| `{name}` |" in generated_block(readme)
