"""Verify the gateway (roles/gateway) on fleet-1: nginx with TLS and the key swap, in front of
vllm-router from its real wheel, the three boxes behind it. A client on fleet-2 talks to it
as any client would (HTTPS, the gateway's certificate), and the boxes' own /metrics say which
box served what. A rollout under load through it: test_fleet.py's rollout that succeeds everywhere.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from spark_testinfra import recap_changed, run_playbook
from test_fleet import BOXES, GATEWAY, GATEWAY_CA, GATEWAY_KEY, KEY, SITE, box, gateway_client, gateway_load, routed

GATEWAY_PLAYBOOK = SITE.parent / "playbooks" / "gateway.yml"

ROUTER_METRICS = "http://127.0.0.1:29000/metrics"
# What vLLM's render routes answer: GenerateRequest's fields (vllm/entrypoints/serve/disagg/protocol.py:55-108, 0.19.1).
GENERATE_REQUEST_KEYS = ["request_id", "token_ids", "features", "sampling_params", "model", "stream", "stream_options",
                         "cache_salt", "priority", "kv_transfer_params"]


@pytest.fixture(scope="module")
def client():
    """fleet-2, trusting the gateway's certificate."""
    return gateway_client()


def ask(client, key: str | None, path: str = "/v1/chat/completions", prompt: str = "through the gateway",
        method: str = "POST") -> tuple[int, str, str]:
    """(status, headers, body) of one request to the gateway."""
    body = json.dumps({"model": "qwen3.5-35b", "messages": [{"role": "user", "content": prompt}], "max_tokens": 8})
    auth = f"-H 'Authorization: Bearer {key}'" if key else ""
    data = f"-H 'Content-Type: application/json' -d '{body}'" if method == "POST" else ""
    out = client.check_output(
        f"curl -sS --max-time 30 --cacert {GATEWAY_CA} -X {method} -D /root/gw-headers {auth} {data} "
        f"-w '\\n%{{http_code}}' '{GATEWAY}{path}'; echo; cat /root/gw-headers")
    text, headers = out.split("\nHTTP/", 1)
    body_text, status = text.rsplit("\n", 1)
    return int(status), "HTTP/" + headers, body_text


def served(name: str) -> float:
    """Requests the box has finished (vLLM's vllm:request_success_total, every reason)."""
    metrics = box(name).check_output("curl -fsS http://127.0.0.1:8000/metrics")
    return sum(float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} (\S+)$", metrics, re.M))


def router_metric(name: str, worker: str) -> float | None:
    metrics = box("fleet-1").check_output(f"curl -fsS {ROUTER_METRICS}")
    found = re.search(rf'^{name}\{{worker="http://{worker}:8000"\}} (\S+)$', metrics, re.M)
    return float(found.group(1)) if found else None


def test_requests_with_the_key_reach_every_box(client):
    before = {name: served(name) for name in BOXES}
    for i in range(9):
        status, headers, body = ask(client, GATEWAY_KEY, prompt=f"request {i}")
        assert status == 200, headers + body
        assert json.loads(body)["choices"][0]["message"]["content"]
    after = {name: served(name) for name in BOXES}
    # Round robin over three healthy boxes: three each.
    assert {name: after[name] - before[name] for name in BOXES} == dict.fromkeys(BOXES, 3.0)


# nginx's map matches plain strings ignoring case: the key in upper case, or with one letter's case
# swapped, passed until the map compared with a case-sensitive regular expression.
@pytest.mark.parametrize("key", [None, "wrong", KEY, GATEWAY_KEY.upper(), GATEWAY_KEY[:-1] + GATEWAY_KEY[-1].upper()],
                         ids=["no key", "a wrong key", "the boxes' key", "the key in upper case",
                              "the key with one letter's case swapped"])
def test_a_request_without_the_gateways_key_is_refused_at_the_gateway(client, key):
    before = {name: served(name) for name in BOXES}
    status, headers, body = ask(client, key)
    assert status == 401
    # nginx's own answer (a box's 401 reads {"error": "Unauthorized"}), and no box saw it.
    assert json.loads(body)["error"]["type"] == "authentication_error"
    assert 'WWW-Authenticate: Bearer realm="sparkfleet gateway"' in headers
    assert {name: served(name) for name in BOXES} == before


