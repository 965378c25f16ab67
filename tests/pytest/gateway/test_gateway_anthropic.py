"""Anthropic's Messages API through the gateway, with Anthropic's official Python SDK (`anthropic`).

The real parts: the gateway role's own nginx site (roles/gateway/templates/nginx-site.conf.j2, rendered by
ansible-playbook with the role's defaults, vars and route-planning filter from an inventory of two boxes)
run by the real nginx, in front of two vLLM stand-ins (tests/testbed/vllm-standin) that hold the boxes' key.
vllm-router is not started: nginx passes /v1/messages to the boxes itself (the role README's "Which paths
go where"); the OpenAI routes through the router are the fleet scenario's (molecule/fleet/tests/test_gateway.py).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "gateway"
STANDIN = ROOT / "tests" / "testbed" / "vllm-standin" / "vllm"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
SERVED = "qwen3.5-35b"
BOX_KEY = "sk-box-key-0123"
GATEWAY_KEY = "sk-gateway-key-4567"
FLAGS = ["--served-model-name", SERVED, "--max-model-len", "16384", "--gpu-memory-utilization", "0.75",
         "--enforce-eager", "--reasoning-parser", "qwen3", "--enable-auto-tool-choice",
         "--tool-call-parser", "qwen3_coder", "--api-key", BOX_KEY]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited: {proc.stdout.read() if proc.stdout else ''}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{what} did not answer at {url}")


def start_box(root: Path, name: str) -> tuple[subprocess.Popen, int]:
    model = root / name
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
        "quantization_config": {"quant_method": "fp8"}}))
    (model / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 64)
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("VLLM_")},
           "VLLM_STANDIN_STARTUP_SECONDS": "0.2", "VLLM_STANDIN_SHM_MIN_BYTES": "0",
           "VLLM_STANDIN_READY_FILE": os.devnull, "VLLM_STANDIN_DECODE_TOKENS_PER_SECOND": "0",
           "VLLM_STANDIN_PREFILL_TOKENS_PER_SECOND": "0"}
    proc = subprocess.Popen([sys.executable, str(STANDIN), "serve", str(model), "--host", "127.0.0.1",
                             "--port", str(port), *FLAGS], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    return proc, port


def render_site(root: Path, box_ports: list[int], port: int) -> Path:
    """The role's nginx site for two boxes, as the role writes it (its defaults, vars, plan and template)."""
    inventory = {"all": {"hosts": {"localhost": {"ansible_connection": "local",
                                                 "ansible_python_interpreter": sys.executable}}},
                 "spark": {"hosts": {f"box-{i}": {"ansible_host": "127.0.0.1", "vllm_api_key": BOX_KEY,
                                                  "vllm_deployment": {"served_model_name": SERVED, "port": p}}
                                     for i, p in enumerate(box_ports)}}}
    (root / "inventory.json").write_text(json.dumps(inventory))
    site = root / "site.conf"
    play = [{"hosts": "localhost", "gather_facts": False,
             # The role's defaults, then this gateway's settings above them, then the role's own vars.
             "vars_files": [str(ROLE / "defaults" / "main.yml"), str(root / "settings.json"),
                            str(ROLE / "vars" / "main.yml")],
             "vars": {"gateway_api_key": GATEWAY_KEY, "gateway_bind_address": "127.0.0.1", "gateway_port": port,
                      "gateway_router_port": free_port(), "gateway_metrics_address": "127.0.0.1",
                      "gateway_metrics_port": free_port(), "gateway_router_metrics_port": free_port()},
             "tasks": [{"ansible.builtin.assert": {"that": "__gateway_plan.errors | length == 0",
                                                   "fail_msg": "{{ __gateway_plan.errors }}"}},
                       {"ansible.builtin.template": {"src": str(ROLE / "templates" / "nginx-site.conf.j2"),
                                                     "dest": str(site), "mode": "0600"}}]}]
    (root / "settings.json").write_text(json.dumps(play[0].pop("vars")))
    (root / "play.yml").write_text(json.dumps(play))
    result = subprocess.run(["ansible-playbook", "-i", str(root / "inventory.json"), str(root / "play.yml")],
                            capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return site


def nginx_conf(root: Path, site: Path) -> Path:
    temp = root / "nginx-temp"
    temp.mkdir(mode=0o777)
    temp.chmod(0o777)  # nginx's workers run as nobody when it starts as root
    conf = root / "nginx.conf"
    conf.write_text(f"""daemon off;
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    include {site};
}}
""")
    return conf


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("gateway")
    root.chmod(0o755)
    boxes = [start_box(root, f"model-{i}") for i in range(2)]
    procs = [proc for proc, _port in boxes]
    try:
        for proc, port in boxes:
            wait_http(f"http://127.0.0.1:{port}/health", proc, "a vLLM stand-in")
        port = free_port()
        conf = nginx_conf(root, render_site(root, [p for _proc, p in boxes], port))
        check = subprocess.run([NGINX, "-t", "-q", "-p", str(root), "-c", str(conf)], capture_output=True,
                               text=True, check=False)
        assert check.returncode == 0, check.stderr
        nginx = subprocess.Popen([NGINX, "-p", str(root), "-c", str(conf)], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
        procs.append(nginx)
        wait_http(f"http://127.0.0.1:{port}/v1/models", nginx, "nginx")
        yield f"http://127.0.0.1:{port}"
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


def client(base: str, **auth: object) -> anthropic.Anthropic:
    """The SDK with exactly the credentials given (none from the environment), no retries."""
    options: dict = {"api_key": None, "auth_token": None, "max_retries": 0, "timeout": 20}
    options.update(auth)
    return anthropic.Anthropic(base_url=base, **options)


def raw(base: str, path: str, body: dict, headers: dict[str, str]) -> tuple[int, dict]:
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


ASK = {"model": SERVED, "max_tokens": 64, "messages": [{"role": "user", "content": "hello from the gateway"}]}


# The SDK sends its api_key and auth_token as Authorization: Bearer (anthropic 2.17.0, _client.py
# _api_key_auth); x-api-key, the header of Anthropic's API reference and of tools that speak it, is sent here
# as a default header.
@pytest.mark.parametrize("auth", [{"default_headers": {"x-api-key": GATEWAY_KEY}}, {"api_key": GATEWAY_KEY},
                                  {"auth_token": GATEWAY_KEY}],
                         ids=["x-api-key", "api_key", "auth_token"])
def test_the_sdk_gets_an_answer_through_the_gateway(gateway: str, auth: dict) -> None:
    message = client(gateway, **auth).messages.create(**ASK)
    assert message.type == "message" and message.role == "assistant"
    assert message.model == SERVED
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[1].text == "Stand-in vLLM reply: you said hello from the gateway"
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (4, 9)


def test_the_sdk_streams_through_the_gateway(gateway: str) -> None:
    sdk = client(gateway, default_headers={"x-api-key": GATEWAY_KEY})
    with sdk.messages.stream(**{**ASK, "max_tokens": 5}) as stream:
        events = [event.type for event in stream]
        text = stream.get_final_text()
        final = stream.get_final_message()
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert events.count("content_block_start") == events.count("content_block_stop") == 2
    assert text == "Stand-in vLLM reply: you said"
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 5


def test_the_sdk_counts_tokens_and_calls_tools_through_the_gateway(gateway: str) -> None:
    sdk = client(gateway, default_headers={"x-api-key": GATEWAY_KEY})
    count = sdk.messages.count_tokens(model=SERVED, system="be brief", messages=ASK["messages"])
    assert count.input_tokens == 6
    message = sdk.messages.create(**ASK, tools=[{"name": "get_weather", "input_schema": {"type": "object"}}])
    assert message.stop_reason == "tool_use"
    assert [(b.type, getattr(b, "name", None)) for b in message.content][-1] == ("tool_use", "get_weather")


@pytest.mark.parametrize("auth", [{}, {"default_headers": {"x-api-key": "sk-wrong"}},
                                  {"default_headers": {"x-api-key": BOX_KEY}},
                                  {"default_headers": {"x-api-key": GATEWAY_KEY.upper()}},
                                  {"api_key": GATEWAY_KEY, "default_headers": {"x-api-key": "sk-wrong"}},
                                  {"api_key": "sk-wrong", "default_headers": {"x-api-key": GATEWAY_KEY}}],
                         ids=["no key", "a wrong key", "the boxes' key", "the key in upper case",
                              "Bearer right, x-api-key wrong", "Bearer wrong, x-api-key right"])
def test_the_sdk_is_refused_without_the_gateways_key(gateway: str, auth: dict) -> None:
    sdk = client(gateway, **auth)
    if not auth:
        # The SDK itself insists on a credential; the request without any goes out raw.
        status, body = raw(gateway, "/v1/messages", ASK, {})
        assert status == 401 and body["error"]["type"] == "authentication_error"
        return
    with pytest.raises(anthropic.AuthenticationError) as refused:
        sdk.messages.create(**ASK)
    # nginx's own answer, in Anthropic's shape (a box's 401 reads {"error": "Unauthorized"}).
    assert refused.value.status_code == 401
    assert refused.value.body["type"] == "error"
    assert refused.value.body["error"]["type"] == "authentication_error"
    assert refused.value.response.headers["www-authenticate"] == 'Bearer realm="sparkfleet gateway"'


def test_vllms_refusals_reach_the_sdk(gateway: str) -> None:
    sdk = client(gateway, default_headers={"x-api-key": GATEWAY_KEY})
    with pytest.raises(anthropic.NotFoundError) as missing:
        sdk.messages.create(**{**ASK, "model": "claude-sonnet-4"})
    assert missing.value.body["error"]["message"] == "The model `claude-sonnet-4` does not exist."
    # max_tokens is required (the SDK insists too, so the request goes out raw): FastAPI's 400, OpenAI's shape.
    status, body = raw(gateway, "/v1/messages", {k: v for k, v in ASK.items() if k != "max_tokens"},
                       {"x-api-key": GATEWAY_KEY})
    assert status == 400 and body["error"]["type"] == "Bad Request"
    assert "'loc': ('body', 'max_tokens'), 'msg': 'Field required'" in body["error"]["message"] \
        or "'loc': 'body.max_tokens', 'msg': 'Field required'" in body["error"]["message"]
