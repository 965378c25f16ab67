"""The two-box recipe gpt-oss-120b-tp2 (roles/vllm/recipes/gpt-oss-120b-tp2.yml: tensor parallel 2 x pipeline 1 over
two DGX Sparks, vLLM's multi-node mode on the official image, here the stand-in of vllm/vllm-openai:v0.34.0) served
by a second cluster, duo1 (vc-spark-a the head, vc-spark-b the worker), through the vllm role's health gate, beside
trio1's containers on the same boxes (../recipe-tp2.yml with ../inventory/duo1.yml: its own container vllm-tp2, API
port 8002, master port 29502 and state directory): a real completion through the head's API with the recipe's served
model name, each member's command line, each rank loading half the weights (the stand-in sizes them from the staged
model directory: config.json and the apparent size of the sparse 61 GiB shard), trio1 serving on untouched
throughout, and the duo removed again (../recipe-tp2-remove.yml).

The test bed's memory is not shared between the two deployments: the stand-in sizes each from the whole GB10 (as
the serving plan does), so trio1's share (0.75) and the duo's (0.8) both fit here, which two real engines on one
Spark would not. What this proves is the role's multi-node path for the recipe and that two deployments on the same
boxes keep apart.

Runs after test_cluster_guard.py (file order), on the cluster it leaves serving, and before test_link.py, which
takes the link down and up again (the duo's ranks meet over it). The tests run in this order.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest
from spark_testinfra import run_playbook

# The scenario's boxes, how to reach them and trio1's own names: test_cluster.py's (one place for them).
from test_cluster import HEAD, KEY, LINK, SCENARIO, WORKER, box, chat, inspect

RECIPE = "gpt-oss-120b-tp2"
SERVED = "gpt-oss-120b"
CONTAINER, PORT, MASTER_PORT = "vllm-tp2", 8002, 29502
DUO = {HEAD: 0, WORKER: 1}
# Molecule's inventory file (the boxes' connections, with its directory's group_vars and host_vars) and the duo's
# groups instead of Molecule's inventory directory, whose `hosts` makes every box a member of trio1: a box is in at
# most one cluster group (plugins/plugin_utils/cluster.py), so each run names the cluster it deploys.
INVENTORIES = [Path(os.environ["MOLECULE_INVENTORY_FILE"]), SCENARIO / "inventory" / "duo1.yml"]
RECORDS = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp")) / "cluster-recipes"
UNITS = (f"sparkfleet-vllm-cluster-boot@{CONTAINER}.service", f"sparkfleet-vllm-cluster-guard@{CONTAINER}.service")


def duo_inspect(name: str) -> dict:
    return inspect_named(name, CONTAINER)


def inspect_named(name: str, container: str) -> dict:
    return json.loads(box(name).check_output(f"docker inspect {container}"))[0]


def value_of(args: list[str], flag: str) -> str | None:
    """The value that follows `flag` on a command line (None when the flag is not there)."""
    return args[args.index(flag) + 1] if flag in args else None


def trio_ids() -> dict[str, str]:
    return {name: inspect(name)["Id"] for name in LINK}


def head_request(path: str, body: dict | None = None) -> tuple[int, dict | str]:
    """An HTTP request from inside the head to its own API port (ufw lets the controller reach trio1's API port
    alone, firewall_api_port; the box's loopback is always allowed)."""
    script = (
        "import json, sys, urllib.error, urllib.request\n"
        f"body = {json.dumps(json.dumps(body)) if body is not None else None}\n"
        f"request = urllib.request.Request('http://127.0.0.1:{PORT}{path}', data=body.encode() if body else None,\n"
        f"    headers={{'Authorization': 'Bearer {KEY}', 'Content-Type': 'application/json'}})\n"
        "try:\n"
        "    with urllib.request.urlopen(request, timeout=60) as reply:\n"
        "        print(reply.status); print(reply.read().decode())\n"
        "except urllib.error.HTTPError as exc:\n"
        "    print(exc.code); print(exc.read().decode())\n")
    out = box(HEAD).check_output(f"python3 -c {shlex.quote(script)}")
    status, _newline, text = out.partition("\n")
    try:
        return int(status), json.loads(text)
    except ValueError:
        return int(status), text


def test_a_box_in_two_clusters_is_refused_before_any_change():
    """Molecule's inventory directory (trio1) and duo1 together: vc-spark-a and vc-spark-b would be in two clusters,
    and the run stops with both names before the weights are staged or a container changes."""
    before = trio_ids()
    done = run_playbook(SCENARIO / "recipe-tp2.yml", {"duo_records": str(RECORDS)},
                        inventories=[INVENTORIES[0].parent, INVENTORIES[1]])
    assert done.returncode != 0, done.output[-4000:]
    assert "the host is in 2 cluster groups (duo1, trio1)" in done.output, done.output[-4000:]
    for name in DUO:
        assert box(name).run(f"docker inspect {CONTAINER}").rc != 0, name
        assert not box(name).file("/srv/models/gpt-oss-120b").exists, name
    assert trio_ids() == before


@pytest.fixture(scope="module")
def duo() -> dict:
    """trio1's container IDs before the duo, and each duo member's published vllm_deployment."""
    before = trio_ids()
    RECORDS.mkdir(parents=True, exist_ok=True)
    for old in RECORDS.glob("*.json"):
        old.unlink()
    done = run_playbook(SCENARIO / "recipe-tp2.yml", {"duo_records": str(RECORDS)}, inventories=INVENTORIES)
    assert done.returncode == 0, done.output[-5000:]
    return {"trio_before": before,
            "deployments": {name: json.loads((RECORDS / f"{name}.json").read_text()) for name in DUO}}


def test_the_duo_passed_the_health_gate_as_one_cluster(duo):
    head, worker = duo["deployments"][HEAD], duo["deployments"][WORKER]
    assert head["health"]["state"] == "ready", head["health"]
    for name, rank in DUO.items():
        cluster = duo["deployments"][name]["cluster"]
        assert (cluster["name"], cluster["members"], cluster["rank"]) == ("duo1", list(DUO), rank), cluster
    # The worker serves no API: no gate of its own.
    assert worker["api_url"] == "" and worker["cluster"]["role"] == "worker"


def test_the_head_answers_health_and_a_chat_completion_with_the_recipes_model(duo):
    status, _body = head_request("/health")
    assert status == 200
    status, models = head_request("/v1/models")
    assert status == 200 and [m["id"] for m in models["data"]] == [SERVED], models
    status, reply = head_request("/v1/chat/completions", {
        "model": SERVED, "max_tokens": 8, "messages": [{"role": "user", "content": "Reply with the single word OK."}]})
    assert status == 200, reply
    assert reply["model"] == SERVED and reply["choices"][0]["message"]["content"], reply


def test_each_member_runs_its_rank_with_the_recipes_arguments(duo):
    for name, rank in DUO.items():
        info = duo_inspect(name)
        args = info["Args"]
        assert info["State"]["Running"] is True, name
        assert info["HostConfig"]["NetworkMode"] == "host", name
        assert value_of(args, "--tensor-parallel-size") == "2", (name, args)
        assert value_of(args, "--pipeline-parallel-size") in (None, "1"), (name, args)
        assert value_of(args, "--nnodes") == "2" and value_of(args, "--node-rank") == str(rank), (name, args)
        assert value_of(args, "--master-addr") == LINK[HEAD], (name, args)
        assert value_of(args, "--master-port") == str(MASTER_PORT), (name, args)
        assert ("--headless" in args) == bool(rank), (name, args)
        # The recipe's parsers (the harmony format's) and its context for a 128 GB box.
        assert value_of(args, "--tool-call-parser") == "openai", (name, args)
        assert value_of(args, "--reasoning-parser") == "openai_gptoss", (name, args)
        assert "--enable-auto-tool-choice" in args, (name, args)
        assert value_of(args, "--max-model-len") == "131072", (name, args)
        assert value_of(args, "--served-model-name") == SERVED, (name, args)
        env = dict(item.split("=", 1) for item in info["Config"]["Env"])
        assert env["VLLM_HOST_IP"] == LINK[name], name


def test_each_rank_loaded_half_of_the_weights_and_the_worker_joined_the_head(duo):
    """61 GiB of weights (the recipe's weights_gib, the staged shard's apparent size) over 2 ranks: 30.5 GiB each,
    as vLLM's model runner logs it ("Model loading took ... GiB memory")."""
    for name in DUO:
        logs = box(name).check_output(f"docker logs {CONTAINER} 2>&1")
        # Every rank of the box (one GB10 each) took its half, none the whole.
        assert re.findall(r"Model loading took ([\d.]+) GiB", logs) == ["30.5"], (name, logs[-3000:])
    logs = box(WORKER).check_output(f"docker logs {CONTAINER} 2>&1")
    assert f"with head node address {LINK[HEAD]}:{MASTER_PORT} for torch.distributed process group" in logs
    assert "world_size=2 rank=1 local_rank=0" in logs
    # vLLM names a worker by its place in the parallel groups: the second tensor shard.
    assert "(Worker_TP1 pid=" in logs


def test_the_duo_has_its_own_state_and_units(duo):
    for name in DUO:
        member = box(name)
        assert member.file(f"/var/lib/sparkfleet/{CONTAINER}/known-good.json").exists, name
        boot = member.file(f"/etc/systemd/system/{UNITS[0]}").content_string
        assert f"start %i /var/lib/sparkfleet/{CONTAINER} " in boot, name
        assert member.check_output(f"systemctl is-enabled {UNITS[0]}") == "enabled", name
    guard = box(WORKER).file(f"/etc/systemd/system/{UNITS[1]}").content_string
    assert f"--state-dir /var/lib/sparkfleet/{CONTAINER} " in guard
    assert box(WORKER).check_output(f"systemctl is-active {UNITS[1]}") == "active"
    assert not box(HEAD).file(f"/etc/systemd/system/{UNITS[1]}").exists


def test_trio1_kept_serving_with_its_own_containers_and_units(duo):
    assert trio_ids() == duo["trio_before"]
    for name in LINK:
        assert inspect(name)["State"]["Running"] is True, name
        # trio1's units still name its own state directory, after the duo's run wrote its own.
        boot = box(name).file("/etc/systemd/system/sparkfleet-vllm-cluster-boot@vllm.service").content_string
        assert "start %i /var/lib/sparkfleet/vllm " in boot, name
    for name in LINK:
        if name != HEAD:
            guard = box(name).file("/etc/systemd/system/sparkfleet-vllm-cluster-guard@vllm.service").content_string
            assert "--state-dir /var/lib/sparkfleet/vllm " in guard, name
            assert box(name).check_output("systemctl is-active sparkfleet-vllm-cluster-guard@vllm.service") == "active"
    assert chat()


def test_the_duo_is_removed_and_trio1_serves_on():
    """Last: whatever the tests before found, the duo goes, so that test_link.py finds the boxes as trio1 left them."""
    before = trio_ids()
    done = run_playbook(SCENARIO / "recipe-tp2-remove.yml", inventories=INVENTORIES)
    assert done.returncode == 0, done.output[-4000:]
    for name in DUO:
        member = box(name)
        assert member.run(f"docker inspect {CONTAINER}").rc != 0, name
        for unit in UNITS:
            assert not member.file(f"/etc/systemd/system/{unit}").exists, (name, unit)
            assert member.run(f"systemctl is-active {unit}").stdout.strip() == "inactive", (name, unit)
        assert not member.file(f"/var/lib/sparkfleet/{CONTAINER}").exists, name
    assert trio_ids() == before
    assert chat()
