"""Verify the vLLM role on a simulated Spark: the real container, the real API (through
the official openai client), idempotence, recreation, and every known failure diagnosed.

The vLLM image is the stand-in (tests/testbed/vllm-standin): it parses vLLM's command
line and refuses unknown flags, so the argument list checked here is one vLLM accepts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import openai
import pytest
from spark_testinfra import golden_vllm_argv, inspect_container, recap_changed, run_playbook

SCENARIO = Path(__file__).resolve().parents[1]
SERVED = "qwen3.5-35b"
KEY = "sk-molecule-vllm-test"
BOX = "vl-spark-1"
MODEL_DIR = "/srv/models/Qwen3.5-35B-A3B-FP8"
EXPECTED_ARGS = golden_vllm_argv()


def inspect(host, name: str = "vllm") -> dict:
    return inspect_container(host, name)


def playbook(extra: dict | None = None) -> subprocess.CompletedProcess:
    return run_playbook(SCENARIO / "rerun.yml", extra)


@pytest.fixture(scope="module")
def base_url() -> str:
    ip = subprocess.check_output(
        ["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", BOX], text=True).strip()
    return f"http://{ip}:8000/v1"


# --- the container as converged --------------------------------------------------------------

def test_container_runs_with_exactly_the_expected_arguments(host):
    info = inspect(host)
    assert info["State"]["Status"] == "running"
    assert [info["Path"], *info["Args"]] == ["vllm", *EXPECTED_ARGS]


def test_container_options_are_the_safe_ones(host):
    hc = inspect(host)["HostConfig"]
    assert hc["NetworkMode"] == "host"
    assert hc["Runtime"] == "nvidia"
    assert hc["Privileged"] is False
    assert not any("unconfined" in opt for opt in hc.get("SecurityOpt") or [])
    assert hc["ShmSize"] == 16 * 1024**3
    assert hc["RestartPolicy"]["Name"] == "unless-stopped"
    mounts = inspect(host)["Mounts"]
    assert [(m["Source"], m["Destination"], m["RW"]) for m in mounts] == [(MODEL_DIR, "/model", False)]
    assert inspect(host)["Config"]["StopTimeout"] == 120


def test_environment_has_the_profile_and_the_key(host):
    env = dict(e.split("=", 1) for e in inspect(host)["Config"]["Env"])
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert env["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    assert env["VLLM_API_KEY"] == KEY


def test_the_model_mount_is_read_only_for_real(host):
    result = host.run("docker exec vllm sh -c 'touch /model/x'")
    assert result.rc != 0
    assert "Read-only file system" in result.stderr


def test_deployed_image_is_recorded(host):
    recorded = json.loads(host.file("/var/lib/sparkfleet/vllm/last-run.json").content_string)
    image = json.loads(host.check_output("docker image inspect sparkfleet-sim/vllm-openai:v0.34.0"))[0]
    assert recorded["image_id"] == image["Id"] == inspect(host)["Image"]
    assert recorded["argv"] == EXPECTED_ARGS[1:]
    assert recorded["image"] == inspect(host)["Config"]["Image"] == "sparkfleet-sim/vllm-openai:v0.34.0"


def known_good(host) -> dict:
    return json.loads(host.file("/var/lib/sparkfleet/vllm/known-good.json").content_string)


def test_the_record_keeps_how_the_deployment_started(host):
    # The gate watched the converge's start: the stand-in of vLLM 0.34.0 loads its weights for
    # VLLM_STANDIN_STARTUP_SECONDS (12) and runs FlashInfer's autotune, which that release logs, for
    # VLLM_STANDIN_AUTOTUNE_SECONDS (8).
    startup = known_good(host)["startup"]
    assert startup["container_started_at"] == inspect(host)["State"]["StartedAt"]
    assert 20 <= startup["time_to_ready_s"] < 120
    assert 0 < startup["ttft_s"] < 5, startup
    assert startup["vllm_version"] == "0.34.0"
    phases = startup["phases_s"]
    assert phases["weights"] >= 11 and phases["autotune"] >= 7.5, phases
    assert sum(phases.values()) == pytest.approx(startup["time_to_ready_s"], abs=2.5)


def test_api_listens_on_the_box(host):
    assert host.socket("tcp://0.0.0.0:8000").is_listening


# --- the API through the official client --------------------------------------------------

def test_openai_client_chat_completion(base_url: str):
    client = openai.OpenAI(base_url=base_url, api_key=KEY)
    reply = client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": "hello spark"}])
    assert reply.model == SERVED
    assert reply.choices[0].message.content.endswith("hello spark")
    assert [m.id for m in client.models.list()] == [SERVED]


def test_openai_client_streamed_completion(base_url: str):
    client = openai.OpenAI(base_url=base_url, api_key=KEY)
    stream = client.chat.completions.create(model=SERVED, stream=True,
                                            messages=[{"role": "user", "content": "stream please"}])
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert len(pieces) > 3
    assert "".join(pieces).endswith("stream please")


def test_openai_client_tool_call(base_url: str):
    client = openai.OpenAI(base_url=base_url, api_key=KEY)
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
    reply = client.chat.completions.create(model=SERVED, tools=tools, tool_choice="auto",
                                           messages=[{"role": "user", "content": "time?"}])
    assert reply.choices[0].message.tool_calls[0].function.name == "get_time"


def test_request_without_or_with_a_wrong_key_is_refused(base_url: str):
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=base_url, api_key="wrong").models.list()
    status = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", base_url + "/models"],
                            capture_output=True, text=True, check=False).stdout
    assert status == "401"


def test_wrong_model_name_is_404(base_url: str):
    client = openai.OpenAI(base_url=base_url, api_key=KEY)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="Qwen/Qwen3.5-35B-A3B-FP8", messages=[{"role": "user", "content": "x"}])


# --- re-runs ---------------------------------------------------------------------------------

def test_rerun_changes_nothing_and_keeps_the_container(host):
    before = inspect(host)
    result = playbook()
    assert result.returncode == 0, result.stdout[-3000:]
    assert recap_changed(result.stdout) == 0
    after = inspect(host)
    assert after["Id"] == before["Id"]
    assert after["State"]["StartedAt"] == before["State"]["StartedAt"]


def test_a_container_changed_by_hand_is_put_back(host):
    # A re-run compares the probe's `docker container inspect` with what the role sets and leaves
    # docker_container's check-mode pass out when nothing differs: a change made by hand must
    # still be found, and the module then puts it right.
    # A restart policy changed by hand (then the box would not serve again after a power cut): put
    # back in place, the container kept (docker_container's check-mode pass alone misses it).
    before = inspect(host)
    host.run_expect([0], "docker update --restart no vllm")
    result = playbook()
    assert result.returncode == 0, result.stdout[-3000:]
    assert recap_changed(result.stdout) >= 1, "the run did not notice the restart policy changed by hand"
    after = inspect(host)
    assert after["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert after["Id"] == before["Id"]
    assert after["State"]["StartedAt"] == before["State"]["StartedAt"]
    # And the comparison finds the container as the run left it the same again.
    again = playbook()
    assert again.returncode == 0, again.stdout[-3000:]
    assert recap_changed(again.stdout) == 0
    planned = [part for part in again.stdout.split("TASK [")
               if part.startswith("sparkfleet.serving.vllm : Find out whether the vLLM container must be (re)created]")]
    assert planned, "the run had no check-mode pass task"
    assert all(f"skipping: [{BOX}]" in part for part in planned), \
        "a re-run that changes nothing still made docker_container's check-mode pass"


def test_changed_setting_recreates_the_container(host):
    before = inspect(host)
    result = playbook({"vllm_max_num_seqs": 8})
    assert result.returncode == 0, result.stdout[-3000:]
    after = inspect(host)
    assert after["Id"] != before["Id"]
    assert after["Args"][after["Args"].index("--max-num-seqs") + 1] == "8"
    ready = float(host.check_output("docker exec vllm cat /tmp/vllm-standin-ready"))
    noticed = float(re.search(r"VLLM_HEALTHY_AT=([0-9.]+)", result.stdout).group(1))
    delay = noticed - ready
    print(f"health gate noticed /health {delay:.3f} s after the stand-in became ready")
    (SCENARIO / ".health-delay").write_text(f"{delay:.3f}\n")
    # The figure is reported, not asserted (timing belongs to benchmarks). What is asserted:
    # the moment comes from the new container, which the gate asked (its access log shows
    # the answered /health) and not from the old one, which answered until it was removed.
    logs = host.check_output("docker logs vllm 2>&1")
    assert '"GET /health HTTP/1.1" 200' in logs, "the health gate never asked the new container"
    assert noticed >= ready, f"healthy_at {noticed:.3f} is before the new container was ready ({ready:.3f})"
    # The gate's progress named the phase from the new container's log, counted from its start...
    assert re.search(rf"vllm_health: {BOX}: vllm: loading weights for \d+ s \(\d+ s since the container started; "
                     r"budget 2 min, ", result.stdout), result.stdout[-3000:]
    assert f"vllm_health: {BOX}: vllm: autotuning kernels for " in result.stdout, result.stdout[-3000:]
    # ...and the new deployment's record has this start's figures.
    assert known_good(host)["startup"]["container_started_at"] == after["State"]["StartedAt"]


# --- failures: each one makes the role fail with its diagnosis --------------------------------
# failures.yml runs every case in one ansible-playbook run (one play per case, input as the
# play's vars) and records how the role ended; the tests judge the records.

FAILURES = [
    ("oom", "CUDA out of memory", "vllm_enforce_eager"),
    ("mamba", "Mamba cache block_size larger than max_num_batched_tokens", "vllm_kv_cache_dtype"),
    ("architecture", "does not support the model architecture", "vllm_image"),
    ("nvfp4", "cudaErrorIllegalInstruction", "vllm_model_dir"),
    ("kv-cache", "max_model_len larger than the KV cache can hold", "vllm_max_model_len"),
    ("shm", "Shared memory (/dev/shm) too small", "vllm_shm_size"),
    ("port", "The API port is already in use", "vllm_port"),
    ("files", "Model files missing", "vllm_model_dir"),
]


def load_release_images() -> None:
    """Every supported release's stand-in image (tests/testbed/vllm-standin/build.sh) into the box's own engine:
    the cases of a failure one release alone has run on that release's image. The layers are shared: a load of
    an image the box has costs little."""
    for tag in ("v0.34.0", "v0.19.1-cu130"):
        load = f"set -o pipefail; docker save sparkfleet-sim/vllm-openai:{tag} | docker exec -i {BOX} docker load"
        subprocess.run(load, shell=True, check=True, executable="/bin/bash", capture_output=True)


def run_cases(playbook: str, name: str) -> tuple[subprocess.CompletedProcess, Path]:
    records = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / name
    shutil.rmtree(records, ignore_errors=True)
    records.mkdir(parents=True)
    result = run_playbook(SCENARIO / playbook, {"failures_records": str(records)})
    return result, records


def record(records: Path, case: str) -> dict:
    path = records / f"{case}.json"
    assert path.exists(), f"{case}: the case did not run (no {path.name})"
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def failure_records(host) -> Path:
    load_release_images()
    host.run_expect([0], "mkdir -p /srv/models/nvfp4 /srv/models/broken")
    host.run_expect([0], f"cp {MODEL_DIR}/* /srv/models/nvfp4/ && cp {MODEL_DIR}/* /srv/models/broken/")
    host.run_expect([0], "sed -i 's/\"fp8\"/\"modelopt_fp4\"/' /srv/models/nvfp4/config.json")
    # config.json present (so the preflight passes) but unreadable for vLLM's loader.
    host.run_expect([0], "echo model-files-missing > /srv/models/broken/.standin-fail")
    try:
        result, records = run_cases("failures.yml", "vllm-failures")
    finally:
        host.run("rm -rf /srv/models/nvfp4 /srv/models/broken")
    # Every failure was rescued to be recorded: the run itself must have succeeded.
    assert result.returncode == 0, result.output[-3000:]
    return records


@pytest.mark.parametrize("case", FAILURES, ids=[f[0] for f in FAILURES])
def test_injected_failure_fails_the_role_with_its_diagnosis(failure_records: Path, case: tuple):
    name, title, variable = case
    got = record(failure_records, name)
    assert got["failed"], f"{name}: the role did not fail"
    msg = got["msg"]
    assert msg.startswith("vLLM did not become ready"), msg[-3000:]
    assert title in msg, msg[-3000:]
    assert variable in msg
    assert "Last " in msg and "log lines" in msg
    print(f"{name}: the health gate failed with its diagnosis after {got['elapsed']} s")
    with (SCENARIO / ".failure-times").open("a", encoding="utf-8") as handle:
        handle.write(f"{name} {got['elapsed']}\n")


# --- refusals: the role stops before the container changes ---------------------------------

REFUSED = [
    ("mamba", "serving plan", "In Mamba cache align mode, block_size (2096) must be <= max_num_batched_tokens"),
    ("kv-cache", "serving plan", "max_model_len"),
    ("utilization", "serving plan", "gpu_memory_utilization 0.97"),
    ("shm", "serving plan", "shm_size 64m"),
    ("weights", "weights", "/srv/models/does-not-exist/config.json does not exist"),
]


@pytest.fixture(scope="module")
def refusal_records(host) -> tuple[dict, dict, Path]:
    # A failure case before these may have left vLLM crash-looping under its restart
    # policy; stopped, its StartedAt can only change if the role touches it.
    host.run("docker stop vllm")
    before = inspect(host)
    result, records = run_cases("refusals.yml", "vllm-refusals")
    assert result.returncode == 0, result.output[-3000:]
    return before, inspect(host), records


def test_refusals_leave_the_container_untouched(refusal_records: tuple):
    before, after, _records = refusal_records
    assert (after["Id"], after["State"]["StartedAt"]) == (before["Id"], before["State"]["StartedAt"])


@pytest.mark.parametrize("case", REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_input_stops_the_role_with_its_reason(refusal_records: tuple, case: tuple):
    name, kind, message = case
    got = record(refusal_records[2], name)
    assert got["failed"], f"{name}: the role did not refuse the input"
    if kind == "serving plan":
        assert "serving plan for Qwen/Qwen3.5-35B-A3B-FP8 has" in got["msg"], got["msg"]
    assert message in got["msg"], got["msg"]
    assert "Wait until vLLM" not in got["task"]


def test_back_to_the_profile_serves_again(host):
    result = playbook()
    assert result.returncode == 0, result.stdout[-3000:]
    assert [inspect(host)["Path"], *inspect(host)["Args"]] == ["vllm", *EXPECTED_ARGS]


# --- an offline fleet: the image from an archive on the controller (vllm_image_archive) ------------

ARCHIVE = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "vllm-standin.tar"


def test_the_image_was_loaded_from_the_controllers_archive_and_checked_by_its_id(host):
    pinned = ARCHIVE.with_name(ARCHIVE.name + ".id").read_text().strip()
    assert inspect(host)["Image"] == pinned
    assert json.loads(host.check_output("docker image inspect sparkfleet-sim/vllm-openai:v0.34.0"))[0]["Id"] == pinned
    # The copy was removed once loaded.
    assert not host.file("/var/tmp/sparkfleet-vllm-image.tar").exists


def test_an_archive_without_the_image_pinned_is_refused_before_it_is_copied(host):
    other = "sha256:" + "0" * 64
    result = run_playbook(SCENARIO.parent / "resources" / "vllm-image.yml",
                          {"vllm_image": "sparkfleet-sim/vllm-openai:other", "vllm_image_id": other})
    assert result.returncode != 0
    # A failed task's result goes to stderr (the scenarios' callback).
    output = result.output
    pinned = ARCHIVE.with_name(ARCHIVE.name + ".id").read_text().strip()
    assert (f"{ARCHIVE} on the controller holds {pinned} tagged sparkfleet-sim/vllm-openai:v0.34.0, not {other} "
            "tagged sparkfleet-sim/vllm-openai:other") in output
    assert "Nothing was copied." in output
    assert not host.file("/var/tmp/sparkfleet-vllm-image.tar").exists


# --- recipes: each shipped recipe served through the health gate ---------------------------------
# recipes.yml serves every recipe of the role (roles/vllm/recipes) in one ansible-playbook run, each
# on the stand-in of the newest vLLM release it names, and records the outcome and the container.

RECIPES_DIR = Path(__file__).resolve().parents[3] / "roles" / "vllm" / "recipes"
# Every recipe of one box, on the 128 GB box and, where it is sized for one, on the 64 GB box (name@64). The stand-in
# sizes its KV cache from the checkpoint's config.json (files/model-configs.yml) and the weights staged.
ONE_BOX = sorted(p.stem for p in RECIPES_DIR.glob("*.yml") if "boxes: 1," in p.read_text(encoding="utf-8"))
SIXTY_FOUR = [f"{name}@64" for name in ONE_BOX
              if re.search(r'^    "64":', (RECIPES_DIR / f"{name}.yml").read_text(encoding="utf-8"), re.MULTILINE)]
# A recipe sized for 128 GB only, on the 64 GB box: the serving plan refuses it.
TOO_BIG = "gpt-oss-120b@64"
RECIPES = sorted([*ONE_BOX, *SIXTY_FOUR])


@pytest.fixture(scope="module")
def recipe_records(host) -> Path:
    load_release_images()
    records = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "vllm-recipes"
    shutil.rmtree(records, ignore_errors=True)
    records.mkdir(parents=True)
    result = run_playbook(SCENARIO / "recipes.yml",
                          {"recipes_records": str(records), "recipes_names": sorted([*RECIPES, TOO_BIG])})
    assert result.returncode == 0, result.output[-3000:]
    return records


def test_every_one_box_recipe_and_a_64_gb_box_are_served() -> None:
    assert "qwen3.5-35b-a3b-fp8" in RECIPES and len(ONE_BOX) >= 7 and SIXTY_FOUR, RECIPES


@pytest.mark.parametrize("name", RECIPES)
def test_each_recipe_is_served_through_the_health_gate(recipe_records: Path, name: str) -> None:
    got = record(recipe_records, name)
    assert not got["failed"], f"{name}: {got.get('task')}: {got.get('msg')}"
    assert got["health"]["state"] == "ready", got["health"]
    recipe_text = (RECIPES_DIR / f"{name.split('@', maxsplit=1)[0]}.yml").read_text(encoding="utf-8")
    # The context of the box's sizing reached vLLM, which had room for it in its KV cache.
    box = name.split("@")[1] if "@" in name else "128"
    sizing = recipe_text.split(f'    "{box}":', 1)[1]
    context = re.search(r"max_model_len: (\d+)", sizing).group(1)
    assert got["args"][got["args"].index("--max-model-len") + 1] == context
    # The recipe's own arguments reached vLLM's command line (the stand-in parsed them with the
    # release's own parser table, or the container would have exited).
    for line in re.findall(r"^  - (--[a-z0-9-]+)$", recipe_text, flags=re.MULTILINE):
        assert line in got["args"], f"{name}: {line} not in {got['args']}"
    if "draft:" in recipe_text:
        spec = json.loads(got["args"][got["args"].index("--speculative-config") + 1])
        assert spec["model"] == "/draft"
        assert "/draft" in got["mounts"]
    else:
        assert "/draft" not in got["mounts"]


def test_a_recipe_that_does_not_fit_the_64_gb_box_is_refused_with_its_figures(recipe_records: Path) -> None:
    """gpt-oss-120b (61 GiB of weights, sized for 128 GB boxes) on the 64 GB box: the serving plan refuses it before
    the container changes, and says what takes what."""
    got = record(recipe_records, TOO_BIG)
    assert got["failed"], got
    assert "recipe gpt-oss-120b is sized for 128 GB boxes, not this 64 GB one" in got["msg"]
    assert "nothing is left for the KV cache" in got["msg"]
    figures = r"64 GB box, MemTotal 60\.8\d? GiB: vLLM's share [\d.]+ GiB = weights 61(\.0+)? GiB"
    assert re.search(figures, got["msg"]), got["msg"]
    # The container of the case before it (gpt-oss-120b-eagle3, on this box) is untouched.
    before = record(recipe_records, "gpt-oss-120b-eagle3")
    assert got["container_after"] == {"id": before["id"], "args": before["args"]}


# --- several models on one box (vllm_deployments) --------------------------------------------------
# deployments.yml serves the list a test passes. `vllm` keeps the scenario's container under the first deployment's
# name (a lower share); `chat2` serves the NVFP4 recipe beside it on port 8001, sized by its own serving plan.

VLLM_SMALL = {"name": "vllm", "port": 8000, "gpu_memory_utilization": 0.5, "max_model_len": 8192}
CHAT2 = {"name": "chat2", "port": 8001, "recipe": "qwen3.6-35b-a3b-nvfp4", "gpu_memory_utilization": 0.3,
         "max_model_len": 65536, "priority": 10}


def serve_deployments(tmp_path: Path, deployments: list[dict], check: bool = False) -> tuple:
    record = tmp_path / f"deployed-{len(list(tmp_path.iterdir()))}.json"
    extra = {"vllm_deployments": deployments, "deployments_record": str(record)}
    result = run_playbook(SCENARIO / "deployments.yml", extra, check=check)
    return result, (json.loads(record.read_text()) if record.exists() else None)


def box_ip() -> str:
    return subprocess.check_output(
        ["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", BOX], text=True).strip()


def served_models(port: int) -> list[str]:
    client = openai.OpenAI(base_url=f"http://{box_ip()}:{port}/v1", api_key=KEY)
    return [model.id for model in client.models.list().data]


def started(host, name: str) -> tuple[str, str]:
    state = inspect(host, name)
    return state["Id"], state["State"]["StartedAt"]


@pytest.fixture(scope="module")
def two_deployments(host, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("deployments")
    result, deployed = serve_deployments(tmp, [VLLM_SMALL, CHAT2])
    assert result.returncode == 0, result.stdout[-4000:]
    return {"tmp": tmp, "deployed": deployed, "output": result.stdout,
            "vllm": started(host, "vllm"), "chat2": started(host, "chat2")}


def test_two_deployments_each_answer_by_their_served_name(host, two_deployments: dict) -> None:
    deployed = {item["name"]: item for item in two_deployments["deployed"]}
    assert list(deployed) == ["vllm", "chat2"]
    assert deployed["chat2"]["port"] == 8001
    assert deployed["chat2"]["priority"] == 10
    assert deployed["chat2"]["health"]["state"] == "ready"
    assert served_models(8000) == [SERVED]
    assert served_models(8001) == [deployed["chat2"]["served_model_name"]] != [SERVED]
    client = openai.OpenAI(base_url=f"http://{box_ip()}:8001/v1", api_key=KEY)
    answer = client.chat.completions.create(model=deployed["chat2"]["served_model_name"], max_tokens=8,
                                            messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content
    # Each keeps its own state and known-good image; the box records both.
    assert host.file("/var/lib/sparkfleet/vllm-chat2/known-good.json").exists
    assert json.loads(host.file("/var/lib/sparkfleet/vllm-deployments.json").content_string)["deployments"][1][
        "name"] == "chat2"
    args = inspect(host, "chat2")["Args"]
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.3"


def test_the_admission_table_is_shown_and_one_load_follows_the_other(host, two_deployments: dict) -> None:
    output = two_deployments["output"]
    assert re.search(r"chat2 +\d+\.\d GiB share \(weights", output), output[-3000:]
    # chat2's container started only once vllm's health gate had seen it ready.
    vllm_ready = two_deployments["deployed"][0]["health"]["ready_at"]
    chat2_started = host.check_output("date -u -d \"$(docker inspect -f '{{.State.StartedAt}}' chat2)\" +%s.%N")
    assert float(chat2_started) > float(vllm_ready), (chat2_started, vllm_ready)


def test_a_deployment_that_does_not_fit_is_refused_with_the_table_and_nothing_changes(
        host, two_deployments: dict) -> None:
    third = {**CHAT2, "name": "chat3", "port": 8002}
    result, deployed = serve_deployments(two_deployments["tmp"], [VLLM_SMALL, CHAT2, third])
    assert result.returncode != 0
    assert deployed is None
    # Ansible prints a task's failure on stderr.
    assert "The 3 deployments of vl-spark-1 do not fit together" in result.stderr, result.stderr[-3000:]
    assert re.search(r"chat3 +\d+\.\d GiB share", result.stderr)
    assert recap_changed(result.stdout) == 0
    assert started(host, "vllm") == two_deployments["vllm"]
    assert started(host, "chat2") == two_deployments["chat2"]
    assert host.run("docker container inspect chat3").rc != 0


def test_a_change_to_one_deployment_recreates_only_its_container(host, two_deployments: dict) -> None:
    changed = {**CHAT2, "max_model_len": 32768}
    result, _record = serve_deployments(two_deployments["tmp"], [VLLM_SMALL, changed])
    assert result.returncode == 0, result.stdout[-4000:]
    assert started(host, "vllm") == two_deployments["vllm"]
    assert started(host, "chat2")[0] != two_deployments["chat2"][0]
    assert inspect(host, "chat2")["Args"][inspect(host, "chat2")["Args"].index("--max-model-len") + 1] == "32768"
    two_deployments["chat2"] = started(host, "chat2")


def test_a_rerun_of_two_deployments_changes_nothing(host, two_deployments: dict) -> None:
    changed = {**CHAT2, "max_model_len": 32768}
    result, _record = serve_deployments(two_deployments["tmp"], [VLLM_SMALL, changed])
    assert result.returncode == 0, result.stdout[-4000:]
    assert recap_changed(result.stdout) == 0, result.stdout[-4000:]
    assert started(host, "chat2") == two_deployments["chat2"]


def test_dropping_a_deployment_removes_it_and_closes_its_port(host, two_deployments: dict) -> None:
    result, deployed = serve_deployments(two_deployments["tmp"], [VLLM_SMALL])
    assert result.returncode == 0, result.stdout[-4000:]
    assert [item["name"] for item in deployed] == ["vllm"]
    assert host.run("docker container inspect chat2").rc != 0
    assert not host.file("/var/lib/sparkfleet/vllm-chat2").exists
    assert host.run("docker image inspect sparkfleet-known-good/chat2:deployment").rc != 0
    # Its weights stay (vllm_remove_dropped_weights is false).
    assert host.file("/srv/models/Qwen3.6-35B-A3B-NVFP4/config.json").exists
    assert started(host, "vllm") == two_deployments["vllm"]
    # Real TCP from outside the box: nothing answers on the dropped deployment's port any more.
    with pytest.raises(OSError):
        socket.create_connection((box_ip(), 8001), timeout=5).close()
    assert served_models(8000) == [SERVED]


def test_back_to_the_single_deployment(host, two_deployments: dict) -> None:
    result = playbook({"vllm_deployments": []})
    assert result.returncode == 0, result.stdout[-3000:]
    assert [inspect(host)["Path"], *inspect(host)["Args"]] == ["vllm", *EXPECTED_ARGS]
