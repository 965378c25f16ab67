"""module_utils is what runs on a box: every file there is imported by a module (directly or
through another module_utils file). Helpers that only the controller's filters and actions
import live in plugin_utils, which is never shipped to a box."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "plugins"
PACKAGE = "ansible_collections.sparkfleet.serving.plugins."


def imports(path: Path) -> set[tuple[str, str]]:
    """(kind, name) of every collection plugin file this file imports: ("module_utils", "inputs")."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        for name in names:
            if name.startswith(PACKAGE):
                kind, _sep, rest = name[len(PACKAGE):].partition(".")
                found.add((kind, rest.split(".")[0]))
    return found


def shipped_to_boxes(plugins: Path = PLUGINS) -> set[str]:
    """The module_utils files the modules import, followed through module_utils."""
    todo = list((plugins / "modules").glob("*.py"))
    seen: set[str] = set()
    while todo:
        for kind, name in imports(todo.pop()):
            if kind == "module_utils" and name not in seen:
                seen.add(name)
                todo.append(plugins / "module_utils" / f"{name}.py")
    return seen


def shipped_by_roles(root: Path = ROOT) -> set[str]:
    """The module_utils files a role copies to the box as they are: links in its files/ (the
    model role's download program imports the planner that check mode plans with)."""
    module_utils = (root / "plugins" / "module_utils").resolve()
    return {link.resolve().stem for link in root.glob("roles/*/files/*")
            if link.is_symlink() and link.resolve().parent == module_utils}


# module_utils files written for a module that does not import them yet, each with the module that will.
# Remove the entry when that module imports it (the assertion below then holds without it).
PENDING_IMPORT: dict[str, str] = {}


def test_every_module_utils_file_runs_on_a_box():
    present = {path.stem for path in (PLUGINS / "module_utils").glob("*.py")}
    assert shipped_by_roles() == {"model_plan"}
    assert not set(PENDING_IMPORT) & shipped_to_boxes(), "imported now: drop it from PENDING_IMPORT"
    controller_only = present - shipped_to_boxes() - shipped_by_roles() - set(PENDING_IMPORT)
    assert controller_only == set(), f"imported by no module: move to plugins/plugin_utils/: {sorted(controller_only)}"


def test_module_utils_never_imports_plugin_utils():
    # A module would fail on the box: plugin_utils is not in its payload.
    wrong = {path.name: sorted(imports(path)) for path in (PLUGINS / "module_utils").glob("*.py")
             if any(kind == "plugin_utils" for kind, _name in imports(path))}
    assert wrong == {}


def test_the_check_sees_a_module_utils_file_only_the_controller_imports(tmp_path):
    # The layout as it was: fleet_report in module_utils, imported only by a filter.
    for kind in ("modules", "module_utils", "filter"):
        (tmp_path / kind).mkdir()
    (tmp_path / "modules" / "m.py").write_text(f"from {PACKAGE}module_utils.inputs import X\n")
    (tmp_path / "module_utils" / "inputs.py").write_text("X = 1\n")
    (tmp_path / "module_utils" / "fleet_report.py").write_text("Y = 1\n")
    (tmp_path / "filter" / "fleet.py").write_text(f"from {PACKAGE}module_utils.fleet_report import Y\n")
    assert shipped_to_boxes(tmp_path) == {"inputs"}
