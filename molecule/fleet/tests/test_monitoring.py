"""Verify the monitoring: Prometheus on the monitoring host (group monitoring in molecule.yml) scrapes
every box's vLLM and node_exporter, the memory watchdog's textfile metrics with them, evaluates the
fleet's rules, and fires SparkfleetWatchdogStoppedContainer when the watchdog of the last box stops
its vLLM (its meminfo is a file the test rewrites, watchdog_proc_root); that box is then started
again as an operator would, with vllm_restart_after_watchdog_stop=true.

Runs after test_fleet.py (file order), whose rollouts it leaves alone: the stop comes last.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import testinfra
import yaml
from spark_testinfra import run_playbook, set_memory

SCENARIO = Path(__file__).resolve().parents[1]
SITE = SCENARIO.parents[1] / "site.yml"
PLATFORMS = yaml.safe_load((SCENARIO / "molecule.yml").read_text(encoding="utf-8"))["platforms"]
BOXES = [p["name"] for p in PLATFORMS if "spark" in p["groups"]]
(MONITOR,) = [p["name"] for p in PLATFORMS if "monitoring" in p.get("groups", [])]
HOST_VARS = yaml.safe_load((SCENARIO / "molecule.yml").read_text(encoding="utf-8"))["provisioner"]["inventory"][
    "host_vars"]
# The box whose watchdog reads the meminfo the test rewrites.
(STOPPED,) = [name for name, settings in HOST_VARS.items() if "watchdog_proc_root" in settings]
PROMETHEUS = "http://127.0.0.1:9090"


def box(name: str):
    return testinfra.get_host(f"docker://{name}")


def api(path: str) -> dict:
    """Prometheus's HTTP API, from the monitoring host itself (it listens on 127.0.0.1)."""
    answer = json.loads(box(MONITOR).check_output(f"curl -fsS --max-time 10 '{PROMETHEUS}{path}'"))
    assert answer["status"] == "success", answer
    return answer["data"]


def query(expr: str) -> dict[str, float]:
    """An instant query's samples by their box label."""
    samples = api(f"/api/v1/query?query={quote(expr)}")["result"]
    return {s["metric"].get("box", ""): float(s["value"][1]) for s in samples}


def wait_for(what: str, check, timeout: float = 90, every: float = 2):
    """check() until it returns something true; the last value otherwise fails the test."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            assert found, f"{what}: not within {timeout:.0f} s"
            return found
        time.sleep(every)


def test_every_vllm_and_node_target_is_up():
    def targets():
        active = api("/api/v1/targets?state=active")["activeTargets"]
        found = {(t["labels"]["job"], t["labels"]["box"]): t["health"] for t in active}
        return found if all(health == "up" for health in found.values()) else None

    found = wait_for("every target up", targets)
    # The gateway's router (fleet-1 is the gateway too) is found by default (gateway_metrics_targets).
    expected = {(job, name) for job in ("vllm", "node") for name in BOXES}
    expected |= {("prometheus", MONITOR), ("router", MONITOR)}
    assert set(found) == expected


def test_the_watchdogs_textfile_metrics_are_scraped_from_every_box():
    wait_for("the watchdog's metrics", lambda: len(query("sparkfleet_watchdog_up")) == len(BOXES))
    assert query('sparkfleet_watchdog_steady_threshold_percent{container="vllm"}') == {name: 90 for name in BOXES}
    assert query('sparkfleet_watchdog_stop_in_force{container="vllm"}') == {name: 0 for name in BOXES}


def test_the_recording_rules_are_evaluated_per_box():
    wait_for("the recording rules", lambda: len(query("box:node_memory_available:bytes")) == len(BOXES))
    # A box whose vLLM an earlier test restarted (test_killed_rollout.py) is back in its rule once Prometheus has
    # scraped the new server and evaluated the rules again: up to a scrape and an evaluation interval (5 s each).
    wait_for("vLLM's recording rules", lambda: set(query("box:vllm_requests_running:sum")) == set(BOXES))
    assert all(0 <= ratio <= 1 for ratio in query("box:vllm_kv_cache_usage:ratio").values())


def test_the_console_shows_every_box():
    page = box(MONITOR).check_output(f"curl -fsS --max-time 10 {PROMETHEUS}/consoles/sparkfleet.html")
    assert all(f"<tr><td>{name}</td>\n<td>up</td>" in page for name in BOXES), page


def firing(alert: str) -> list[dict]:
    return [a for a in api("/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == alert and a["state"] == "firing"]


@pytest.fixture(scope="module")
def stopped():
    """The watchdog of STOPPED stops vLLM (memory over the hard ceiling); memory comes back afterwards."""
    set_memory(box(STOPPED), 99)
    try:
        wait_for("the watchdog's stop", lambda: not box(STOPPED).docker("vllm").is_running, timeout=60, every=0.5)
    finally:
        set_memory(box(STOPPED), 50)
    return STOPPED


def test_an_alert_fires_when_the_watchdog_stops_a_container(stopped):
    alerts = wait_for("SparkfleetWatchdogStoppedContainer", lambda: firing("SparkfleetWatchdogStoppedContainer"))
    assert [(a["labels"]["box"], a["labels"]["container"]) for a in alerts] == [(stopped, "vllm")]
    assert query('sparkfleet_watchdog_stop_in_force{container="vllm"}')[stopped] == 1
    # Its vLLM is no longer scraped: the target is down (SparkfleetTargetDown after a minute). The alert
    # can fire before the next scrape of the box's vLLM: its target goes down within a scrape interval.
    wait_for("the stopped box's vLLM target down",
             lambda: query('up{job="vllm"}') == {name: 0 if name == stopped else 1 for name in BOXES})


def test_the_box_started_again_clears_the_stop_in_force(stopped):
    done = run_playbook(SITE, extra_vars={"vllm_restart_after_watchdog_stop": True}, limit=stopped)
    assert done.returncode == 0, done.stdout[-3000:]
    assert box(stopped).docker("vllm").is_running
    # The watchdog sees the container run again once its cool-down is over, and says so in its textfile.
    wait_for("the stop in force cleared",
             lambda: query('sparkfleet_watchdog_stop_in_force{container="vllm"}').get(stopped) == 0, timeout=150)
    wait_for("the box's vLLM scraped again", lambda: query('up{job="vllm"}').get(stopped) == 1)
