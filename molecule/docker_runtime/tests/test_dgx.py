"""dk-dgx: a DGX OS-like box (toolkit installed, runtime not registered, foreign keys)."""

from __future__ import annotations

import json

from spark_testinfra import recap_changed

testinfra_hosts = ["dk-dgx"]

DAEMON_JSON = "/etc/docker/daemon.json"
MIRRORS = ["https://mirror.sparkfleet.test", "http://10.11.12.13:5000"]
NVIDIA = {"args": [], "path": "nvidia-container-runtime"}
IMAGE = "sparkfleet-sim/busybox:latest"


def daemon_json(host) -> dict:
    return json.loads(host.file(DAEMON_JSON).content_string)


def docker_info(host) -> dict:
    return json.loads(host.check_output("docker info --format '{{json .}}'"))


def test_daemon_json_holds_the_managed_keys(host):
    config = daemon_json(host)
    assert config["registry-mirrors"] == MIRRORS
    assert config["live-restore"] is True
    assert config["log-opts"]["max-size"] == "20m"
    assert config["log-opts"]["max-file"] == "4"
    assert config["runtimes"]["nvidia"] == NVIDIA


def test_foreign_keys_survive(host):
    config = daemon_json(host)
    assert config["data-root"] == "/var/lib/docker"
    assert config["log-driver"] == "json-file"
    assert config["log-opts"]["labels"] == "com.sparkfleet.app"
    assert config["log-opts"]["env"] == "SPARKFLEET_ROLE"
    assert config["runtimes"]["sim-runc"] == {"path": "runc"}
    assert "default-runtime" not in config


def test_the_seeded_file_was_backed_up(host):
    # Backups are named daemon.json.<pid>.<time>~; each write of the roles made one.
    backups = host.check_output(f"ls -1 {DAEMON_JSON}.*~").split()
    contents = [json.loads(host.file(path).content_string) for path in backups]
    seeded = {
        "data-root": "/var/lib/docker",
        "log-driver": "json-file",
        "log-opts": {"labels": "com.sparkfleet.app", "env": "SPARKFLEET_ROLE"},
        "runtimes": {"sim-runc": {"path": "runc"}},
    }
    assert seeded in contents, f"no backup of the seeded daemon.json among {backups}"


def test_docker_runs_with_mirrors_runtime_and_live_restore(host):
    info = docker_info(host)
    assert info["RegistryConfig"]["Mirrors"] == [m + "/" for m in MIRRORS]
    assert "nvidia" in info["Runtimes"]
    assert "sim-runc" in info["Runtimes"]
    assert info["LiveRestoreEnabled"] is True
    assert info["DefaultRuntime"] == "runc"


def test_container_runs_with_the_nvidia_runtime(host):
    name = "dk-verify-nvidia"
    host.run(f"docker rm -f {name}")
    out = host.check_output(f"docker run --name {name} --runtime nvidia {IMAGE} echo via-nvidia-runtime")
    runtime = host.check_output(f"docker inspect --format '{{{{.HostConfig.Runtime}}}}' {name}")
    host.run(f"docker rm -f {name}")
    assert out == "via-nvidia-runtime"
    assert runtime == "nvidia"


def test_gpus_all_reaches_the_hook(host):
    # dockerd runs nvidia-container-runtime-hook for --gpus; the stand-in passes on a box
    # whose driver is loaded (gb10 profile), as the real one does on a Spark.
    assert host.check_output(f"docker run --rm --runtime nvidia --gpus all {IMAGE} echo gpus") == "gpus"


def test_entry_is_exactly_what_nvidia_ctk_writes(host):
    # nvidia-ctk runtime configure on a copy changes nothing: the two owners agree.
    host.check_output(f"cp {DAEMON_JSON} /tmp/dk-ctk.json")
    host.check_output("nvidia-ctk runtime configure --runtime=docker --config=/tmp/dk-ctk.json")
    after = json.loads(host.file("/tmp/dk-ctk.json").content_string)
    host.run("rm -f /tmp/dk-ctk.json")
    assert after == daemon_json(host)


def test_installed_toolkit_was_left_alone(host):
    assert host.package("nvidia-container-toolkit").version == "1.17.8-1"
    assert not host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.list").exists


def test_cdi_spec_was_generated(host):
    spec = host.file("/etc/cdi/nvidia.yaml")
    assert spec.exists and spec.mode == 0o644
    assert "kind: nvidia.com/gpu" in spec.content_string
    devices = host.check_output("nvidia-ctk cdi list 2>/dev/null").split()
    assert devices == ["nvidia.com/gpu=0", "nvidia.com/gpu=all"]


# --- runs of the roles with other input (each restores what it changed) ------------


def started_at(host, name: str) -> str:
    return host.check_output(f"docker inspect --format '{{{{.State.StartedAt}}}} {{{{.State.Running}}}}' {name}")


