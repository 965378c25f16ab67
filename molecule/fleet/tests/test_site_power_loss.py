"""Power loss and a Docker engine restart on the fleet's boxes, with no Ansible run in between.

Molecule runs the test files in sorted order: this one last, on the boxes the others left serving. The tests
run in this order and share the boxes.

1. fleet-2's Docker engine alone stops and starts again: with `live-restore` (the docker role's
   daemon.json) the vLLM container keeps its process and answers before, while the engine is down, and after.
2. fleet-2 loses power (every process of the box killed at once, then the box started: systemd boots again):
   Docker comes up, the vLLM container comes back by itself (unless-stopped) and answers a real chat
   completion; ufw had loaded its rules before Docker started (the firewall role orders docker.service after
   ufw.service) and its DOCKER-USER block is in force when the API first answers; the memory watchdog runs
   with its configuration; the weights are the bytes the manifest lists.
3. fleet-3's memory watchdog stops its container, then fleet-3 reboots (`docker restart`: a clean shutdown):
   the container stays stopped (Docker recorded a manual stop), the watchdog's record survives (its
   StateDirectory, under /var/lib) and playbooks/status.yml says why; an operator's `docker start` brings it
   back and the watchdog clears the record.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import testinfra
import yaml
from spark_testinfra import eventually, inspect_container, run_playbook, watchdog_stops
from test_converged import API, KEY, MODEL_DIR, SERVED

# The scenario's boxes (molecule.yml): fleet-3's watchdog reads a meminfo file the tests rewrite. fleet-1,
# the gateway, the cache and Prometheus, is left alone: the boxes' own recovery is what is tested here.
SERVING, WATCHED = "fleet-2", "fleet-3"
INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PROJECT = Path(__file__).resolve().parents[3]
WATCHDOG_UNIT = "sparkfleet-watchdog.service"
WATCHDOG_CONFIG = "/etc/sparkfleet/watchdog.json"
STOP_RECORD = "/var/lib/sparkfleet-watchdog/stopped/vllm.json"
# The firewall role's managed block of /etc/ufw/after.rules.
UFW_BLOCK = ("# BEGIN sparkfleet.serving.firewall DOCKER-USER", "# END sparkfleet.serving.firewall DOCKER-USER")
# Liveness bounds, not timings: a box's boot, its engine and the stand-in's own start on a loaded machine.
BOOT_SECONDS = 180


def box(name: str):
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}")


def chat(host, text: str) -> str | None:
    """A real chat completion through the box's API, over loopback (the firewall lets no other source in here);
    the reply's text, or None when the API does not answer."""
    body = json.dumps({"model": SERVED, "messages": [{"role": "user", "content": text}]})
    done = host.run(f"curl -fsS --max-time 10 -H 'Authorization: Bearer {KEY}' -H 'Content-Type: application/json'"
                    f" -d {shlex.quote(body)} {API}/v1/chat/completions")
    return json.loads(done.stdout)["choices"][0]["message"]["content"] if done.rc == 0 else None


def answers(host, text: str) -> bool:
    return (chat(host, text) or "").endswith(text)


def restart_box(name: str, *, power_cut: bool) -> None:
    """A power cut kills every process of the box at once (SIGKILL: no shutdown at all), then starts it;
    otherwise `docker restart` shuts it down cleanly (the image's STOPSIGNAL SIGRTMIN+3 is systemd's halt)."""
    steps = [["docker", "kill", name], ["docker", "start", name]] if power_cut else [["docker", "restart", name]]
    for step in steps:
        subprocess.run(step, check=True, capture_output=True, text=True)


def booted(host) -> bool:
    """systemd in the box has started its units (degraded: one a container cannot run failed) and the Docker
    engine has finished its start (Type=notify: active once it has restored its containers)."""
    state = host.run("systemctl is-system-running").stdout.strip()
    return state in ("running", "degraded") and host.run("systemctl is-active docker.service").rc == 0


def wait_for_boot(host) -> None:
    assert eventually(lambda: booted(host), BOOT_SECONDS), host.run("systemctl --failed --no-pager").stdout


