# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The health probes against a real local HTTP server that answers like vLLM."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_health import (
    Target,
    container_failed,
    probe,
    probe_chat_timed,
    streamed_output,
)

KEY = "k"
# vLLM's chat stream: the role chunk first (sent with the first output), then tokens, then [DONE]. The
# pauses make the first token come 0.3 s after the request, the role chunk at once (not a token).
STREAM = [
    (0.0, ": ping"),
    (0.0, 'data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}'),
    (0.3, 'data: {"choices": [{"index": 0, "delta": {"reasoning": "The user"}}]}'),
    (0.0, 'data: {"choices": [{"index": 0, "delta": {"content": "OK"}}]}'),
    (0.0, 'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}'),
    (0.0, "data: [DONE]"),
]
BROKEN = [(0.0, 'data: {"error": {"message": "EngineDeadError", "code": 500}}'), (0.0, "data: [DONE]")]


class _Handler(BaseHTTPRequestHandler):
    served = "qwen3.5-35b"

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, {})
        elif self.headers.get("authorization") != f"Bearer {KEY}":
            self._send(401, {"error": "Unauthorized"})
        else:
            self._send(200, {"object": "list", "data": [{"id": self.served}]})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        request = json.loads(self.rfile.read(length))
        if request["model"] != self.served:
            self._send(404, {"error": {"message": "The model does not exist."}})
        elif request.get("stream") and self.path == "/stream/v1/chat/completions":
            self._stream(STREAM)
        elif request.get("stream") and self.path == "/broken/v1/chat/completions":
            self._stream(BROKEN)
        else:
            self._send(200, {"choices": [{"message": {"content": "OK"}}]})

    def _stream(self, events: list[tuple[float, str]]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.end_headers()
        for pause, event in events:
            time.sleep(pause)
            self.wfile.write(event.encode() + b"\n\n")
            self.wfile.flush()


@pytest.fixture(scope="module")
def url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize("stage", ["health", "models", "chat"])
def test_stages_pass_on_a_serving_server(url: str, stage: str):
    ok, detail = probe(Target(url, "qwen3.5-35b", api_key=KEY), stage)
    assert ok, detail


def test_models_without_key_fails_with_the_status(url: str):
    ok, detail = probe(Target(url, "qwen3.5-35b"), "models")
    assert not ok
    assert "HTTP 401" in detail


def test_models_must_list_the_served_name(url: str):
    ok, detail = probe(Target(url, "other", api_key=KEY), "models")
    assert not ok
    assert "not 'other'" in detail


def test_chat_with_the_wrong_name_fails(url: str):
    ok, detail = probe(Target(url, "other", api_key=KEY), "chat")
    assert not ok
    assert "HTTP 404" in detail


def test_connection_refused_is_not_yet_not_an_exception():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ok, detail = probe(Target(f"http://127.0.0.1:{port}", "x"), "health")
    assert not ok
    assert "/health" in detail


def test_unknown_stage_is_refused(url: str):
    with pytest.raises(ValueError, match="unknown stage"):
        probe(Target(url, "x"), "ready")


@pytest.mark.parametrize(("state", "baseline", "expected"), [
    ({"Status": "running", "RestartCount": 0}, 0, None),
    ({"Status": "running", "RestartCount": 2, "ExitCode": 1}, 1, "restarted"),
    ({"Status": "exited", "ExitCode": 1}, None, "exited with code 1"),
    ({"Status": "restarting", "ExitCode": 135}, 0, "restarting after exit code 135"),
    ({"Status": "running", "OOMKilled": True}, 0, "OOM killer"),
])
def test_container_failed(state: dict, baseline: int | None, expected: str | None):
    reason = container_failed(state, baseline)
    assert (reason is None) if expected is None else (expected in reason)


def test_the_first_completion_is_streamed_and_its_first_token_timed(url: str):
    ok, detail, ttft, why = probe_chat_timed(Target(url + "/stream", "qwen3.5-35b", api_key=KEY))
    assert ok, detail
    assert 0.25 <= ttft < 2.0
    assert why == ""
    assert "2 streamed chunks" in detail  # the role chunk and the finish are no tokens


def test_a_body_instead_of_a_stream_passes_and_says_why_there_is_no_ttft(url: str):
    ok, _detail, ttft, why = probe_chat_timed(Target(url, "qwen3.5-35b", api_key=KEY))
    assert ok
    assert ttft is None
    assert "one body" in why


def test_a_stream_that_ends_in_an_error_fails(url: str):
    ok, detail, ttft, _why = probe_chat_timed(Target(url + "/broken", "qwen3.5-35b", api_key=KEY))
    assert not ok
    assert "EngineDeadError" in detail
    assert ttft is None


def test_the_streamed_chat_with_the_wrong_name_fails_with_the_status(url: str):
    ok, detail, _ttft, _why = probe_chat_timed(Target(url + "/stream", "other", api_key=KEY))
    assert not ok
    assert "HTTP 404" in detail


@pytest.mark.parametrize(("delta", "token"), [
    ({"role": "assistant", "content": ""}, False), ({"content": "OK"}, True), ({"reasoning": "x"}, True),
    ({"reasoning_content": "x"}, True), ({"tool_calls": [{"index": 0}]}, True), ({"content": ""}, True),
    ({}, False), (None, False),
])
def test_what_counts_as_the_first_token_as_vllm_bench_serve_counts_it(delta: object, token: bool):
    assert streamed_output({"delta": delta}) is token
