"""Verify the fleet: three simulated Sparks converged by site.yml, then rollouts through
playbooks/rollout.yml judged on real state (the containers in each box's own Docker engine,
the deployment records, the API) and on the rollout's JSON summary.

Runs in file order: the converged fleet, a rollout the second batch's box cannot serve
(fleet-2 has less unified memory free: see molecule.yml), a rollout that succeeds
everywhere while clients keep sending requests through the gateway (roles/gateway, on
fleet-1), its re-run, and an operator's undo of the last deployment on one box.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import testinfra
from spark_testinfra import golden_vllm_argv, recap_changed, run_playbook

SCENARIO = Path(__file__).resolve().parents[1]
ROLLOUT = SCENARIO.parents[1] / "playbooks" / "rollout.yml"
SITE = SCENARIO.parents[1] / "site.yml"
BOXES = ("fleet-1", "fleet-2", "fleet-3")
RECORDS = "/var/lib/sparkfleet/vllm"
KEY = "sk-molecule-fleet-test"
# The digest the stand-in image got in the test bed's registry, which the inventory pins (molecule.yml).
PINNED_DIGEST = (Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "upstream-registry" / "vllm-image-digest"
                 ).read_text().strip()
# The gateway on fleet-1 (molecule.yml, group gateway), as a client reaches it, and the client's copy
# of its certificate.
GATEWAY = "https://fleet-1:8080"
GATEWAY_KEY = "sk-molecule-fleet-gateway"
GATEWAY_CA = "/root/sparkfleet-gateway-ca.pem"
LOAD = SCENARIO.parent / "resources" / "testinfra" / "gateway_load.py"


def box(name: str):
    return testinfra.get_host(f"docker://{name}")


def inspect(name: str) -> dict:
    return json.loads(box(name).check_output("docker inspect vllm"))[0]


def record(name: str, which: str = "known-good") -> dict:
    return json.loads(box(name).check_output(f"cat {RECORDS}/{which}.json"))


def flag(info: dict, name: str) -> str:
    return info["Args"][info["Args"].index(name) + 1]


def serves(name: str) -> bool:
    """/health, then a chat completion with the key, from inside the box."""
    body = json.dumps({"model": "qwen3.5-35b", "messages": [{"role": "user", "content": "still there?"}]})
    health = box(name).run("curl -fsS --max-time 10 -o /dev/null http://127.0.0.1:8000/health")
    chat = box(name).run(f"curl -fsS --max-time 30 -H 'Authorization: Bearer {KEY}' "
                         f"-H 'Content-Type: application/json' -d '{body}' http://127.0.0.1:8000/v1/chat/completions")
    return health.rc == 0 and chat.rc == 0 and json.loads(chat.stdout)["choices"][0]["message"]["content"].endswith(
        "still there?")


def rollout(tmp_path: Path, extra: dict) -> tuple[object, dict | None]:
    summary = tmp_path / "summary.json"
    result = run_playbook(ROLLOUT, {**extra, "rollout_summary_file": str(summary)})
    return result, json.loads(summary.read_text()) if summary.exists() else None


def by_host(summary: dict) -> dict[str, dict]:
    return {entry["host"]: entry for entry in summary["hosts"]}


def gateway_client(name: str = "fleet-2"):
    """A box trusting the gateway's certificate (copied from fleet-1, as a user would)."""
    pem = box("fleet-1").check_output("cat /etc/ssl/certs/sparkfleet-gateway.pem")
    client = box(name)
    client.check_output(f"printf '%s\\n' '{pem}' > {GATEWAY_CA}")
    return client


def routed() -> list[str]:
    """The boxes in the gateway's router's rotation (its API, on fleet-1's 127.0.0.1 only)."""
    return json.loads(box("fleet-1").check_output("curl -fsS http://127.0.0.1:30000/list_workers"))["urls"]


@contextmanager
def gateway_load(clients: int = 4, on: str = "fleet-2") -> Iterator[dict]:
    """Clients on a box (fleet-2 unless told) sending chat completions back to back through the gateway while the
    block runs (../../resources/testinfra/gateway_load.py); the dict yielded gets their counts
    and every failure once they have stopped."""
    client = gateway_client(on)
    client.check_output(f"cat > /root/gateway_load.py <<'EOF'\n{LOAD.read_text()}\nEOF")
    client.check_output("rm -f /root/load.stop /root/load.json && setsid nohup python3 /root/gateway_load.py "
                        f"{GATEWAY} {GATEWAY_KEY} {GATEWAY_CA} qwen3.5-35b /root/load.stop /root/load.json {clients} "
                        ">/root/load.log 2>&1 < /dev/null &")
    load: dict = {}
    try:
        yield load
    finally:
        client.check_output("touch /root/load.stop")
    deadline = time.monotonic() + 90
    while not client.file("/root/load.json").exists:
        assert time.monotonic() < deadline, client.check_output("cat /root/load.log")
        time.sleep(0.5)
    load.update(json.loads(client.check_output("cat /root/load.json")))


