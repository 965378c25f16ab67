"""The README's troubleshooting table names every failure the vllm role diagnoses, with the
variables the diagnosis names, and its quick start starts with the demo."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def known_failures() -> list[tuple[str, list[str]]]:
    """(key, variables) of each KnownFailure in vllm_diagnosis.py, read without importing
    ansible_collections (pytest here runs outside the collection layout)."""
    tree = ast.parse((ROOT / "plugins/module_utils/vllm_diagnosis.py").read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "KnownFailure":
            kw = {k.arg: k.value for k in node.keywords}
            found.append((ast.literal_eval(kw["key"]), list(ast.literal_eval(kw["variables"]))))
    return found


def troubleshooting_rows() -> dict[str, str]:
    section = README.split("## Troubleshooting", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): line for line in section.splitlines() if (m := re.match(r"^\| `([a-z0-9-]+)` \|", line))}


def test_every_diagnosis_is_in_the_table_with_its_variables():
    rows = troubleshooting_rows()
    failures = known_failures()
    assert len(failures) >= 10
    for key, variables in failures:
        assert key in rows, f"README troubleshooting table lacks {key}"
        for variable in variables:
            assert f"`{variable}`" in rows[key], f"{key}: {variable} missing"
    assert set(rows) == {key for key, _variables in failures}, "the table names a diagnosis the role does not know"


def test_quick_start_begins_with_the_demo():
    block = README.split("## Quick start", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert commands[0].split("#")[0].strip() == "make demo"
    assert "bash .ci/run" in commands and any(c.startswith("ansible-playbook site.yml -i spark") for c in commands)
