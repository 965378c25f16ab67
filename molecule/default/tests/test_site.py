"""Verify the whole box as site.yml left it: every role's result on one simulated Spark,
up to the vLLM API answering with the shipped profile."""

from __future__ import annotations

import json

from spark_testinfra import golden_vllm_argv, inspect_container

KEY = "sk-molecule-site-test"
SERVED = "qwen3.5-35b"
API = "http://127.0.0.1:8000"
MIRRORS = ["https://mirror.sparkfleet.test"]


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
    recorded = json.loads(host.file("/etc/sparkfleet/vllm/deployed.json").content_string)
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
