"""The monitoring role's Prometheus rules: `promtool check rules` and `promtool test rules`.

The alert rules are a template (their thresholds are role variables): they are rendered here
with the role's defaults as the template module renders them (Jinja2 with trim_blocks, Ansible's
default). promtool comes with the `prometheus` package (Debian, Ubuntu), as on the monitoring host.
"""

from __future__ import annotations

import http.server
import json
import re
import shutil
import socket
import struct
import subprocess
import threading
import time
import urllib.request
import zlib
from html.parser import HTMLParser
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
                                  "static_configs": [{"targets": [target], "labels": labels}]}
                                 for job, labels in (("vllm", {"box": "spark-1", "deployment": "vllm"}),
                                                     ("node", {"box": "spark-1"}))]}
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


def ready_console(url: str) -> str:
    """The console's HTML once the alert fires and the fleet has a token rate (two scrapes), or after a minute."""
    deadline = time.monotonic() + 60
    page = ""
    while time.monotonic() < deadline:
        try:
            page = console(url)
        except OSError:
            page = ""
        if "SparkfleetWatchdogStoppedContainer" in page and "<td>all boxes</td>\n<td>-" not in page:
            break
        time.sleep(0.5)
    return page


def test_the_console_shows_the_fleet_each_box_and_the_alerts(prometheus):
    page = ready_console(prometheus)
    assert "<td>spark-1</td>" in page, page
    assert "SparkfleetWatchdogStoppedContainer" in page, "the firing alert is not listed"
    assert "(still stopped)" in page and "vllm stopped 2027-01-15" in page
    # Rates once two scrapes are in, the box's gauges, memory 64e9 bytes = 59.6 GiB.
    assert "<td>all boxes</td>\n<td>-" not in page, "no tokens/s after a minute"
    assert "<td>3.0</td>" in page and "<td>25.0</td>" in page and "<td>59.6</td>" in page
    assert "<tr><td>spark-1</td><td>vllm</td>" in page, "no row for the box's deployment"


# ------------------------------------------------------------------ the console, in a real headless browser

# Debian's package (.ci/setup installs it). The console is server-side HTML and CSS only: no script
# runs in it (no PromConsole.Graph), so the browser's part is to parse it, apply its styles, paint
# it, and write nothing to its console.
CHROMIUM = shutil.which("chromium")
# Kept after the run; tests/output/ is neither tracked (.gitignore) nor shipped (galaxy.yml build_ignore).
SCREENSHOT = ROOT / "tests" / "output" / "console" / "sparkfleet.png"
WINDOW = (1280, 2000)
BAD = bytes((0xFF, 0xDD, 0xDD))  # the console's `.bad` background, #fdd, once painted


class Tables(HTMLParser):
    """The text of every table cell in a document: tables, rows, cells."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None:
            self.tables[-1][-1].append(" ".join("".join(self.cell).split()))
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def rows_by_header(table: list[list[str]]) -> dict[str, dict[str, str]]:
    """A table's data rows keyed by their first cell, each cell keyed by its column's header."""
    header, *rows = table
    return {row[0]: dict(zip(header, row, strict=False)) for row in rows}


def browse(url: str, profile: Path, screenshot: Path) -> tuple[str, list[str]]:
    """The DOM Chromium built from the page, its console messages, and a screenshot of the page."""
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    screenshot.unlink(missing_ok=True)
    # --no-sandbox: Chromium's sandbox cannot start as root in a container. --virtual-time-budget: the
    # page's own timers and fetches, if it ever has any, get 5 s (of virtual time) to run.
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         f"--user-data-dir={profile}", "--enable-logging=stderr", "--virtual-time-budget=5000",
         f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--screenshot={screenshot}", "--dump-dom", url],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout, [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


def png_rows(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the RGB rows of an 8-bit RGB PNG (what Chromium writes), every chunk's CRC checked.

    The PNG specification, https://www.w3.org/TR/png-3/: chunks (5.3), IHDR (11.2.1), filters (9.2).
    """
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, header, compressed = 8, b"", b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        assert struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0] == zlib.crc32(kind + body), kind
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            compressed += body
        pos += 12 + length
    width, height, depth, colour_type, compression, filtering, interlace = struct.unpack(">IIBBBBB", header)
    assert (depth, colour_type, compression, filtering, interlace) == (8, 2, 0, 0, 0), "expected 8-bit RGB"
    raw, stride, previous, rows = zlib.decompress(compressed), width * 3, bytes(width * 3), []
    for y in range(height):
        line = raw[y * (stride + 1):(y + 1) * (stride + 1)]
        previous = unfilter(line[0], bytearray(line[1:]), previous)
        rows.append(previous)
    return width, height, rows