def wanted_docker_user_rules(host) -> list[str]:
    """The DOCKER-USER rules of the firewall role's block in /etc/ufw/after.rules, in their order."""
    text = host.file("/etc/ufw/after.rules").content_string
    block = text.split(UFW_BLOCK[0], 1)[1].split(UFW_BLOCK[1], 1)[0]
    return [line.strip() for line in block.splitlines() if line.startswith("-A DOCKER-USER")]


def firewall_now(host) -> tuple[str, list[str]]:
    """ufw's state and the DOCKER-USER chain as the kernel holds them."""
    status = host.run("ufw status").stdout.splitlines()
    chain = host.run("iptables -S DOCKER-USER").stdout.splitlines()
    return (status[0] if status else "", [rule for rule in chain if rule.startswith("-A ")])


def monotonic_us(host, unit: str, prop: str) -> int:
    return int(host.check_output(f"systemctl show -P {prop}TimestampMonotonic {unit}"))


def realtime(host, unit: str, prop: str) -> datetime:
    stamp = host.check_output(f"systemctl show -P {prop}Timestamp --timestamp=us+utc {unit}")
    return datetime.strptime(stamp, "%a %Y-%m-%d %H:%M:%S.%f UTC").replace(tzinfo=timezone.utc)


def started_at(info: dict) -> datetime:
    """Docker's State.StartedAt (RFC 3339, nanoseconds) to the microsecond."""
    day, fraction = info["State"]["StartedAt"].rstrip("Z").split(".")
    return datetime.fromisoformat(f"{day}.{fraction[:6]}+00:00")


def weights_on_disk(host) -> dict[str, tuple[int, str]]:
    """Size and sha256 of each file the model role's manifest lists, read from the disk now."""
    manifest = json.loads(host.file(f"{MODEL_DIR}/sparkfleet-manifest.json").content_string)
    paths = " ".join(shlex.quote(f"{MODEL_DIR}/{entry['path']}") for entry in manifest["files"])
    sums = dict(line.split("  ", 1)[::-1] for line in host.check_output(f"sha256sum {paths}").splitlines())
    sizes = dict(line.split(" ", 1)[::-1] for line in host.check_output(f"stat -c '%s %n' {paths}").splitlines())
    return {entry["path"]: (int(sizes[f"{MODEL_DIR}/{entry['path']}"]), sums[f"{MODEL_DIR}/{entry['path']}"])
            for entry in manifest["files"]}


def weights_listed(host) -> dict[str, tuple[int, str]]:
    manifest = json.loads(host.file(f"{MODEL_DIR}/sparkfleet-manifest.json").content_string)
    return {entry["path"]: (entry["size"], entry["sha256"]) for entry in manifest["files"]}


def configured_thresholds() -> dict:
    """The watchdog's settings for vllm as the scenario configures them (the role's defaults)."""
    defaults = yaml.safe_load((PROJECT / "roles/watchdog/defaults/main.yml").read_text(encoding="utf-8"))
    return {"name": "vllm", "startup_threshold": defaults["watchdog_startup_threshold"],
            "steady_threshold": defaults["watchdog_steady_threshold"], "ceiling": defaults["watchdog_hard_ceiling"],
            "grace_s": defaults["watchdog_grace_seconds"]}


def test_the_engine_restarts_alone_and_the_container_serves_throughout():
    spark = box(SERVING)
    before = inspect_container(spark)["State"]
    assert answers(spark, "before the engine stops")
    # A restart in two steps, to ask the API while the engine is verifiably down. docker.socket too: anything
    # asking the socket (the watchdog does) would start the engine again at once.
    spark.check_output("systemctl stop docker.socket docker.service")
    try:
        assert spark.run("docker info").rc != 0, "the engine still answers"
        assert spark.run(f"kill -0 {before['Pid']}").rc == 0, "the container's process went down with the engine"
        assert answers(spark, "while the engine is down")
    finally:
        spark.check_output("systemctl start docker.socket docker.service")
    assert answers(spark, "after the engine started again")
    spark.check_output("systemctl restart docker.service")
    after = inspect_container(spark)["State"]
    assert (after["Running"], after["Pid"], after["StartedAt"]) == (True, before["Pid"], before["StartedAt"])
    assert answers(spark, "after the engine restarted")


