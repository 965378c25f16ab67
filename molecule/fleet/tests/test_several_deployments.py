"""Several models on one box, across the fleet: fleet-1 and fleet-2 serve the model twice, as `vllm` and as
`coder` (another served name, port 8001), fleet-3 once (inventory/deployments.yml). site.yml serves them; the
gateway routes each served model to the boxes that serve it, each on its own public port, and real requests through
it reach only those boxes. Dropping `coder` again takes it down, closes its port and its route."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from spark_testinfra import run_playbook
from test_fleet import BOXES, GATEWAY_CA, GATEWAY_KEY, ROLLOUT, SITE, box, by_host, gateway_client

SCENARIO = Path(__file__).resolve().parents[1]
MOLECULE_INVENTORY = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
INVENTORIES = [MOLECULE_INVENTORY, SCENARIO / "inventory" / "deployments.yml"]
CODER = "qwen3.5-35b-coder"
TWO = ("fleet-1", "fleet-2")


def served(name: str, port: int) -> float:
    """Requests a deployment has finished (vLLM's vllm:request_success_total)."""
    metrics = box(name).check_output(f"curl -fsS http://127.0.0.1:{port}/metrics")
    return sum(float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} (\S+)$", metrics, re.M))


def ask(client, model: str, port: int) -> int:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "which box?"}], "max_tokens": 8})
    return int(client.check_output(
        f"curl -sS -o /dev/null --max-time 30 --cacert {GATEWAY_CA} -H 'Authorization: Bearer {GATEWAY_KEY}' "
        f"-H 'Content-Type: application/json' -d '{body}' -w '%{{http_code}}' https://fleet-1:{port}/v1/chat/completions"))


def reaches(client, address: str, port: int) -> bool:
    return client.run(f"curl -sS -o /dev/null --max-time 5 http://{address}:{port}/health").rc == 0


@pytest.fixture(scope="module")
def deployed():
    result = run_playbook(SITE, inventories=INVENTORIES)
    assert result.returncode == 0, result.stdout[-5000:]
    yield result.stdout
    # The last test drops coder itself; after a failure before it, the scenario's own boxes are put back here.
    if box("fleet-1").run("docker container inspect coder").rc == 0:
        restored = run_playbook(SITE)
        assert restored.returncode == 0, restored.stdout[-5000:]


def test_two_deployments_on_two_boxes_one_on_the_third(deployed):
    for name in TWO:
        assert box(name).check_output("docker inspect -f '{{.State.Running}}' coder") == "true"
    assert box("fleet-3").run("docker container inspect coder").rc != 0
    assert "share (weights" in deployed  # the admission's table


def test_the_status_has_a_row_per_deployment(deployed, tmp_path):
    report = tmp_path / "status.json"
    # The status reads each box's deployments from the inventory (the vllm role's facts entry point).
    status = run_playbook(SITE.parent / "playbooks" / "status.yml", {"status_json_path": str(report)},
                          inventories=INVENTORIES)
    assert status.returncode == 0, status.stdout[-4000:]
    rows = json.loads(report.read_text(encoding="utf-8"))["hosts"]
    found = sorted((row["host"], row["deployment"], row["port"], row["served_model_name"]) for row in rows)
    assert found == sorted([(name, "vllm", 8000, "qwen3.5-35b") for name in BOXES]
                           + [(name, "coder", 8001, CODER) for name in TWO])
    assert all(row["reachable"] for row in rows)


