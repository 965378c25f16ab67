"""site.yml on pf-gb10, a box the preflight passes: a vllm_* setting the vllm role refuses, or
missing weights with no hub in reach (this scenario has none), stop the host in site.yml's first
play (the checks) and nothing on it changes; playbooks/check.yml passes once the weights are there
(as the model role leaves them: a manifest of a pinned commit, which needs no hub) and changes
nothing either."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from preflight_helpers import snapshot_now
from spark_testinfra import PlaybookRun, run_playbook

testinfra_hosts = ["ansible://pf-gb10"]

PROJECT = Path(__file__).resolve().parents[3]
MODEL_DIR = "/srv/models/Qwen3.5-35B-A3B-FP8"
# config.json as the model ships it, reduced to what the checks read (vLLM reads more).
CONFIG = '{"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe"}'
# The commit the staged weights' manifest records; pinned with -e model_revision, the model
# role's check plans from the manifest alone and asks no hub.
COMMIT = "5" * 40
# The manifest the model role writes (sparkfleet-manifest.json), for the staged config.json.
MANIFEST = f"""
import hashlib, json, os
d = "{MODEL_DIR}"
st = os.stat(d + "/config.json")
digest = hashlib.sha256(open(d + "/config.json", "rb").read()).hexdigest()
json.dump({{"format": 1, "source": "huggingface", "endpoint": "https://huggingface.co",
           "repo": "Qwen/Qwen3.5-35B-A3B-FP8", "revision": "{COMMIT}", "commit": "{COMMIT}",
           "copied_from": None, "written_at": "2026-11-30T00:00:00Z", "include": [], "exclude": [],
           "files": [{{"path": "config.json", "size": st.st_size, "sha256": digest, "mtime": st.st_mtime}}]}},
          open(d + "/sparkfleet-manifest.json", "w"))
"""
# What the roles after the checks would do first: none of it may appear in the output after the
# check play, which itself runs each role's check entry point (TASK [sparkfleet.serving.docker :
# Check ...]) and changes nothing.
PROVISIONING_PLAY = "PLAY [Provision DGX Spark inference servers]"
LATER_TASKS = ("TASK [sparkfleet.serving.docker", "TASK [sparkfleet.serving.firewall",
               "TASK [sparkfleet.serving.nvidia_runtime",
               "TASK [sparkfleet.serving.watchdog", "TASK [sparkfleet.serving.vllm : Stage")


def run(playbook: str, extra_vars: dict | None = None) -> PlaybookRun:
    return run_playbook(PROJECT / playbook, extra_vars, limit="pf-gb10")


def recap(out: str) -> dict[str, int]:
    tail = out.rsplit("PLAY RECAP", maxsplit=1)[-1]
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", tail)}


def assert_stopped_in_the_check_play(result: PlaybookRun, reason: str) -> None:
    out = result.output
    assert result.returncode != 0, out[-3000:]
    assert reason in out, out[-3000:]
    assert recap(out)["failed"] == 1, out[-3000:]
    assert recap(out)["changed"] == 0, out[-3000:]
    check_play, *after = out.split(PROVISIONING_PLAY, 1)
    assert "changed: [" not in check_play, check_play[-3000:]
    for task in LATER_TASKS:
        assert not any(task in part for part in after), f"{task} ran after the checks failed"


@pytest.fixture(scope="module")
def no_weights(host):
    assert not host.file(MODEL_DIR).exists, "the scenario's pf-gb10 has no weights"


@pytest.fixture
def weights(host):
    """config.json where the vllm role looks for it; removed again (the snapshot tests compare /srv)."""
    made_models = not host.file("/srv/models").exists
    host.run_expect([0], f"mkdir -p {MODEL_DIR} && printf '%s\\n' '{CONFIG}' > {MODEL_DIR}/config.json")
    host.run_expect([0], f"python3 -c '{MANIFEST}'")
    yield
    host.run_expect([0], f"rm -rf {'/srv/models' if made_models else MODEL_DIR}")


@pytest.mark.usefixtures("no_weights")
def test_site_without_weights_and_no_hub_stops_in_the_check_play_and_changes_nothing(host):
    before = snapshot_now(host)
    result = run("site.yml")
    # The model role would download the weights; the hub is out of reach, which it says with the
    # variable to change.
    assert_stopped_in_the_check_play(result, "model_endpoint")
    assert "Set model_endpoint to a hub or mirror this box can reach" in result.output
    assert snapshot_now(host) == before


@pytest.mark.usefixtures("weights")
def test_site_with_a_bad_vllm_setting_stops_in_the_check_play_and_changes_nothing(host):
    before = snapshot_now(host)
    result = run("site.yml", {"vllm_gpu_memory_utilization": 0.97, "model_revision": COMMIT})
    assert_stopped_in_the_check_play(result, "gpu_memory_utilization 0.97 is above 0.95 on unified memory")
    assert snapshot_now(host) == before


@pytest.mark.usefixtures("weights")
def test_check_playbook_passes_with_weights_and_good_settings_and_changes_nothing(host):
    # The same box and play with the default settings passes: what stopped the run above is
    # the setting, and the checks alone change nothing.
    before = snapshot_now(host)
    result = run("playbooks/check.yml", {"model_revision": COMMIT})
    out = result.output
    assert result.returncode == 0, out[-3000:]
    assert recap(out)["changed"] == 0
    assert snapshot_now(host) == before
