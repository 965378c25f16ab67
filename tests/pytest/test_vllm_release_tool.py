"""tools/vllm_release.py: what it reports between the committed tables of the supported releases."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "vllm_release.py"


def load_tool():
    spec = importlib.util.spec_from_file_location("vllm_release_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_0_34_against_0_19_reports_options_registries_and_messages():
    changes = load_tool().compare("0.19.1", "0.34.0")
    assert "+ --linear-backend" in changes["options"] and "+ --disable-prefix-caching" in changes["options"]
    assert any(line.startswith("~ --kv-cache-dtype: choices") for line in changes["options"])
    assert any(line.startswith("linear_backends: +") for line in changes["registries"])
    messages = changes["messages"]
    assert "gone: mamba-align-block-size (was vllm/config/vllm.py:1739)" in messages
    assert "new: invalid-kv-cache-dtype (vllm/config/cache.py:508)" in messages
    assert ("moved: unknown-tool-call-parser vllm/entrypoints/openai/api_server.py:513 -> "
            "vllm/entrypoints/common/cli_args.py:630") in messages
    assert any(line.startswith("reworded: nnodes-world-size") for line in messages)


def test_a_release_against_itself_has_no_changes():
    assert load_tool().compare("0.34.0", "0.34.0") == {"options": [], "registries": [], "messages": []}


def test_every_recipe_passes_the_releases_it_names():
    assert load_tool().recheck_recipes("0.34.0") == []


def test_a_release_without_a_flag_a_recipe_uses_is_reported_per_recipe_and_box(tmp_path, monkeypatch):
    """A made-up next release: 0.34.0's table without --async-scheduling, which three recipes pass."""
    import json  # noqa: PLC0415

    tool = load_tool()
    fake = json.loads((tool.STANDIN / "releases" / "0.34.0" / "vllm_serve.json").read_text(encoding="utf-8"))
    fake["options"] = [row for row in fake["options"] if "--async-scheduling" not in row["options"]]
    (tmp_path / "9.9.9").mkdir()
    (tmp_path / "9.9.9" / "vllm_serve.json").write_text(json.dumps(fake), encoding="utf-8")
    monkeypatch.setattr(tool, "table", lambda version: json.loads(
        (tmp_path / version / "vllm_serve.json").read_text(encoding="utf-8")))
    findings = tool.recheck_recipes("9.9.9")
    assert any(line.startswith("qwen3.6-35b-a3b-nvfp4 (128 GB box): vLLM 9.9.9 has no option --async-scheduling")
               for line in findings), findings
    assert not any(line.startswith("qwen3.5-35b-a3b-fp8 ") for line in findings)


def test_the_command_prints_the_comparison_without_regenerating():
    done = subprocess.run([sys.executable, str(TOOL), "0.19.1", "--no-generate"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("vLLM 0.19.1 against 0.34.0:\noptions: ")
    assert "  - --linear-backend\n" in done.stdout and "recipes: 0 findings" in done.stdout


def test_an_unknown_release_without_tables_is_refused():
    done = subprocess.run([sys.executable, str(TOOL), "9.9.9", "--no-generate"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode != 0 and "no tables for vLLM 9.9.9" in done.stderr
