"""The monitoring role's Prometheus rules: `promtool check rules` and `promtool test rules`.

The alert rules are a template (their thresholds are role variables): they are rendered here
with the role's defaults as the template module renders them (Jinja2 with trim_blocks, Ansible's
default). promtool comes with the `prometheus` package (Debian, Ubuntu), as on the monitoring host.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "monitoring"
RECORDING = ROLE / "files" / "sparkfleet-recording.rules.yml"
ALERTS = ROLE / "templates" / "sparkfleet-alerts.rules.yml.j2"
UNIT_TESTS = ROOT / "tests" / "promtool" / "sparkfleet-rules.test.yml"
PROMTOOL = shutil.which("promtool")

pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (apt-get install prometheus; .ci/setup installs it)"
)


def defaults() -> dict[str, Any]:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))


def render_alerts(**overrides: Any) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True)
    return env.from_string(ALERTS.read_text(encoding="utf-8")).render({**defaults(), **overrides})


def rules_dir(tmp_path: Path, **overrides: Any) -> Path:
    """The rule files as the role installs them, and the unit tests beside them."""
    shutil.copy(RECORDING, tmp_path / RECORDING.name)
    (tmp_path / "sparkfleet-alerts.rules.yml").write_text(render_alerts(**overrides), encoding="utf-8")
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    return tmp_path


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_rules_are_valid(tmp_path):
    where = rules_dir(tmp_path)
    done = promtool("check", "rules", RECORDING.name, "sparkfleet-alerts.rules.yml", cwd=where)
    assert done.returncode == 0, done.stdout + done.stderr


def test_rules_pass_their_unit_tests(tmp_path):
    done = promtool("test", "rules", UNIT_TESTS.name, cwd=rules_dir(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("setting", "value", "alert"), [
    ("monitoring_ttft_p95_alert_seconds", 20, "SparkfleetTimeToFirstTokenHigh"),
    ("monitoring_kv_cache_alert_ratio", 0.97, "SparkfleetKVCacheFullRequestsWaiting"),
])
def test_alert_thresholds_come_from_the_role_variables(tmp_path, setting, value, alert):
    # Above the figures the unit tests feed (p95 9.75 s, KV cache 95 %): the alert that fires there no longer does.
    done = promtool("test", "rules", UNIT_TESTS.name, cwd=rules_dir(tmp_path, **{setting: value}))
    assert done.returncode != 0
    assert f"alertname: {alert}," in done.stdout + done.stderr


def rules(path_text: str) -> list[dict]:
    return [rule for group in yaml.safe_load(path_text)["groups"] for rule in group["rules"]]


def test_every_alert_has_a_case_that_fires_and_one_that_does_not():
    cases: dict[str, list[bool]] = {}
    for test in yaml.safe_load(UNIT_TESTS.read_text(encoding="utf-8"))["tests"]:
        for case in test.get("alert_rule_test", []):
            cases.setdefault(case["alertname"], []).append(bool(case.get("exp_alerts")))
    alerts = {rule["alert"] for rule in rules(render_alerts()) if "alert" in rule}
    assert alerts == set(cases), "alerts without a promtool test, or tests of alerts that do not exist"
    for alert, fired in cases.items():
        assert True in fired and False in fired, f"{alert}: expected a case that fires and one that does not"


def test_every_recording_rule_is_tested():
    tested = " ".join(case["expr"] for test in yaml.safe_load(UNIT_TESTS.read_text(encoding="utf-8"))["tests"]
                      for case in test.get("promql_expr_test", []))
    untested = [rule["record"] for rule in rules(RECORDING.read_text(encoding="utf-8")) if rule["record"] not in tested]
    assert untested == []