# --- the fleet as site.yml left it ----------------------------------------------------------

@pytest.mark.parametrize("name", BOXES)
def test_each_box_recorded_what_passed_its_health_gate(name: str):
    info, recorded = inspect(name), record(name)
    assert recorded["image_id"] == info["Image"]
    assert ["vllm", "serve", *recorded["argv"]] == ["vllm", *golden_vllm_argv()]
    assert [info["Path"], *info["Args"]] == ["vllm", *golden_vllm_argv()]
    env = dict(e.split("=", 1) for e in info["Config"]["Env"])
    mine = {k: env[k] for k in recorded["env_keys"]}
    # The values are not in the record, only their hash (Ansible's to_json(sort_keys=true)).
    assert KEY not in json.dumps(recorded)
    assert recorded["env_sha256"] == hashlib.sha256(json.dumps(mine, sort_keys=True).encode()).hexdigest()
    assert box(name).file(f"{RECORDS}/known-good-env.json").mode == 0o600
    assert not box(name).file(f"{RECORDS}/previous.json").exists
    tags = box(name).check_output("docker image inspect -f '{{.Id}}' sparkfleet-known-good/vllm:deployment")
    assert tags == info["Image"]


# --- a change the second batch's box cannot serve -------------------------------------------

@pytest.fixture(scope="module")
def failed_rollout(tmp_path_factory):
    before = {name: (inspect(name), record(name)) for name in BOXES}
    result, summary = rollout(tmp_path_factory.mktemp("failed"), {"vllm_gpu_memory_utilization": 0.8})
    return before, result, summary


def test_the_failed_rollout_fails_the_run_and_says_why(failed_rollout):
    result, summary = failed_rollout[1:]
    assert result.returncode != 0, result.stdout[-3000:]
    assert summary["complete"] is False
    hosts = by_host(summary)
    assert [hosts[n]["state"] for n in BOXES] == ["deployed", "rolled_back", "staged"]
    assert [hosts[n]["batch"] for n in BOXES[:2]] == [1, 2]
    assert summary["rolled_back"] == ["fleet-2"] and summary["not_reached"] == ["fleet-3"]
    # The vllm role's diagnosis of the stand-in's vLLM text ("Free memory on device ...").
    assert any("free memory" in why.lower() for why in hosts["fleet-2"]["why"]), hosts["fleet-2"]
    assert "--gpu-memory-utilization 0.75 -> 0.8" in hosts["fleet-1"]["changes"]
    assert "rolled back" in hosts["fleet-2"]["line"] and "not reached" in hosts["fleet-3"]["line"]
    assert "The rollout stopped" in result.output


def test_the_canary_went_first_and_runs_the_change(failed_rollout):
    before = failed_rollout[0]
    canary, second = inspect("fleet-1"), inspect("fleet-2")
    assert flag(canary, "--gpu-memory-utilization") == "0.8"
    assert canary["Id"] != before["fleet-1"][0]["Id"]
    # Restarted one after the other, canary first (ISO times of one clock compare as text).
    assert canary["State"]["StartedAt"] < second["State"]["StartedAt"]
    assert record("fleet-1", "previous") == before["fleet-1"][1]
    assert serves("fleet-1")


def test_the_failing_box_is_back_on_its_known_good_deployment_and_serves(failed_rollout):
    before = failed_rollout[0]
    info = inspect("fleet-2")
    old = before["fleet-2"][0]
    assert info["State"]["Running"] is True and info["Id"] != old["Id"]
    assert info["Image"] == old["Image"]
    assert info["Args"] == old["Args"]
    assert sorted(info["Config"]["Env"]) == sorted(old["Config"]["Env"])
    assert info["HostConfig"]["ShmSize"] == old["HostConfig"]["ShmSize"]
    assert [m["Source"] for m in info["Mounts"]] == [m["Source"] for m in old["Mounts"]]
    # By the same image reference as the role's configure step asks for, not by the bare id
    # (community.docker would recreate it on the next site.yml), and with the same labels.
    assert info["Config"]["Image"] == old["Config"]["Image"] == f"vllm/vllm-openai@{PINNED_DIGEST}"
    assert info["Config"]["Labels"] == old["Config"]["Labels"]
    # Still the known-good record: the failed change was never recorded; the record of what
    # the role last ran says what runs now, not the failed command line. The rollback's gate watched
    # the start of the same deployment: a record without start-up figures gets them, nothing else.
    after = record("fleet-2")
    assert after.get("startup") or not before["fleet-2"][1].get("startup")
    assert {k: v for k, v in after.items() if k != "startup"} == {
        k: v for k, v in before["fleet-2"][1].items() if k != "startup"}
    assert ["serve", *record("fleet-2", "last-run")["argv"]] == info["Args"]
    assert serves("fleet-2")