def test_the_benchmark_has_a_row_per_deployment(deployed, tmp_path):
    report = tmp_path / "benchmark.json"
    bench = run_playbook(SITE.parent / "playbooks" / "benchmark.yml",
                         {"benchmark_json_path": str(report), "benchmark_num_prompts": 4,
                          "benchmark_max_concurrency": 2, "benchmark_input_len": 32, "benchmark_output_len": 8},
                         inventories=INVENTORIES)
    assert bench.returncode == 0, bench.stdout[-4000:]
    document = json.loads(report.read_text(encoding="utf-8"))
    rows = sorted((row["host"], row["deployment"], row["completed"], row["failed"]) for row in document["hosts"])
    assert rows == sorted([(name, "vllm", 4, 0) for name in BOXES] + [(name, "coder", 4, 0) for name in TWO])
    # Each result under its box and, where a box serves several, its deployment.
    assert sorted(document["results"]) == sorted([f"{name}/{d}" for name in TWO for d in ("vllm", "coder")]
                                                 + ["fleet-3"])
    assert document["fleet"]["completed"] == 20


def test_each_served_model_is_routed_only_to_the_boxes_that_serve_it(deployed):
    client = gateway_client()
    before = {(name, port): served(name, port) for name in BOXES for port in (8000, 8001)
              if name in TWO or port == 8000}
    assert [ask(client, CODER, 8081) for attempt in range(6)] == [200] * 6
    assert [ask(client, "qwen3.5-35b", 8080) for attempt in range(6)] == [200] * 6
    after = {key: served(*key) for key in before}
    gained = {key: after[key] - before[key] for key in before}
    # coder: only fleet-1 and fleet-2, round robin; the first model: all three boxes.
    assert {name: gained[(name, 8001)] for name in TWO} == dict.fromkeys(TWO, 3.0)
    assert {name: gained[(name, 8000)] for name in BOXES} == dict.fromkeys(BOXES, 2.0)


def container_id(name: str, container: str) -> str:
    return box(name).check_output(f"docker inspect -f '{{{{.Id}}}}' {container}")


def test_a_rollout_of_one_deployment_restarts_only_its_containers_canary_first(deployed, tmp_path):
    before = {(name, container): container_id(name, container) for name in BOXES for container in ("vllm", "coder")
              if name in TWO or container == "vllm"}
    summary_file = tmp_path / "summary.json"
    # Two batches (the canary, then the rest): the default's third adds nothing to what this test asks.
    result = run_playbook(ROLLOUT, {"fleet_coder_max_model_len": 2048, "rollout_summary_file": str(summary_file),
                                    "rollout_batches": [1, "100%"]}, inventories=INVENTORIES)
    assert result.returncode == 0, result.stdout[-5000:]
    after = {key: container_id(*key) for key in before}
    assert {key for key in before if after[key] != before[key]} == {(name, "coder") for name in TWO}
    for name in TWO:
        args = box(name).check_output("docker inspect -f '{{json .Args}}' coder")
        assert '"--max-model-len","2048"' in args
    hosts = by_host(json.loads(summary_file.read_text()))
    assert (hosts["fleet-1"]["state"], hosts["fleet-1"]["batch"]) == ("deployed", 1)
    assert hosts["fleet-2"]["state"] == "deployed" and hosts["fleet-2"]["batch"] > 1
    assert hosts["fleet-3"]["state"] == "unchanged"
    # The summary names the deployment that changed, not the box's first.
    for name in TWO:
        changes = hosts[name]["changes"]
        assert len(changes) == 1 and changes[0].startswith("coder: --max-model-len ") and changes[0].endswith("-> 2048")


def test_dropping_a_deployment_closes_its_port_and_its_route(deployed):
    client = gateway_client("fleet-3")
    assert reaches(client, "fleet-1", 8001)
    restored = run_playbook(SITE)
    assert restored.returncode == 0, restored.stdout[-5000:]
    for name in TWO:
        assert box(name).run("docker container inspect coder").rc != 0
        assert not box(name).file("/var/lib/sparkfleet/vllm-coder").exists
        assert "8001" not in box(name).check_output("ufw status")
    # Real TCP from another box: nothing answers on the dropped deployment's port.
    assert not reaches(client, "fleet-1", 8001)
    assert ask(gateway_client(), "qwen3.5-35b", 8080) == 200
    assert box("fleet-1").run("curl -s -o /dev/null --max-time 5 https://127.0.0.1:8081/ -k").rc != 0
