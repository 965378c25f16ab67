"""The stand-in's Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) against vLLM's source.

The pinned release's answers over HTTP from the stand-in's process; vLLM 0.34.0's (where it differs from
0.19.1) from the stand-in's handler run in this process with its release set to 0.34.0. The expected texts
and shapes are read from vllm/entrypoints/anthropic/{api_router,protocol,serving}.py of each release
(file:line in the stand-in's comments).
"""

from __future__ import annotations

import http.client
import importlib.machinery
import importlib.util
import json
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from types import ModuleType

import anthropic
import pytest
from test_vllm_standin import KEY, SERVED, SITE, STANDIN, Server, make_model

ASK = {"model": SERVED, "max_tokens": 64, "messages": [{"role": "user", "content": "hello there box"}]}
REPLY = "Stand-in vLLM reply: you said hello there box"


class Box:
    """POSTs to a stand-in, the body as sent and the answer parsed."""

    def __init__(self, port: int) -> None:
        self.port = port

    def post(self, path: str, body: object, headers: dict[str, str] | None = None) -> tuple[int, object]:
        status, text = self.post_text(path, body, headers)
        return status, json.loads(text)

    def post_text(self, path: str, body: object, headers: dict[str, str] | None = None) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        sent = {"content-type": "application/json", "authorization": f"Bearer {KEY}"}
        sent.update(headers or {})
        conn.request("POST", path, json.dumps(body), {k: v for k, v in sent.items() if v is not None})
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        return resp.status, text


def events(text: str) -> list[tuple[str, dict]]:
    """An SSE body as (event, data) pairs; every event has both lines (wrap_data_with_event)."""
    out = []
    for chunk in text.strip().split("\n\n"):
        name, data = chunk.split("\n")
        assert name.startswith("event: ") and data.startswith("data: "), chunk
        out.append((name[7:], json.loads(data[6:])))
    return out


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    model = make_model(tmp_path_factory.mktemp("anthropic"))
    srv = Server(model, ["--api-key", KEY], {"VLLM_STANDIN_DECODE_TOKENS_PER_SECOND": "0"})
    srv.wait()
    yield Box(srv.port)
    srv.stop()


# --- the pinned release (0.19.1), over HTTP ---------------------------------------------------------

def test_a_message_as_vllm_answers_it(box: Box):
    status, body = box.post("/v1/messages", ASK)
    assert status == 200
    # exclude_none (api_router.py:86-89): no stop_sequence, no cache counts; the chat completion's id.
    assert set(body) == {"id", "type", "role", "content", "model", "stop_reason", "usage"}
    assert body["id"].startswith("chatcmpl-")
    expected = ("message", "assistant", SERVED, "end_turn")
    assert (body["type"], body["role"], body["model"], body["stop_reason"]) == expected
    thinking, text = body["content"]
    assert thinking["type"] == "thinking" and len(thinking["signature"]) == 32
    assert text == {"type": "text", "text": REPLY}
    assert body["usage"] == {"input_tokens": 3, "output_tokens": 8}


def test_a_streamed_message_is_vllms_event_sequence(box: Box):
    status, text = box.post_text("/v1/messages", {**ASK, "max_tokens": 3, "stream": True})
    assert status == 200
    seq = events(text)
    assert [name for name, _data in seq] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_delta",
        "content_block_stop", "message_delta", "message_stop"]
    assert all(data["type"] == name for name, data in seq)
    start = seq[0][1]["message"]
    # 0.19.1 builds it without type and role and dumps it with exclude_unset (serving.py:588-604).
    assert "type" not in start and "role" not in start
    assert start["content"] == [] and start["usage"] == {"input_tokens": 3, "output_tokens": 0}
    assert seq[1][1] == {"type": "content_block_start", "content_block": {"type": "thinking", "thinking": ""},
                         "index": 0}
    assert seq[3][1]["delta"]["type"] == "signature_delta"
    assert "".join(d["delta"]["text"] for n, d in seq[6:9]) == "Stand-in vLLM reply:"
    assert seq[10][1] == {"type": "message_delta", "delta": {"stop_reason": "max_tokens"},
                          "usage": {"input_tokens": 3, "output_tokens": 3}}
    assert seq[-1][1] == {"type": "message_stop"}


