"""Verify the whole box after site.yml: every role's state on one simulated Spark."""

from __future__ import annotations

import json

KEY = "sk-molecule-site-test"
SERVED = "qwen3.5-35b"


def daemon_json(host) -> dict:
    return json.loads(host.file("/etc/docker/daemon.json").content_string)


def test_daemon_json_holds_mirrors_live_restore_and_the_nvidia_runtime(host):
    config = daemon_json(host)
    assert config["registry-mirrors"] == ["https://mirror.sparkfleet.test"]
    assert config["live-restore"] is True
    assert config["runtimes"]["nvidia"] == {"path": "nvidia-container-runtime", "args": []}


def test_docker_engine_applies_the_configuration(host):
    info = json.loads(host.check_output("docker info --format '{{json .}}'"))
    assert "nvidia" in info["Runtimes"]
    assert info["RegistryConfig"]["Mirrors"] == ["https://mirror.sparkfleet.test/"]
    assert info["LiveRestoreEnabled"] is True


def test_watchdog_is_active_and_watches_vllm(host):
    service = host.service("sparkfleet-watchdog")
    assert service.is_running
    assert service.is_enabled
    config = json.loads(host.file("/etc/sparkfleet/watchdog.json").content_string)
    assert [c["name"] for c in config["containers"]] == ["vllm"]


def test_vllm_serves_the_profile_model_with_the_key(host):
    models = host.run(f"curl -fsS -H 'Authorization: Bearer {KEY}' http://127.0.0.1:8000/v1/models")
    assert models.rc == 0, models.stderr
    assert [m["id"] for m in json.loads(models.stdout)["data"]] == [SERVED]
    refused = host.run("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/v1/models")
    assert refused.stdout == "401"


def test_vllm_runs_with_the_nvidia_runtime_and_the_fp8_eager_profile(host):
    info = json.loads(host.check_output("docker inspect vllm"))[0]
    assert info["State"]["Running"] is True
    assert info["HostConfig"]["Runtime"] == "nvidia"
    assert "--enforce-eager" in info["Args"]
    assert info["Args"][info["Args"].index("--gpu-memory-utilization") + 1] == "0.75"
