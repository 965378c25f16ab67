"""Which role variables the check play (playbooks/check.yml) checks, read from the roles' tasks.

A *check* is an ansible.builtin.assert or ansible.builtin.fail task. The variables it checks
are the role variables (options of a role's meta/argument_specs.yml) its text names, directly
or through the internal names it uses (`__<role>_...` of vars/main.yml or of a set_fact):
the firewall's "Refuse bad input" names only __firewall_plan, which is computed from every
firewall_* variable. What the check play runs is every task file reachable from its
import_role tasks; what a role runs in site.yml is every task file reachable from its
tasks/main.yml (import_tasks, include_tasks with a templated name matching every file it
can name, import_role and include_role followed).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ("ansible.builtin.assert", "ansible.builtin.fail")
INCLUDE_TASKS = ("ansible.builtin.import_tasks", "ansible.builtin.include_tasks")
INCLUDE_ROLE = ("ansible.builtin.import_role", "ansible.builtin.include_role")
SET_FACT = "ansible.builtin.set_fact"
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

TaskFile = tuple[str, str]  # (role, file name under tasks/)


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def tasks_in(items: list[dict] | None) -> Iterator[dict]:
    """Every task of a list, the tasks of its blocks included."""
    for task in items or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from tasks_in(task.get(key))


def role_name(fqcn: str) -> str:
    return fqcn.rsplit(".", 1)[-1]


def task_files(role: str, entry: str) -> set[TaskFile]:
    """The task files that roles/<role>/tasks/<entry>.yml runs, itself included."""
    found: set[TaskFile] = set()
    _follow(role, f"{entry}.yml", found)
    return found


def _follow(role: str, name: str, found: set[TaskFile]) -> None:
    if (role, name) in found:
        return
    found.add((role, name))
    tasks_dir = ROOT / "roles" / role / "tasks"
    for task in tasks_in(load(tasks_dir / name)):
        for key in INCLUDE_TASKS:
            if key in task:
                target = task[key] if isinstance(task[key], str) else task[key]["file"]
                for path in sorted(tasks_dir.glob(re.sub(r"{{.*?}}", "*", target))):
                    _follow(role, path.name, found)
        for key in INCLUDE_ROLE:
            # A role the caller names (vllm_before_restart) is the caller's, not this role's path.
            if key in task and "{{" not in task[key]["name"]:
                _follow(role_name(task[key]["name"]), f"{task[key].get('tasks_from', 'main')}.yml", found)


def check_play_files() -> set[TaskFile]:
    """Every task file the check play runs (its tasks are import_role tasks)."""
    found: set[TaskFile] = set()
    for spec in check_play_roles():
        found |= task_files(role_name(spec["name"]), spec.get("tasks_from", "main"))
    return found


def check_play_imports() -> dict[str, str]:
    """role -> the entry point the check play imports it with."""
    return {role_name(spec["name"]): spec.get("tasks_from", "main") for spec in check_play_roles()}


def check_play_roles() -> list[dict]:
    """The check play's import_role / include_role arguments, in order."""
    play = load(ROOT / "playbooks/check.yml")[0]
    return [task[key] for task in play["tasks"] for key in INCLUDE_ROLE if key in task]


def site_roles() -> list[str]:
    """The roles the provisioning play of playbooks/site.yml runs, in order."""
    plays = load(ROOT / "playbooks/site.yml")
    listed = [r["role"] for play in plays for r in play.get("roles", [])]
    imported = [task[key]["name"] for play in plays for task in tasks_in(play.get("tasks")) for key in INCLUDE_ROLE
                if key in task]
    return [role_name(name) for name in listed + imported]


def site_files() -> set[TaskFile]:
    found: set[TaskFile] = set()
    for role in site_roles():
        found |= task_files(role, "main")
    return found


@cache
def role_options() -> dict[str, dict]:
    """Every role variable (an option of any entry point of any role) -> its spec."""
    merged: dict[str, dict] = {}
    for spec in sorted(ROOT.glob("roles/*/meta/argument_specs.yml")):
        for entry in load(spec)["argument_specs"].values():
            merged.update(entry.get("options") or {})
    return merged


@cache
def internal_definitions() -> dict[str, str]:
    """Internal name -> the text that defines it (vars/main.yml, set_fact, task vars)."""
    defined: dict[str, list[str]] = {}
    for path in sorted(ROOT.glob("roles/*/vars/main.yml")):
        for key, value in (load(path) or {}).items():
            defined.setdefault(key, []).append(yaml.safe_dump(value))
    for path in sorted(ROOT.glob("roles/*/tasks/*.yml")):
        for task in tasks_in(load(path)):
            for key, value in {**(task.get(SET_FACT) or {}), **(task.get("vars") or {})}.items():
                defined.setdefault(key, []).append(yaml.safe_dump(value))
    return {key: "\n".join(texts) for key, texts in defined.items()}


def variables_named(text: str) -> set[str]:
    """The role variables a text depends on, through the internal names it uses."""
    options, definitions = role_options(), internal_definitions()
    seen: set[str] = set()
    todo = set(NAME.findall(text))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name.startswith("__") and name in definitions:
            todo |= set(NAME.findall(definitions[name]))
    return {name for name in seen if name in options}


def checks(files: set[TaskFile]) -> Iterator[tuple[TaskFile, dict]]:
    for role, name in sorted(files):
        for task in tasks_in(load(ROOT / "roles" / role / "tasks" / name)):
            if any(key in task for key in CHECKS):
                yield (role, name), task


def condition(task: dict) -> dict:
    """What decides a check: an assert's `that`, the task's `when`, its loop and the vars they use."""
    assertion = task.get("ansible.builtin.assert") or {}
    return {"that": assertion.get("that"), **{key: task.get(key) for key in ("when", "loop", "vars")}}


def checked_variables(files: set[TaskFile], conditions_only: bool = False) -> dict[str, list[str]]:
    """Role variable -> the checks (role/file: task name) among these files that check it.

    conditions_only: the variables that decide a check, not those its message only shows.
    """
    found: dict[str, list[str]] = {}
    for (role, name), task in checks(files):
        text = yaml.safe_dump(condition(task) if conditions_only
                              else {key: value for key, value in task.items() if key != "name"})
        for variable in variables_named(text):
            found.setdefault(variable, []).append(f"{role}/tasks/{name}: {task.get('name')}")
    return found