def test_count_tokens(box: Box):
    status, body = box.post("/v1/messages/count_tokens", {"model": SERVED, "system": "be brief",
                                                          "messages": ASK["messages"]})
    assert (status, body) == (200, {"input_tokens": 5, "context_management": {"original_input_tokens": 5}})


def test_the_key_is_read_from_authorization_only(box: Box):
    """vLLM's AuthenticationMiddleware reads `Authorization: Bearer` alone: Anthropic's x-api-key is no key."""
    assert box.post("/v1/messages", ASK, {"authorization": None, "x-api-key": KEY}) == (401, {"error": "Unauthorized"})
    assert box.post("/v1/messages/count_tokens", ASK, {"authorization": None}) == (401, {"error": "Unauthorized"})


def test_a_wrong_model_is_vllms_404_in_anthropics_shape(box: Box):
    assert box.post("/v1/messages", {**ASK, "model": "claude"}) == (404, {"type": "error", "error": {
        "type": "NotFoundError", "message": "The model `claude` does not exist."}})


def fastapi_text(errors: list[dict], line: int, func: str, path: str) -> str:
    listed = "".join(f"  {e}\n" for e in errors)
    head = f"{len(errors)} validation error{'s' if len(errors) != 1 else ''}:\n{listed}"
    text = f'{head}\n  File "{SITE}vllm/entrypoints/utils.py", line {line}, in {func}\n    POST {path}'
    return f"{text} {errors}"


def test_validation_refusals_are_fastapis_in_openais_shape(box: Box):
    without = {k: v for k, v in ASK.items() if k != "max_tokens"}
    status, body = box.post("/v1/messages", without)
    missing = {"type": "missing", "loc": ("body", "max_tokens"), "msg": "Field required", "input": without}
    assert (status, body) == (400, {"error": {"message": fastapi_text([missing], 48, "create_messages", "/v1/messages"),
                                              "type": "Bad Request", "param": None, "code": 400}})
    status, body = box.post("/v1/messages", {**ASK, "max_tokens": 0})
    assert status == 400 and "'msg': 'Value error, max_tokens must be positive', 'input': 0" in body["error"]["message"]
    # 0.19.1's messages are user or assistant (protocol.py:62-66).
    status, body = box.post("/v1/messages", {**ASK, "messages": [{"role": "system", "content": "x"}]})
    assert status == 400 and "'loc': ('body', 'messages', 0, 'role')" in body["error"]["message"]
    assert "Input should be 'user' or 'assistant'" in body["error"]["message"]
    status, body = box.post("/v1/messages/count_tokens", {"messages": ASK["messages"]})
    assert status == 400 and "line 94, in count_tokens" in body["error"]["message"]


def test_too_long_a_request_is_refused_by_the_chat_layer(box: Box):
    status, body = box.post("/v1/messages", {**ASK, "max_tokens": 20000})
    assert status == 400 and body["type"] == "error" and body["error"]["type"] == "BadRequestError"
    assert "cannot be greater than max_model_len" in body["error"]["message"]


def test_tools_give_a_tool_use_block(box: Box):
    status, body = box.post("/v1/messages", {**ASK, "tools": [{"name": "get_weather", "input_schema": {}}]})
    assert status == 200 and body["stop_reason"] == "tool_use"
    use = body["content"][-1]
    assert (use["type"], use["name"], use["input"]) == ("tool_use", "get_weather", {"query": "hello there box"})


def test_the_official_sdk_reads_the_stream(box: Box):
    """Anthropic's SDK with the box's key as a bearer token (vLLM reads no x-api-key)."""
    sdk = anthropic.Anthropic(base_url=f"http://127.0.0.1:{box.port}", api_key=None, auth_token=KEY, max_retries=0)
    with sdk.messages.stream(**ASK) as stream:
        assert stream.get_final_text() == REPLY
        final = stream.get_final_message()
    # 0.19.1's message_start has no type or role, so the SDK's message has none (fixed in 0.34.0).
    assert (final.type, final.role, final.stop_reason) == (None, None, "end_turn")


# --- vLLM 0.34.0, in this process ----------------------------------------------------------------