def test_the_boxes_key_never_reaches_a_client_nor_the_routers_command_line(client):
    status, headers, body = ask(client, GATEWAY_KEY)
    assert status == 200 and KEY not in headers + body
    gateway = box("fleet-1")
    site = gateway.file("/etc/nginx/conf.d/sparkfleet-gateway.conf")
    assert (site.user, site.group, site.mode) == ("root", "root", 0o600)
    assert KEY in site.content_string
    assert KEY not in gateway.check_output("ps -eo args; cat /etc/sparkfleet-gateway/*.env")


def post(client, path: str, body: dict | None = None, form: str = "") -> tuple[int, str]:
    """(status, body) of a POST through the gateway with its key: JSON, or a multipart form (curl -F)."""
    payload = f"-F '{form}'" if form else f"-H 'Content-Type: application/json' -d '{json.dumps(body)}'"
    out = client.check_output(f"curl -sS --max-time 30 --cacert {GATEWAY_CA} -H 'Authorization: Bearer {GATEWAY_KEY}' "
                              f"{payload} -w '\\n%{{http_code}}' '{GATEWAY}{path}'")
    text, status = out.rsplit("\n", 1)
    return int(status), text


def test_every_path_the_boxes_serve_under_v1_passes_with_the_key(client):
    """vllm-router forwards its typed routes with the client's Authorization header, every other path without
    it (and only with a JSON body): nginx passes those to the boxes itself, with the boxes' key."""
    status, text = post(client, "/v1/responses", {"model": "qwen3.5-35b", "input": "through the gateway",
                                                  "max_output_tokens": 16})
    assert status == 200 and json.loads(text)["status"] == "completed", text
    status, text = post(client, "/v1/messages", {"model": "qwen3.5-35b", "max_tokens": 16,
                                                 "messages": [{"role": "user", "content": "through the gateway"}]})
    assert status == 200 and json.loads(text)["type"] == "message", text
    # vLLM 0.19.1's render routes (vllm/entrypoints/serve/render/api_router.py) and batched chat completions
    # (vllm/entrypoints/openai/chat_completion/api_router.py:77-102): under /v1/ but none of the router's
    # typed routes, so nginx passes them to the boxes.
    message = [{"role": "user", "content": "through the gateway"}]
    status, text = post(client, "/v1/chat/completions/render", {"model": "qwen3.5-35b", "messages": message})
    rendered = json.loads(text)
    assert status == 200 and list(rendered) == GENERATE_REQUEST_KEYS, text
    assert rendered["request_id"].startswith("chatcmpl-") and len(rendered["token_ids"]) == 3, text
    prompts = {"model": "qwen3.5-35b", "prompt": ["through the gateway", "again"]}
    status, text = post(client, "/v1/completions/render", prompts)
    rendered = json.loads(text)
    assert status == 200 and [list(item) for item in rendered] == [GENERATE_REQUEST_KEYS] * 2, text
    assert [len(item["token_ids"]) for item in rendered] == [3, 1], text
    assert all(item["request_id"].startswith("cmpl-") for item in rendered), text
    status, text = post(client, "/v1/chat/completions/batch", {"model": "qwen3.5-35b", "max_tokens": 8,
                                                               "messages": [message, message]})
    batch = json.loads(text)
    assert status == 200 and batch["object"] == "chat.completion", text
    assert [choice["index"] for choice in batch["choices"]] == [0, 1], text
    assert all(choice["message"]["content"] for choice in batch["choices"]), text
    # What vLLM serves elsewhere (/tokenize, not under /v1/) or only for other models (speech, pooling): the
    # box's own 404, not its 401 (the key reached it), a multipart body too.
    for path, form in (("/v1/tokenize", ""), ("/v1/embeddings", ""),
                       ("/v1/audio/transcriptions", "file=@/etc/hostname")):
        status, text = post(client, path, {"model": "qwen3.5-35b", "input": "x"}, form=form)
        assert status == 404 and json.loads(text) == {"detail": "Not Found"}, (path, status, text)