def unfilter(kind: int, line: bytearray, above: bytes) -> bytes:
    """One scanline's bytes before the PNG filter `kind` (0 None, 1 Sub, 2 Up, 3 Average, 4 Paeth)."""
    if kind == 2:
        return bytes((x + b) & 0xFF for x, b in zip(line, above, strict=True))
    for i in range(len(line) if kind else 0):
        a, b, c = (line[i - 3], above[i], above[i - 3]) if i >= 3 else (0, above[i], 0)
        if kind == 1:
            line[i] = (line[i] + a) & 0xFF
        elif kind == 3:
            line[i] = (line[i] + ((a + b) >> 1)) & 0xFF
        else:
            p = a + b - c
            line[i] = (line[i] + min((abs(p - a), 0, a), (abs(p - b), 1, b), (abs(p - c), 2, c))[2]) & 0xFF
    return bytes(line)


def test_the_console_in_a_headless_browser(prometheus, tmp_path):
    if CHROMIUM is None:
        pytest.skip("chromium not installed (apt-get install chromium; .ci/setup installs it)")
    assert "SparkfleetWatchdogStoppedContainer" in ready_console(prometheus), "the alert never fired"
    dom, messages = browse(f"{prometheus}/consoles/sparkfleet.html", tmp_path / "chromium", SCREENSHOT)
    print(f"screenshot of the console: {SCREENSHOT}")
    assert messages == [], "the page wrote to the browser's console"
    parsed = Tables()
    parsed.feed(dom)
    assert len(parsed.tables) == 4, dom
    fleet, boxes, deployments, alerts = (rows_by_header(table) for table in parsed.tables)
    # Every box Prometheus knows has its row, and only those.
    with urllib.request.urlopen(f"{prometheus}/api/v1/query?query=up%7Bjob%3D%22node%22%7D", timeout=10) as answer:
        known = {series["metric"]["box"] for series in json.load(answer)["data"]["result"]}
    assert set(boxes) == known == {"spark-1"}
    tokens = fleet["all boxes"]["Generated tokens/s"]
    assert tokens != "-" and float(tokens) > 0, tokens
    # The fake box's figures: 3 requests running, KV cache 0.25, 64e9 bytes available, the watchdog's gauges.
    assert {column: boxes["spark-1"][column] for column in (
        "vLLM", "Running", "Waiting", "KV cache used %", "Memory available (GiB)", "Memory used % (watchdog)",
        "Steady threshold %")} == {
        "vLLM": "up", "Running": "3.0", "Waiting": "0.0", "KV cache used %": "25.0",
        "Memory available (GiB)": "59.6", "Memory used % (watchdog)": "50.0", "Steady threshold %": "90.0"}
    assert boxes["spark-1"]["Watchdog stops"].startswith("vllm stopped 2027-01-15")
    assert boxes["spark-1"]["Watchdog stops"].endswith("(still stopped)")
    assert alerts["SparkfleetWatchdogStoppedContainer"]["Box"] == "spark-1"
    assert alerts["SparkfleetWatchdogStoppedContainer"]["Deployment"] == "-"
    # A row per deployment (its target's `deployment` label), with its own figures.
    assert {column: deployments["spark-1"][column] for column in (
        "Deployment", "vLLM", "Running", "Waiting", "KV cache used %")} == {
        "Deployment": "vllm", "vLLM": "up", "Running": "3.0", "Waiting": "0.0", "KV cache used %": "25.0"}

    width, height, rows = png_rows(SCREENSHOT.read_bytes())
    assert (width, height) == WINDOW
    colours = {row[i:i + 3] for row in rows for i in range(0, len(row), 3)}
    # Text anti-aliased on white gives dozens of shades; a blank or failed page gives one or two.
    assert len(colours) > 20, f"{len(colours)} colours: a blank page?"
    assert BAD in colours, "the firing alert's row is not painted in the console's .bad colour"


def test_the_readmes_example_router_target_is_a_routers_metrics_port():
    """The routers' metrics are on gateway_metrics_port and the ports after it, one per model (roles/gateway)."""
    readme = (ROLE / "README.md").read_text(encoding="utf-8")
    first = yaml.safe_load((ROOT / "roles" / "gateway" / "defaults" / "main.yml").read_text())["gateway_metrics_port"]
    ports = [int(port) for port in re.findall(r'monitoring_router_targets: \[[^\]]*?:(\d+)"', readme)]
    assert ports and all(first <= port < first + 10 for port in ports), ports
