"""Role conventions: meta/argument_specs.yml is the one source of every role variable.

- every option is prefixed with the role name, typed and described;
- defaults/main.yml holds exactly the options that are not required, with the value the
  spec documents (so that `ansible-doc -t role` prints what the role really uses);
- everything else a role names (registered results, set_fact, task vars, vars/) is
  internal, `__<role>_...`, so that no inventory value is silently outranked by vars/,
  except the results it publishes (its README's "Published results": `<role>_...` facts);
- roles and playbooks read another role only through its options and published results:
  never its `__<role>_...` names, and a playbook does not restate a role's defaults
  (`<option> | default(...)`): it includes the role's entry point that publishes what it needs;
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
PUBLISHED = "## Published results\n"
PLAYBOOKS = sorted([*(ROOT / "playbooks").glob("*.yml"), ROOT / "site.yml"])
INCLUDE_ROLE = {"ansible.builtin.import_role", "ansible.builtin.include_role"}
SET_FACT = {"ansible.builtin.set_fact", "set_fact"}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def published(role: Path) -> set[str]:
    """The facts the role publishes: `<role>_...` names in backticks in its README's
    "Published results" section that are not options."""
    text = (role / "README.md").read_text(encoding="utf-8")
    if PUBLISHED not in text:
        return set()
    section = text.split(PUBLISHED, 1)[1].split("\n## ", 1)[0]
    names = set(re.findall(rf"`({re.escape(role.name)}_[a-z0-9_]+)`", section))
    return names - set(options(role))


def entry_points(role: Path) -> dict[str, dict]:
    return load(role / "meta/argument_specs.yml")["argument_specs"]


def options(role: Path) -> dict[str, dict]:
    """Every option of every entry point (an option shared by two is described alike)."""
    merged: dict[str, dict] = {}
    for entry in entry_points(role).values():
        merged.update(entry.get("options") or {})
    return merged


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
    mine = published(role)
    wrong = [f"{where}: {how} {name}" for where, how, name in internal_names(role)
             if not name.startswith(prefix) and not (how == "set_fact" and name in mine)]
    assert wrong == [], f"expected __{role.name}_...: {wrong}"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_vars_dir_holds_only_internal_names(role: Path):
    for path in role.glob("vars/*.yml"):
        wrong = [k for k in load(path) or {} if not k.startswith(f"__{role.name}_")]
        assert wrong == [], f"{path.relative_to(ROOT)}: {wrong} look like settings but would outrank the inventory"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_included_roles_get_their_own_parameters(role: Path):
    """vars passed to sparkfleet.serving.X are X's options, and every option it requires."""
    for path in role.glob("tasks/*.yml"):
        for task in tasks_in(path):
            # A role the caller names (vllm_before_restart) gets the caller's variables.
            if action(task) not in INCLUDE_ROLE or "{{" in task[action(task)]["name"]:
                continue
            target = task[action(task)]["name"].rsplit(".", 1)[-1]
            entry = task[action(task)].get("tasks_from", "main")
            spec = entry_points(ROOT / "roles" / target)[entry].get("options") or {}
            given = set(task.get("vars") or {})
            assert given <= set(spec), f"{path.name}: {task['name']}"
            # The internal entry points are imported without validation (roles/common/README.md):
            # what they require must be passed here.
            required = {name for name, option in spec.items() if option.get("required")}
            assert required <= given, f"{path.name}: {task['name']} does not pass {sorted(required - given)}"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_role_looking_name_used_is_an_option(role: Path):
    """A `<role>_...` name the role reads but does not declare is a setting nobody documented."""
    declared = set(options(role)) | published(role)
    # Not after a dot (item.x), an anchor or alias (&x, *x) or a longer name.
    pattern = re.compile(rf"(?<![\w.&*]){re.escape(role.name)}_[a-z0-9_]+")
    files = [p for sub in ("tasks", "handlers", "templates", "vars") for p in (role / sub).glob("*")]
    used = {m.group(0) for p in files for m in pattern.finditer(p.read_text(encoding="utf-8"))}
    # Settings of earlier releases a role refuses (molecule/fleet/files/refusals.yml, `retired`).
    retired = set(load(ROOT / "molecule/fleet/files/refusals.yml").get("retired") or {})
    assert used - declared - retired == set()


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


# --- one owner: roles are read through their options and published results -----------------


def foreign_internal_names(text: str, own: str | None) -> set[str]:
    """`__<role>_...` names of roles other than `own` (None: of every role) in a text."""
    found = set()
    for role in ROLES:
        if role.name != own:
            found |= set(re.findall(rf"(?<![\w]){re.escape(f'__{role.name}_')}[a-z0-9_]+", text))
    return found