@pytest.mark.parametrize(("method", "path"), [("POST", "/remove_worker?url=http://fleet-2:8000"),
                                              ("GET", "/list_workers"), ("GET", "/metrics")])
def test_the_routers_administration_is_not_served(client, method, path):
    assert ask(client, GATEWAY_KEY, path=path, method=method)[0] == 404
    # Nor is the router reachable past nginx: it listens on fleet-1's 127.0.0.1 only.
    assert client.run("curl -sS --max-time 5 http://fleet-1:30000/list_workers").rc != 0


def test_the_routers_metrics_are_served_to_loopback_and_the_allowed_sources_alone():
    gateway = box("fleet-1")
    assert "vllm_router_worker_health" in gateway.check_output(f"curl -fsS {ROUTER_METRICS}")
    # fleet-1's own LAN address is neither loopback nor in gateway_metrics_sources: nginx refuses it, whether or
    # not ufw runs (ufw lets a host reach itself, so only nginx stands here).
    assert gateway.check_output("curl -sS -o /dev/null -w '%{http_code}' http://fleet-1:29000/metrics") == "403"
    # The router's own metrics listener is on 127.0.0.1 alone.
    listeners = gateway.check_output("ss -Htln")
    assert "127.0.0.1:31000 " in listeners and "0.0.0.0:31000" not in listeners and "*:31000" not in listeners


def test_the_router_runs_from_its_wheel_in_a_hardened_unit():
    gateway = box("fleet-1")
    unit = gateway.service("sparkfleet-router@qwen3-5-35b")
    assert unit.is_running and unit.is_enabled
    props = gateway.check_output(
        "systemctl show sparkfleet-router@qwen3-5-35b -p DynamicUser -p ProtectSystem -p NoNewPrivileges -p ExecStart")
    assert "DynamicUser=yes" in props and "ProtectSystem=strict" in props and "NoNewPrivileges=yes" in props
    assert "/opt/sparkfleet/gateway-venv/bin/vllm-router" in props
    assert gateway.check_output("/opt/sparkfleet/gateway-venv/bin/pip show vllm-router").count("Version: 0.1.17") == 1


def test_a_stopped_box_is_ejected_and_the_endpoint_keeps_answering(client):
    """fleet-3's container is stopped: requests still succeed (the router retries on another
    box), its health checks take it out of rotation, and once started again it is put back."""
    box("fleet-3").check_output("docker stop vllm")
    try:
        stopped = time.monotonic()
        statuses = [ask(client, GATEWAY_KEY, prompt=f"while fleet-3 is down {i}")[0] for i in range(9)]
        assert statuses == [200] * 9
        while router_metric("vllm_router_worker_health", "fleet-3") != 0:
            assert time.monotonic() - stopped < 60, "fleet-3 was never taken out of rotation"
            time.sleep(0.5)
        before = served("fleet-1") + served("fleet-2")
        assert [ask(client, GATEWAY_KEY, prompt=f"after the ejection {i}")[0] for i in range(4)] == [200] * 4
        assert served("fleet-1") + served("fleet-2") - before == 4
        # The endpoint stays healthy for a load balancer in front of it while two of three boxes serve, and says so.
        status, headers, body = ask(client, None, path="/health", method="GET")
        assert status == 200, headers + body
        assert {k: json.loads(body).get(k) for k in ("status", "healthy_workers", "total_workers")} == {
            "status": "ready", "healthy_workers": 2, "total_workers": 3}
        # The role's own wait asks that /health: a fleet with one box down is provisioned. Its output (a task
        # that failed or not) shows no key.
        result = run_playbook(GATEWAY_PLAYBOOK)
        assert result.returncode == 0, result.output
        assert KEY not in result.output and GATEWAY_KEY not in result.output
    finally:
        box("fleet-3").check_output("docker start vllm")
    started = time.monotonic()
    while router_metric("vllm_router_worker_health", "fleet-3") != 1:
        assert time.monotonic() - started < 120, "fleet-3 was never put back into rotation"
        time.sleep(0.5)
    # Healthy again is not yet routed to again: the requests the router sent fleet-3 while it was down
    # opened its circuit breaker, which lets a trial request through only once gateway_cb_timeout (15 s)
    # has passed since it opened, and closes after gateway_cb_success_threshold (2) of them succeed. On a
    # loaded machine that can be after the health checks have passed: every request must still succeed,
    # and fleet-3 must get one within the breaker's timeout and a margin.
    before, asked = served("fleet-3"), 0
    while served("fleet-3") == before:
        assert time.monotonic() - started < 120 + 15 + 30, f"fleet-3 served none of {asked} requests since it came back"
        assert ask(client, GATEWAY_KEY, prompt=f"fleet-3 is back {asked}")[0] == 200
        asked += 1
        time.sleep(0.5)