def test_after_a_power_cut_the_box_serves_again_by_itself():
    spark = box(SERVING)
    listed = weights_listed(spark)
    config = spark.file(WATCHDOG_CONFIG).content_string
    before = inspect_container(spark)
    restart_box(SERVING, power_cut=True)
    wait_for_boot(spark)

    # The first completion that answers, with the firewall as the kernel held it just before and just after.
    def first_answer() -> tuple[tuple, tuple] | None:
        rules = firewall_now(spark)
        return (rules, firewall_now(spark)) if answers(spark, "after the power cut") else None

    found = eventually(first_answer, BOOT_SECONDS)
    assert found, spark.run("docker ps -a; journalctl -b -u docker.service --no-pager | tail -20").stdout
    wanted = wanted_docker_user_rules(spark)
    assert wanted
    for status, chain in found:
        assert status == "Status: active"
        assert chain[:len(wanted)] == wanted, chain

    # Docker started the same container again by itself, after ufw had loaded its rules at boot.
    info = inspect_container(spark)
    assert info["Id"] == before["Id"] and info["State"]["Running"]
    assert info["State"]["StartedAt"] != before["State"]["StartedAt"]
    assert info["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    # systemd's order (the firewall role's drop-in of docker.service), and this boot's own timeline.
    assert spark.check_output("systemctl is-enabled ufw.service") == "enabled"
    assert "ufw.service" in spark.check_output("systemctl show -P After docker.service").split()
    ufw_loaded = monotonic_us(spark, "ufw.service", "ActiveEnter")
    assert 0 < ufw_loaded <= monotonic_us(spark, "docker.service", "InactiveExit")
    assert realtime(spark, "ufw.service", "ActiveEnter") <= started_at(info)

    # The watchdog runs this boot with the configuration it had.
    assert spark.check_output(f"systemctl is-active {WATCHDOG_UNIT}") == "active"
    assert f"--config {WATCHDOG_CONFIG}" in spark.check_output(f"systemctl show -P ExecStart {WATCHDOG_UNIT}")
    assert spark.file(WATCHDOG_CONFIG).content_string == config
    assert json.loads(config)["containers"] == [configured_thresholds()]

    # The weights are the bytes the manifest lists.
    assert weights_on_disk(spark) == listed


def test_a_container_the_watchdog_stopped_stays_stopped_across_a_reboot(tmp_path: Path):
    spark = box(WATCHED)
    # Over the hard ceiling (98 %): the watchdog stops the container at once and records why.
    assert watchdog_stops(spark, STOP_RECORD), "the watchdog recorded no stop"
    assert eventually(lambda: not inspect_container(spark)["State"]["Running"], 15)
    record = spark.file(STOP_RECORD).content_string
    before = inspect_container(spark)["State"]

    restart_box(WATCHED, power_cut=False)
    wait_for_boot(spark)
    assert eventually(lambda: spark.run(f"systemctl is-active {WATCHDOG_UNIT}").rc == 0, 30)
    # Docker restored its containers before it said it was ready (booted()): this one it was told to leave.
    state = inspect_container(spark)["State"]
    assert (state["Running"], state["Restarting"], state["StartedAt"]) == (False, False, before["StartedAt"])
    assert spark.file(STOP_RECORD).content_string == record

    report = tmp_path / "status.json"
    status = run_playbook(PROJECT / "playbooks" / "status.yml",
                          {"status_hosts": WATCHED, "status_json_path": str(report)})
    assert status.returncode == 0, status.stdout[-4000:]
    [row] = json.loads(report.read_text(encoding="utf-8"))["hosts"]
    stopped_at = json.loads(record)["stopped_at"]
    assert row["health"].startswith(f"down (stopped by the watchdog at {stopped_at}, "), row["health"]

    # What the operator does once the memory is back: start it. The watchdog clears its record.
    spark.check_output("docker start vllm")
    assert eventually(lambda: not spark.file(STOP_RECORD).exists, 15), "the stop stayed on record after a start"
    assert eventually(lambda: answers(spark, "after the watchdog's stop"), BOOT_SECONDS)