def test_site_leaves_the_rolled_back_box_running_as_it_is(failed_rollout):
    """The inventory the rollback went back to is converged: site.yml on that box alone
    changes nothing and the container keeps its id and start time."""
    del failed_rollout  # after it
    info = inspect("fleet-2")
    result = run_playbook(SITE, limit="fleet-2")
    assert result.returncode == 0, result.stdout[-3000:]
    assert recap_changed(result.stdout) == 0, result.stdout[-6000:]
    after = inspect("fleet-2")
    assert (after["Id"], after["State"]["StartedAt"]) == (info["Id"], info["State"]["StartedAt"])


def test_the_third_batch_was_never_touched(failed_rollout):
    before = failed_rollout[0]
    info = inspect("fleet-3")
    assert info["Id"] == before["fleet-3"][0]["Id"]
    assert info["State"]["StartedAt"] == before["fleet-3"][0]["State"]["StartedAt"]
    assert record("fleet-3") == before["fleet-3"][1]


# --- a change every box can serve, under load through the gateway, and its re-run -------------

@pytest.fixture(scope="module")
def good_rollout(failed_rollout, tmp_path_factory):
    """Rolled out while 4 clients send requests back to back through the gateway: each box leaves
    the router's rotation, finishes its requests, restarts, passes its gate and comes back."""
    del failed_rollout  # after it
    with gateway_load() as load:
        result, summary = rollout(tmp_path_factory.mktemp("good"), {"vllm_max_num_seqs": 8})
    return result, summary, load


def test_a_rollout_that_succeeds_everywhere(good_rollout):
    result, summary = good_rollout[:2]
    assert result.returncode == 0, result.stdout[-3000:]
    assert summary["complete"] is True
    hosts = by_host(summary)
    expected = [("deployed", 1), ("deployed", 2), ("deployed", 3)]
    assert [(hosts[n]["state"], hosts[n]["batch"]) for n in BOXES] == expected
    for name in BOXES:
        info = inspect(name)
        assert (flag(info, "--max-num-seqs"), flag(info, "--gpu-memory-utilization")) == ("8", "0.75")
        assert ["serve", *record(name)["argv"]] == info["Args"]
        assert serves(name)


def test_the_rollout_lost_no_request_through_the_gateway(good_rollout):
    result, load = good_rollout[0], good_rollout[2]
    assert result.returncode == 0, result.stdout[-3000:]
    # Each box was taken out of the router's rotation before its restart, and put back.
    assert result.stdout.count("TASK [sparkfleet.serving.gateway : Take the box out of the gateways' rotation]") == 3
    assert sorted(routed()) == sorted(f"http://{name}:8000" for name in BOXES)
    assert load["failed"] == [] and load["ok"] > 30, load


def test_rerunning_a_finished_rollout_changes_nothing(good_rollout):
    del good_rollout
    before = {name: inspect(name)["Id"] for name in BOXES}
    result = run_playbook(ROLLOUT, {"vllm_max_num_seqs": 8})
    assert result.returncode == 0, result.stdout[-3000:]
    assert recap_changed(result.stdout) == 0
    assert {name: inspect(name)["Id"] for name in BOXES} == before


# --- an operator's undo ---------------------------------------------------------------------

def test_undo_puts_one_box_back_on_the_previous_deployment(good_rollout):
    del good_rollout
    current, previous = record("fleet-3"), record("fleet-3", "previous")
    result = run_playbook(SCENARIO / "undo.yml", limit="fleet-3")
    assert result.returncode == 0, result.stdout[-3000:]
    info = inspect("fleet-3")
    assert info["Args"] == ["serve", *previous["argv"]] and flag(info, "--max-num-seqs") == "16"
    # Swapped: undoing again would go back to the change (started anew: when, and how fast, are this start's).
    assert {k: v for k, v in record("fleet-3").items() if k not in ("deployed_at", "startup")} == \
        {k: v for k, v in previous.items() if k not in ("deployed_at", "startup")}
    assert record("fleet-3", "previous") == current
    assert serves("fleet-3")


# --- status and benchmark against the fleet --------------------------------------------------

def test_status_and_benchmark_report_the_fleet():
    """status-benchmark.yml runs playbooks/status.yml and playbooks/benchmark.yml and checks
    their JSON against the boxes' own counters (its asserts are the test)."""
    result = run_playbook(SCENARIO / "status-benchmark.yml")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