def router_process() -> tuple[str, str]:
    """(PID, its settings file) of the router of the scenario's model. Its own command line and environment are
    not readable: vllm-router writes its process title (vllm::router) over both."""
    pid = box("fleet-1").check_output("systemctl show -p MainPID --value sparkfleet-router@qwen3-5-35b")
    return pid, box("fleet-1").check_output("cat /etc/sparkfleet-gateway/qwen3-5-35b.env") + " "


def test_gateway_changes_under_load_fail_no_request():
    """A box dropped from the gateway's backends, added back, and a router setting changed and changed back, each
    a run of playbooks/gateway.yml while clients on fleet-2 send requests through the gateway: no request fails.
    The boxes change through the running router's API (no restart); a setting restarts the router while its
    standby serves."""
    pid, _args = router_process()
    with gateway_load() as load:
        dropped = run_playbook(GATEWAY_PLAYBOOK, {"gateway_serving_hosts": ["fleet-1", "fleet-2"]})
        assert dropped.returncode == 0, dropped.output[-3000:]
        assert sorted(routed()) == ["http://fleet-1:8000", "http://fleet-2:8000"]
        added = run_playbook(GATEWAY_PLAYBOOK)
        assert added.returncode == 0, added.output[-3000:]
        assert sorted(routed()) == [f"http://{name}:8000" for name in BOXES]
        assert router_process()[0] == pid, "a change of the backends restarted the router"
        changed = run_playbook(GATEWAY_PLAYBOOK, {"gateway_health_check_interval": 4})
        assert changed.returncode == 0, changed.output[-3000:]
        new_pid, args = router_process()
        assert new_pid != pid and "--health-check-interval-secs 4 " in args
        back = run_playbook(GATEWAY_PLAYBOOK)
        assert back.returncode == 0, back.output[-3000:]
        # The standby served only while the router restarted.
        standby = box("fleet-1").run("systemctl is-active sparkfleet-router-standby@qwen3-5-35b")
        assert standby.stdout.strip() != "active"
    assert load["failed"] == [] and load["ok"] > 0, load["failed"][:5]
    print(f"gateway changes under load: {load['ok']} requests answered, none failed")


def test_site_refuses_bad_gateway_settings_before_anything_changes():
    """The check play's gateway play refuses them on its every host, which ends the run: no box
    is provisioned with a gateway that would then be refused. (One case here, each a run of the
    check play; the others are the same path: tests/unit/plugins/plugin_utils/test_gateway.py.)"""
    words = "gateway_api_key is the boxes' own vllm_api_key (fleet-1, fleet-2, fleet-3)"
    result = run_playbook(SITE, {"gateway_api_key": KEY})
    # Failed results go to stderr where Molecule's environment sets ANSIBLE_DISPLAY_FAILED_STDERR.
    assert result.returncode != 0 and words in result.output
    assert "PLAY [Provision DGX Spark inference servers]" not in result.stdout
    assert recap_changed(result.stdout) == 0


def test_the_gateways_port_is_open_in_ufw_as_the_firewall_roles_rule_for_the_gateway():
    """The gateway publishes its ports through the firewall role (tasks_from: publish): the rule carries the
    owner's mark, and no rule of the gateway's own old mark is left."""
    port = GATEWAY.rsplit(":", 1)[1]
    status = box("fleet-1").check_output("ufw status")
    assert "Status: active" in status
    mark = rf"# sparkfleet\.serving\.firewall gateway: API allow {port}/tcp from any"
    assert re.search(rf"^{port}/tcp +ALLOW +Anywhere +{mark}$", status, re.M), status
    assert "sparkfleet gateway:" not in status