def test_a_rerun_makes_no_merge_call_and_changes_nothing(host, converge):
    # Both roles' probes copy what the merge module reads; when daemon.json holds their keys and
    # no flag of the unit conflicts, the module call is left out (test_flag_in_a_drop_in_... below:
    # a conflict still runs it and fails).
    before = host.file(DAEMON_JSON).content
    result = converge("dk-dgx")
    assert result.returncode == 0, result.stdout[-3000:]
    assert recap_changed(result.stdout) == 0
    merges = [part for part in result.stdout.split("TASK [")
              if part.startswith("sparkfleet.serving.common : Merge the keys into daemon.json]")]
    assert len(merges) == 2, "expected the docker and the nvidia_runtime merges"
    assert all("skipping: [dk-dgx]" in part for part in merges), "a merge module call on a re-run that changes nothing"
    assert host.file(DAEMON_JSON).content == before


def test_mirror_change_reloads_and_running_containers_keep_going(host, converge):
    name = "dk-verify-long-running"
    host.run(f"docker rm -f {name}")
    host.check_output(f"docker run -d --name {name} {IMAGE} sleep 600")
    before = started_at(host, name)
    dockerd_pid = host.check_output("systemctl show --property MainPID --value docker")
    new_mirrors = ["https://other-mirror.sparkfleet.test"]
    try:
        result = converge("dk-dgx", {"docker_registry_mirrors": new_mirrors})
        assert result.returncode == 0, result.stdout[-3000:]
        assert "Docker will reload for: registry-mirrors (validation: skipped: dockerd 20.10.24" in result.stdout
        assert "has no --validate" in result.stdout
        assert "RUNNING HANDLER [sparkfleet.serving.common : Reload Docker]" in result.stdout
        assert "Restart Docker" not in result.stdout.split("PLAY RECAP")[0].split("Schedule a Docker reload")[1]
        assert docker_info(host)["RegistryConfig"]["Mirrors"] == ["https://other-mirror.sparkfleet.test/"]
        assert started_at(host, name) == before
        assert before.endswith(" true")
        assert host.check_output("systemctl show --property MainPID --value docker") == dockerd_pid
    finally:
        restored = converge("dk-dgx")
        host.run(f"docker rm -f {name}")
    assert restored.returncode == 0, restored.stdout[-3000:]
    assert daemon_json(host)["registry-mirrors"] == MIRRORS


def test_malformed_daemon_json_fails_and_is_left_byte_for_byte(host, converge):
    good = host.file(DAEMON_JSON).content
    count_backups = f"ls -1 {DAEMON_JSON}.*~ | wc -l"
    backups_before = host.check_output(count_backups)
    host.check_output(f"cp {DAEMON_JSON} /tmp/dk-good.json")
    host.check_output(f'sed -i \'s/"live-restore": true/"live-restore": true,,/\' {DAEMON_JSON}')
    try:
        broken = host.file(DAEMON_JSON).content
        result = converge("dk-dgx")
        after = host.file(DAEMON_JSON).content
        backups_after = host.check_output(count_backups)
    finally:
        host.check_output(f"cp /tmp/dk-good.json {DAEMON_JSON} && rm -f /tmp/dk-good.json")
    assert broken == good.replace(b'"live-restore": true', b'"live-restore": true,,')
    assert result.returncode != 0
    expected = f"{DAEMON_JSON} is not valid JSON: Expecting property name enclosed in double quotes at line"
    assert expected in result.output
    # It fails in the role's preflight, before anything is installed or changed.
    assert "Read the current daemon.json" in result.stdout.split("fatal:")[0].rsplit("TASK [", 1)[1]
    assert after == broken
    assert backups_after == backups_before
    assert host.file(DAEMON_JSON).content == good


def test_flag_in_a_drop_in_is_reported_as_a_conflict(host, converge):
    # A DGX-style drop-in that sets the mirror as a flag while daemon.json has mirrors too.
    flag = "--registry-mirror=https://flag-mirror.sparkfleet.test"
    dropin = "/etc/systemd/system/docker.service.d/zz-dk-verify.conf"
    good = host.file(DAEMON_JSON).content
    host.check_output(f"mkdir -p {dropin.rsplit('/', 1)[0]}")
    host.check_output(f"printf '[Service]\\nExecStart=\\nExecStart=/usr/sbin/dockerd -H fd:// {flag}\\n' > {dropin}")
    try:
        result = converge("dk-dgx")
    finally:
        host.check_output(f"rm -f {dropin}")
    assert result.returncode != 0
    expected = "'registry-mirrors' is set in daemon.json and as the dockerd flag --registry-mirror"
    assert expected in result.output
    assert host.file(DAEMON_JSON).content == good
