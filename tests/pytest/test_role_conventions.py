"""Every role's variables are prefixed, defaulted, typed and described (no drift)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir()) if (ROOT / "roles").is_dir() else []


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_defaults_match_argument_specs(role: Path):
    defaults = load(role / "defaults/main.yml")
    specs = load(role / "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(defaults) - set(specs) == set(), "defaulted but not in meta/argument_specs.yml"
    optional = {name for name, spec in specs.items() if not spec.get("required")}
    assert optional - set(defaults) == set(), "optional in argument_specs but no default"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_option_is_typed_described_and_prefixed(role: Path):
    specs = load(role / "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    for name, spec in specs.items():
        assert name.startswith(f"{role.name}_"), f"{name} is not prefixed with {role.name}_"
        assert spec.get("type"), f"{name} has no type"
        assert spec.get("description"), f"{name} has no description"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_role_has_a_readme(role: Path):
    assert (role / "README.md").is_file()
