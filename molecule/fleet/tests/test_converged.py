"""Verify the boxes as site.yml left them, before anything else runs on them (this file sorts first):
every role's result on each of the three simulated Sparks, from the weights (fleet-1 from the stand-in
hub, the others from fleet-1) and the image (through fleet-1's cache) up to the vLLM API answering with
the shipped profile."""

from __future__ import annotations

import json
from pathlib import Path

from spark_testinfra import golden_vllm_argv, inspect_container

KEY = "sk-molecule-fleet-test"
SERVED = "qwen3.5-35b"
API = "http://127.0.0.1:8000"
# The fleet's pull-through cache (roles/registry_cache on fleet-1), the docker role's default mirror.
MIRRORS = ["http://fleet-1:5000"]


def daemon_json(host) -> dict:
    return json.loads(host.file("/etc/docker/daemon.json").content_string)


def api(host, path: str, *curl_args: str) -> str:
    return host.check_output(f"curl -fsS --max-time 10 -H 'Authorization: Bearer {KEY}' "
                             + " ".join(curl_args) + f" {API}{path}")


def test_daemon_json_holds_mirrors_live_restore_and_the_nvidia_runtime(host):
    config = daemon_json(host)
    assert config["registry-mirrors"] == MIRRORS
    assert config["live-restore"] is True
    assert config["log-opts"] == {"max-size": "100m", "max-file": "3"}
    assert config["runtimes"]["nvidia"] == {"path": "nvidia-container-runtime", "args": []}


def test_docker_engine_runs_with_the_configuration(host):
    docker = host.service("docker")
    assert docker.is_running and docker.is_enabled
    info = json.loads(host.check_output("docker info --format '{{json .}}'"))
    assert "nvidia" in info["Runtimes"]
    assert info["RegistryConfig"]["Mirrors"] == [m + "/" for m in MIRRORS]
    assert info["LiveRestoreEnabled"] is True


def test_watchdog_unit_is_active_and_watches_vllm(host):
    service = host.service("sparkfleet-watchdog")
    assert service.is_running
    assert service.is_enabled
    assert host.check_output("systemctl show -p ActiveState --value sparkfleet-watchdog") == "active"
    config = json.loads(host.file("/etc/sparkfleet/watchdog.json").content_string)
    assert [c["name"] for c in config["containers"]] == ["vllm"]


def test_vllm_runs_the_profile_command_line_with_the_nvidia_runtime(host):
    info = inspect_container(host)
    assert info["State"]["Running"] is True
    assert info["HostConfig"]["Runtime"] == "nvidia"
    assert info["HostConfig"]["NetworkMode"] == "host"
    assert [info["Path"], *info["Args"]] == ["vllm", *golden_vllm_argv()]
    recorded = json.loads(host.file("/var/lib/sparkfleet/vllm/last-run.json").content_string)
    assert recorded["image_id"] == info["Image"]


def test_vllm_api_is_healthy_and_serves_the_profile_model(host):
    assert host.run(f"curl -fsS --max-time 10 -o /dev/null {API}/health").rc == 0
    models = json.loads(api(host, "/v1/models"))
    assert [m["id"] for m in models["data"]] == [SERVED]
    body = json.dumps({"model": SERVED, "messages": [{"role": "user", "content": "hello from site"}]})
    reply = json.loads(api(host, "/v1/chat/completions", "-H 'Content-Type: application/json'", f"-d '{body}'"))
    assert reply["model"] == SERVED
    assert reply["choices"][0]["message"]["content"].endswith("hello from site")


def test_vllm_api_refuses_a_request_without_the_key(host):
    status = host.check_output(f"curl -s -o /dev/null -w '%{{http_code}}' --max-time 10 {API}/v1/models")
    assert status == "401"


# --- the weights: fleet-1 from the stand-in hub, the others from fleet-1 over the LAN ------------

MODEL_DIR = "/srv/models/Qwen3.5-35B-A3B-FP8"
HUB = "http://hub.sparkfleet.test"
SEED = "fleet-1"
TIMINGS = Path("/tmp/sparkfleet-molecule-timings/fleet.json")


def manifest(host) -> dict:
    return json.loads(host.file(f"{MODEL_DIR}/sparkfleet-manifest.json").content_string)


def fetch_unit_seconds(host) -> float:
    """How long the box's download unit ran, from systemd's journal (start to end of the last run)."""
    lines = host.check_output("journalctl -u sparkfleet-model-fetch.service -o short-unix --no-pager").splitlines()
    started = [float(x.split()[0]) for x in lines if "Started" in x]
    ended = [float(x.split()[0]) for x in lines if "Deactivated" in x or "Consumed" in x or "Failed" in x]
    return round(max(ended) - max(started), 1) if started and ended else -1.0


def test_weights_are_complete_and_verified(host):
    assert host.run(f"cd {MODEL_DIR} && sha256sum --quiet -c SHA256SUMS").rc == 0
    got = manifest(host)
    assert got["repo"] == "Qwen/Qwen3.5-35B-A3B-FP8"
    repos = json.loads(host.check_output(f"curl -fsS {HUB}/_standin/repos"))["repos"]
    assert got["commit"] == repos[got["repo"]]["refs"]["branches"]["main"]
    assert host.run(f"find {MODEL_DIR} -type l -o -name '*.incomplete' -o -name .sparkfleet-staging").stdout == ""


def test_the_second_box_copied_from_the_first_without_asking_the_hub(host):
    name = host.check_output("hostname")
    TIMINGS.parent.mkdir(parents=True, exist_ok=True)
    timings = json.loads(TIMINGS.read_text()) if TIMINGS.exists() else {}
    timings[f"{name}_download_seconds"] = fetch_unit_seconds(host)
    TIMINGS.write_text(json.dumps(timings, indent=1))
    log = json.loads(host.check_output(f"curl -fsS {HUB}/_standin/requests"))
    # The box's address on the scenario's network, as the hub sees it: `hostname -I` lists the
    # box's own docker0 (172.17.0.1) first once its engine runs.
    address = host.check_output(f"getent ahostsv4 {name}").split()[0]
    hub_requests = [r for r in log if r["client"] == address and not r["host"].startswith("pypi.")]
    if name == SEED:
        assert manifest(host)["copied_from"] is None
        assert hub_requests, "the seed downloads from the hub"
    else:
        seed = host.check_output(f"getent ahostsv4 {SEED}").split()[0]
        assert seed in (manifest(host)["copied_from"] or "")
        assert hub_requests == []


def test_the_lan_copy_left_no_server_and_no_firewall_rule(host):
    assert host.check_output("systemctl show -p ActiveState --value sparkfleet-model-seed.service") == "inactive"
    assert "sparkfleet.serving.model" not in host.check_output("ufw show added")
