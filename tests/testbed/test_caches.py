"""The test bed's two caches keep compiled code and nothing else: what runs is what would have run.

- On a simulated Spark, standins/python/sparkfleet_sim_codecache.py keeps the code Python
  compiles from the sources of a module payload's zip (zipimport).
- On the controller, controller/callback_plugins/sparkfleet_testbed_controller.py keeps the code
  Jinja compiles from each template string.
"""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SIM_PYTHON = HERE / "standins" / "python"
CONTROLLER_PLUGINS = HERE / "controller" / "callback_plugins"


# --- the simulated Spark's zipimport cache ---------------------------------------------------


def payload(tmp_path: Path, body: str) -> Path:
    """A zip with one module, as Ansible's module wrapper imports module_utils from its payload."""
    archive = tmp_path / "payload.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("sparkfleet_payload_probe.py", textwrap.dedent(body))
    return archive


def import_from(archive: Path, cache: Path | None, code: str) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter (as on a box: the .pth loads the cache at start) imports from the zip."""
    env = {key: value for key, value in os.environ.items() if key != "SPARKFLEET_SIM_CODE_CACHE"}
    if cache is not None:
        env["SPARKFLEET_SIM_CODE_CACHE"] = str(cache)
    start = (
        f"import sys, os; sys.path.insert(0, {str(SIM_PYTHON)!r}); "
        "os.environ.get('SPARKFLEET_SIM_CODE_CACHE') and __import__('sparkfleet_sim_codecache'); "
        f"sys.path.insert(0, {str(archive)!r}); "
    )
    return subprocess.run([sys.executable, "-c", start + code], env=env, capture_output=True, text=True, check=False)


def cached_files(cache: Path) -> list[Path]:
    return sorted(path for path in cache.rglob("*") if path.is_file())


def test_a_payload_module_runs_the_same_and_is_kept_once(tmp_path: Path) -> None:
    archive = payload(tmp_path, "VALUE = 6 * 7\n")
    cache = tmp_path / "cache"
    probe = "import sparkfleet_payload_probe as m; print(m.VALUE)"
    runs = [import_from(archive, cache, probe) for _attempt in range(2)]
    assert [run.stdout for run in runs] == ["42\n", "42\n"], [run.stderr for run in runs]
    [kept] = cached_files(cache)
    assert kept.parent.name == kept.name[:2]


def test_the_second_import_loads_the_kept_code_instead_of_compiling(tmp_path: Path) -> None:
    """Planting other code under the kept key shows it is what runs: no compile on a hit."""
    archive = payload(tmp_path, "VALUE = 1\n")
    cache = tmp_path / "cache"
    assert import_from(archive, cache, "import sparkfleet_payload_probe").returncode == 0
    [kept] = cached_files(cache)
    kept.write_bytes(marshal.dumps(compile("VALUE = 'from the cache'", "planted", "exec")))
    run = import_from(archive, cache, "import sparkfleet_payload_probe as m; print(m.VALUE)")
    assert run.stdout == "from the cache\n", run.stderr


def test_a_traceback_names_the_payload_as_without_the_cache(tmp_path: Path) -> None:
    archive = payload(tmp_path, "def fail():\n    raise RuntimeError('boom')\n")
    cache = tmp_path / "cache"
    code = "import traceback, sparkfleet_payload_probe as m\ntry: m.fail()\nexcept RuntimeError: traceback.print_exc()"
    runs = [import_from(archive, target, code) for target in (None, cache, cache)]
    frames = [next(line for line in run.stderr.splitlines() if "sparkfleet_payload_probe.py" in line) for run in runs]
    assert frames[0] == frames[1] == frames[2]
    assert str(archive) in frames[0]


def test_without_the_variable_zipimport_is_left_alone(tmp_path: Path) -> None:
    """Imported even so (a .pth that loads it on a box started without the variable), it replaces nothing."""
    probe = (f"import sys; sys.path.insert(0, {str(SIM_PYTHON)!r}); import zipimport; "
             "compile_source = zipimport._compile_source; import sparkfleet_sim_codecache; "
             "print(zipimport._compile_source is compile_source)")
    env = {key: value for key, value in os.environ.items() if key != "SPARKFLEET_SIM_CODE_CACHE"}
    runs = [subprocess.run([sys.executable, "-c", probe], env=variables, capture_output=True, text=True, check=False)
            for variables in (env, env | {"SPARKFLEET_SIM_CODE_CACHE": str(tmp_path)})]
    assert [run.stdout for run in runs] == ["True\n", "False\n"], [run.stderr for run in runs]


def test_a_damaged_entry_is_compiled_again(tmp_path: Path) -> None:
    archive = payload(tmp_path, "VALUE = 5\n")
    cache = tmp_path / "cache"
    assert import_from(archive, cache, "import sparkfleet_payload_probe").returncode == 0
    [kept] = cached_files(cache)
    kept.write_bytes(b"\x00not marshal data")
    run = import_from(archive, cache, "import sparkfleet_payload_probe as m; print(m.VALUE)")
    assert run.stdout == "5\n", run.stderr


# --- the controller's template code cache ----------------------------------------------------

TEMPLATES = (
    "{{ 1 + 2 }}",
    "{{ items | map('upper') | join(',') }}",
    "{% for x in items %}{{ x }}-{% endfor %}",
    "{{ 'a\\nb' }}",
    "#jinja2: variable_start_string:'[%', variable_end_string:'%]'\n[% items | length %]",
    "{{ '{{ nested }}' }}",
)


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("template-cache")


def render_all(cache: Path | None, templates: tuple[str, ...] = TEMPLATES) -> subprocess.CompletedProcess[str]:
    """Each template through ansible-core's own Templar, in a fresh interpreter, the callback loaded or not."""
    env = {key: value for key, value in os.environ.items() if key != "SPARKFLEET_TEST_TEMPLATE_CACHE"}
    if cache is not None:
        env["SPARKFLEET_TEST_TEMPLATE_CACHE"] = str(cache)
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(CONTROLLER_PLUGINS)!r})
        from ansible.template import Templar, trust_as_template
        import sparkfleet_testbed_controller as cb
        active = cb.CallbackModule()._active
        templar = Templar(variables={{"items": ["a", "b"], "nested": "N"}})
        out = []
        for source in json.loads(sys.argv[1]):
            for escape in (True, False):
                try:
                    out.append(repr(templar.template(trust_as_template(source), escape_backslashes=escape)))
                except Exception as error:
                    out.append(type(error).__name__)
        print(json.dumps({{"active": active, "out": out}}))
    """)
    return subprocess.run([sys.executable, "-c", script, json.dumps(list(templates))], env=env, capture_output=True,
                          text=True, check=False)


def results(run: subprocess.CompletedProcess[str]) -> dict:
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def test_templates_render_the_same_with_the_cache_cold_warm_and_without(controller: Path) -> None:
    without, cold, warm = (results(render_all(cache)) for cache in (None, controller, controller))
    assert not without["active"]
    assert cold["active"] and warm["active"]
    assert without["out"] == cold["out"] == warm["out"]
    assert "'a-b-'" in without["out"]


def test_each_template_and_setting_has_its_own_entry(controller: Path) -> None:
    results(render_all(controller))
    kept = cached_files(controller)
    # Backslash escaping is part of every key: each template twice.
    assert len(kept) == 2 * len(TEMPLATES)


def test_a_warm_run_loads_the_kept_code_instead_of_compiling(tmp_path: Path) -> None:
    """Every entry replaced by the code of `{{ 1 + 2 }}`: a run that loads them renders 3 for each template."""
    results(render_all(tmp_path / "three", ("{{ 1 + 2 }}",)))
    three = cached_files(tmp_path / "three")[0].read_bytes()
    cold = results(render_all(tmp_path / "all"))
    for path in cached_files(tmp_path / "all"):
        path.write_bytes(three)
    planted = results(render_all(tmp_path / "all"))
    assert cold["out"][0] == "3" and set(cold["out"]) != {"3"}
    assert set(planted["out"]) == {"3"}