@pytest.fixture(scope="module")
def standin() -> ModuleType:
    """A module of its own: the release and the handler's settings are set on it below."""
    loader = importlib.machinery.SourceFileLoader("vllm_standin_anthropic", str(STANDIN))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("vllm_standin_anthropic", loader))
    loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def box_0_34(standin: ModuleType) -> Iterator[Box]:
    saved = standin.VERSION
    standin.VERSION = "0.34.0"
    handler = standin.Handler
    saved_cfg = handler.cfg
    handler.cfg = {"served": [SERVED], "model": "/model", "api_keys": [KEY], "started": time.time(),
                   "max_model_len": 16384, "auto_tools": True, "tool_parser": "qwen3_coder",
                   "reasoning_parser": "qwen3", "prefill_s": 0.0, "decode_s": 0.0, "response_role": "assistant",
                   "prompt_embeds": False, "trust_request_chat_template": False, "sampling_defaults": {},
                   "override_max_tokens": None}
    handler.log_message = lambda *_args: None
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield Box(server.server_address[1])
    server.shutdown()
    server.server_close()
    handler.cfg, standin.VERSION = saved_cfg, saved
    del handler.log_message


def test_0_34_streams_message_start_with_type_and_role(box_0_34: Box):
    status, text = box_0_34.post_text("/v1/messages", {**ASK, "max_tokens": 2, "stream": True})
    assert status == 200
    seq = events(text)
    start = seq[0][1]["message"]
    assert (start["type"], start["role"]) == ("message", "assistant")  # serving.py:1112-1129
    assert seq[-2][1]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}  # :1149-1153


def test_0_34_translates_error_types_into_anthropics_vocabulary(box_0_34: Box):
    assert box_0_34.post("/v1/messages", {**ASK, "model": "claude"}) == (404, {"type": "error", "error": {
        "type": "not_found_error", "message": "The model `claude` does not exist."}})
    status, body = box_0_34.post("/v1/messages", {**ASK, "max_tokens": 20000})
    assert status == 400 and body["error"]["type"] == "invalid_request_error"


def test_0_34_words_validation_errors_without_the_route(box_0_34: Box):
    without = {k: v for k, v in ASK.items() if k != "max_tokens"}
    assert box_0_34.post("/v1/messages", without) == (400, {"error": {
        "message": "1 validation error:\n  {'type': 'missing', 'loc': 'body.max_tokens', 'msg': 'Field required', "
                   "'input': '<dict of 2 items>'}", "type": "Bad Request", "param": "body.max_tokens", "code": 400}})
    status, body = box_0_34.post("/v1/messages", {**ASK, "thinking": {"type": "enabled", "budget_tokens": 2048}})
    assert status == 400 and "thinking.budget_tokens must be less than max_tokens" in body["error"]["message"]
    status, body = box_0_34.post("/v1/messages", {**ASK, "max_tokens": 4096,
                                                  "thinking": {"type": "enabled", "budget_tokens": 10}})
    assert status == 400 and body["error"]["param"] == "body.thinking.enabled.budget_tokens"


def test_0_34_takes_system_messages_and_thinking_off(box_0_34: Box):
    messages = [{"role": "system", "content": "be brief"}, *ASK["messages"]]
    status, body = box_0_34.post("/v1/messages", {**ASK, "messages": messages, "thinking": {"type": "disabled"}})
    assert status == 200 and [b["type"] for b in body["content"]] == ["text"]
    assert body["usage"]["input_tokens"] == 5


def test_0_34_counts_a_prompt_longer_than_the_model(box_0_34: Box):
    long = " ".join(["w"] * 17000)
    status, body = box_0_34.post("/v1/messages/count_tokens", {"model": SERVED,
                                                               "messages": [{"role": "user", "content": long}]})
    assert (status, body["input_tokens"]) == (200, 17000)


def test_release_selection(standin: ModuleType):
    assert not standin.anthropic_0_34("0.19.1") and standin.anthropic_0_34("0.34.0")
    assert standin.anthropic_error_type(503, "ServiceUnavailableError", "0.34.0") == "overloaded_error"
    assert standin.anthropic_error_type(501, "NotImplementedError", "0.34.0") == "api_error"
    assert standin.anthropic_error_type(404, "NotFoundError", "0.19.1") == "NotFoundError"
