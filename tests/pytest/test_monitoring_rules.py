"""The monitoring role's Prometheus rules: `promtool check rules` and `promtool test rules`.

The alert rules are a template (their thresholds are role variables): they are rendered here
with the role's defaults as the template module renders them (Jinja2 with trim_blocks, Ansible's
default). promtool comes with the `prometheus` package (Debian, Ubuntu), as on the monitoring host.
"""

from __future__ import annotations

import http.server
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "monitoring"
RECORDING = ROLE / "files" / "sparkfleet-recording.rules.yml"
ALERTS = ROLE / "templates" / "sparkfleet-alerts.rules.yml.j2"
UNIT_TESTS = ROOT / "tests" / "pytest" / "promtool" / "sparkfleet-rules.test.yml"
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


# ------------------------------------------------------------------ the console, on a real Prometheus

CONSOLE = ROLE / "files" / "consoles" / "sparkfleet.html"
PROMETHEUS = shutil.which("prometheus")
# What one box exposes: node_exporter with the watchdog's textfile (a stop still in force) and vLLM,
# whose token counters grow at every scrape.
NODE_METRICS = """node_memory_MemAvailable_bytes 6.4e+10
node_memory_MemTotal_bytes 1.28e+11
sparkfleet_watchdog_up 1
sparkfleet_watchdog_memory_used_percent 50.000
sparkfleet_watchdog_steady_threshold_percent{container="vllm"} 90
sparkfleet_watchdog_stop_in_force{container="vllm"} 1
sparkfleet_watchdog_last_stop_timestamp_seconds{container="vllm"} 1800000000.000
sparkfleet_watchdog_actions_total{container="vllm",action="stop"} 1
"""


class FakeBox(http.server.BaseHTTPRequestHandler):
    scrapes = 0

    def log_message(self, *_args: object) -> None:
        pass

    def do_GET(self) -> None:
        FakeBox.scrapes += 1
        tokens = 100 * FakeBox.scrapes
        body = NODE_METRICS if self.path == "/node" else (
            f'vllm:generation_tokens_total{{engine="0"}} {tokens}\nvllm:prompt_tokens_total{{engine="0"}} {tokens}\n'
            'vllm:num_requests_running{engine="0"} 3\nvllm:num_requests_waiting{engine="0"} 0\n'
            'vllm:kv_cache_usage_perc{engine="0"} 0.25\n')
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def prometheus(tmp_path):
    """Prometheus with the role's rules and console, scraping one fake box every second."""
    if PROMETHEUS is None:
        pytest.skip("prometheus not installed (apt-get install prometheus; .ci/setup installs it)")
    box = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeBox)
    threading.Thread(target=box.serve_forever, daemon=True).start()
    target = f"127.0.0.1:{box.server_address[1]}"
    (tmp_path / "rules").mkdir()
    rules = rules_dir(tmp_path / "rules")
    (tmp_path / "consoles").mkdir()
    shutil.copy(CONSOLE, tmp_path / "consoles" / CONSOLE.name)
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "rule_files": [str(rules / "*.rules.yml")],
              "scrape_configs": [{"job_name": job, "metrics_path": f"/{job}",
                                  "static_configs": [{"targets": [target], "labels": {"box": "spark-1"}}]}
                                 for job in ("vllm", "node")]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    port = free_port()
    server = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", f"--web.console.templates={tmp_path / 'consoles'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)
        box.shutdown()


def console(url: str) -> str:
    with urllib.request.urlopen(f"{url}/consoles/sparkfleet.html", timeout=10) as answer:
        return answer.read().decode()


def test_the_console_shows_the_fleet_each_box_and_the_alerts(prometheus):
    deadline = time.monotonic() + 60
    page = ""
    while time.monotonic() < deadline:
        try:
            page = console(prometheus)
        except OSError:
            page = ""
        if "SparkfleetWatchdogStoppedContainer" in page and "<td>all boxes</td>\n<td>-" not in page:
            break
        time.sleep(0.5)
    assert "<td>spark-1</td>" in page, page
    assert "SparkfleetWatchdogStoppedContainer" in page, "the firing alert is not listed"
    assert "(still stopped)" in page and "vllm stopped 2027-01-15" in page
    # Rates once two scrapes are in, the box's gauges, memory 64e9 bytes = 59.6 GiB.
    assert "<td>all boxes</td>\n<td>-" not in page, "no tokens/s after a minute"
    assert "<td>3.0</td>" in page and "<td>25.0</td>" in page and "<td>59.6</td>" in page