def restated_defaults(text: str) -> set[str]:
    """Role options a text gives a default of its own (`vllm_port | default(8000)`)."""
    names = {name for role in ROLES for name in options(role)}
    found = re.finditer(r"(?<![\w.])([a-z][a-z0-9_]*)\s*\|\s*default\(", text)
    return {m.group(1) for m in found if m.group(1) in names}


def role_files(role: Path) -> list[Path]:
    subdirs = ("tasks", "handlers", "templates", "vars", "defaults")
    return [p for sub in subdirs for p in (role / sub).glob("*") if p.is_file()]


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_roles_read_no_other_roles_internal_names(role: Path):
    wrong = {f"{p.relative_to(ROOT)}: {name}" for p in role_files(role)
             for name in foreign_internal_names(p.read_text(encoding="utf-8"), role.name)}
    assert wrong == set(), "read the other role's published results or options instead"


@pytest.mark.parametrize("playbook", PLAYBOOKS, ids=lambda p: p.name)
def test_playbooks_read_roles_only_through_their_published_results(playbook: Path):
    text = playbook.read_text(encoding="utf-8")
    assert foreign_internal_names(text, None) == set()
    assert restated_defaults(text) == set(), (
        "a second copy of a role default: include the role's entry point that publishes what the playbook needs"
    )


def copied_defaults(text: str, own: str) -> set[str]:
    """Other roles' options a role's text gives a default of its own instead of the owner's
    (`'vllm_port' | sparkfleet.serving.role_default('vllm')`, read from the owning role's defaults).
    Only options whose owner's default is literal: role_default refuses a template (vllm_model's
    default is rendered from the vllm role's profiles)."""
    names = {name for role in ROLES if role.name != own
             for name, value in (load(role / "defaults/main.yml") or {}).items()
             if "{{" not in str(value) and "{%" not in str(value)}
    found = re.finditer(
        r"(?<![\w.])([a-z][a-z0-9_]*)\s*\|\s*default\((?!\s*'\1'\s*\|\s*sparkfleet\.serving\.role_default\()", text)
    return {m.group(1) for m in found if m.group(1) in names}


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_roles_copy_no_other_roles_defaults(role: Path):
    files = [*role_files(role), role / "meta/argument_specs.yml"]
    wrong = {f"{p.relative_to(ROOT)}: {name}" for p in files if p.is_file()
             for name in copied_defaults(p.read_text(encoding="utf-8"), role.name)}
    assert wrong == set(), "a second copy of another role's default: read it with sparkfleet.serving.role_default"


def test_the_one_owner_rules_can_fail():
    assert foreign_internal_names("{{ __model_plan.files }} {{ __vllm_x }}", "vllm") == {"__model_plan"}
    assert restated_defaults("{{ vllm_port | default(8000) }} {{ item.vllm_port | default(1) }} {{ x | default(1) }}") \
        == {"vllm_port"}
    text = "{{ vllm_port | default(8000) }} {{ registry_cache_port | default('registry_cache_port' | x) }}"
    assert copied_defaults(text, "firewall") == {"vllm_port", "registry_cache_port"}
    assert copied_defaults("{{ vllm_port | default('vllm_port' | sparkfleet.serving.role_default('vllm')) }}",
                           "firewall") == set()
    assert copied_defaults("{{ vllm_port | default(8000) }}", "vllm") == set()


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_published_results_are_set_by_the_role(role: Path):
    """What the README says the role publishes, a task of it sets."""
    set_names = {name for _where, how, name in internal_names(role) if how == "set_fact"}
    assert published(role) <= set_names


CHECK_KEY_NAMES = re.compile(r"query\('ansible\.builtin\.varnames', '([^']+)'\)")


def check_key_patterns(role: Path) -> list[str]:
    """The variable-name patterns of the role's check key (vars/main.yml `__<role>_check_key`):
    the names whose values decide whether the main tasks reuse the check play's answer."""
    path = role / "vars/main.yml"
    if not path.is_file():
        return []
    key = (load(path) or {}).get(f"__{role.name}_check_key", "")
    return CHECK_KEY_NAMES.findall(key)


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_check_key_leaves_out_the_published_results(role: Path):
    """A result the check publishes is not one of its inputs: were it in the key, the key
    would change as soon as the check publishes it, and the main tasks would run the whole
    check again (the model role asked the hub twice per site run that way)."""
    for pattern in check_key_patterns(role):
        assert not {name for name in published(role) if re.match(pattern, name)}, pattern


def test_the_check_key_rule_can_fail():
    assert re.match("^model_(?!token$)", "model_weights")
    assert not re.match("^model_(?!token$|weights$)", "model_weights")


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
