# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Probes of a starting vLLM server, in the order a client needs them.

1. GET /health answers 200 (the engine is up),
2. GET /v1/models lists the served model name (requests with that name will work),
3. one POST /v1/chat/completions answers (this also warms up the JIT).

Plain HTTP through Ansible's open_url, unit-tested against a local server.
"""

from __future__ import annotations

import json
import time
import urllib.error
from dataclasses import dataclass
from typing import Any

from ansible.module_utils.urls import open_url

STAGES = ("health", "models", "chat")


def _request(url: str, api_key: str, body: dict[str, Any] | None, timeout: float) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"content-type": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    try:
        # No proxies: the server is on this host (a proxy variable would send probes away).
        with open_url(url, data=data, method="POST" if data is not None else "GET", headers=headers,
                      timeout=timeout, use_proxy=False, validate_certs=False) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode("utf-8", "replace")
    except (OSError, ValueError) as err:
        # Connection refused while vLLM loads: not an error, just "not yet".
        return 0, str(err)


def _http_problem(path: str, status: int, text: str) -> str:
    return f"{path}: HTTP {status} {text[:200]}" if status else f"{path}: {text}"


def probe_health(base: str, api_key: str, timeout: float) -> tuple[bool, str]:
    status, text = _request(base + "/health", api_key, None, timeout)
    return status == 200, "/health: 200" if status == 200 else _http_problem("/health", status, text)


def probe_models(base: str, api_key: str, served_model_name: str, timeout: float) -> tuple[bool, str]:
    status, text = _request(base + "/v1/models", api_key, None, timeout)
    if status != 200:
        return False, _http_problem("/v1/models", status, text)
    try:
        names = [m.get("id") for m in json.loads(text).get("data", [])]
    except (ValueError, AttributeError):
        return False, f"/v1/models: not JSON: {text[:200]}"
    if served_model_name not in names:
        return False, f"/v1/models lists {names}, not {served_model_name!r}"
    return True, f"/v1/models lists {served_model_name!r}"


def probe_chat(base: str, api_key: str, served_model_name: str, timeout: float) -> tuple[bool, str]:
    body = {"model": served_model_name, "max_tokens": 16,
            "messages": [{"role": "user", "content": "Reply with the single word OK."}]}
    status, text = _request(base + "/v1/chat/completions", api_key, body, timeout)
    if status != 200:
        return False, _http_problem("/v1/chat/completions", status, text)
    try:
        choices = json.loads(text).get("choices")
    except (ValueError, AttributeError):
        choices = None
    if not choices:
        return False, f"/v1/chat/completions: no choices in {text[:200]}"
    return True, "/v1/chat/completions answered"


CHAT_PROMPT = "Reply with the single word OK."


def streamed_output(choice: object) -> bool:
    """Whether a streamed chunk's choice carries generated output, as `vllm bench serve` counts its first
    token (vllm/benchmarks/lib/endpoint_request_func.py:398, _choice_has_streamed_output, vLLM 0.34.0): text,
    reasoning or a tool call; an empty text without a role (a token that decodes to nothing). The opening
    chunk, which carries the role, is not a token."""
    delta = choice.get("delta") if isinstance(choice, dict) else None
    if not isinstance(delta, dict):
        return False
    if any(delta.get(key) for key in ("content", "reasoning", "reasoning_content", "tool_calls", "function_call")):
        return True
    return delta.get("content") == "" and "role" not in delta


def _read_stream(resp: object, sent: float) -> tuple[bool, str, float | None, str]:
    """Server-sent events of a streamed chat completion -> (passed, what was seen, TTFT, why no TTFT)."""
    ttft: float | None = None
    chunks = 0
    for raw in resp:  # type: ignore[attr-defined]
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue  # blank separators and SSE comments (pings)
        payload = line[len("data:"):].strip()
        if payload == "[DONE]":
            break
        try:
            data = json.loads(payload)
        except ValueError:
            return False, f"/v1/chat/completions: a streamed chunk is not JSON: {payload[:200]}", None, ""
        if isinstance(data, dict) and data.get("error"):
            error = json.dumps(data["error"])[:200]
            return False, f"/v1/chat/completions: the stream ended in an error: {error}", None, ""
        choices = data.get("choices") if isinstance(data, dict) else None
        if choices and streamed_output(choices[0]):
            chunks += 1
            if ttft is None:
                ttft = time.monotonic() - sent
    if not chunks:
        return False, "/v1/chat/completions: the stream carried no token", None, ""
    return True, f"/v1/chat/completions answered ({chunks} streamed chunks)", round(ttft or 0.0, 3), ""


def probe_chat_timed(target: Target) -> tuple[bool, str, float | None, str]:
    """The chat stage, streamed: (passed, what was seen, seconds to the first token or None, why none).
    A server that answers a streamed request with one JSON body passes without a TTFT, and says so."""
    base = target.base_url.rstrip("/")
    body = {"model": target.served_model_name, "max_tokens": 16, "stream": True,
            "messages": [{"role": "user", "content": CHAT_PROMPT}]}
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    if target.api_key:
        headers["authorization"] = f"Bearer {target.api_key}"
    sent = time.monotonic()
    try:
        with open_url(base + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
                      headers=headers, timeout=target.chat_timeout, use_proxy=False, validate_certs=False) as resp:
            if "text/event-stream" in (resp.headers.get("content-type") or ""):
                return _read_stream(resp, sent)
            text = resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return False, _http_problem("/v1/chat/completions", err.code, err.read().decode("utf-8", "replace")), None, ""
    except (OSError, ValueError) as err:
        return False, f"/v1/chat/completions: {err}", None, ""
    try:
        choices = json.loads(text).get("choices")
    except (ValueError, AttributeError):
        choices = None
    if not choices:
        return False, f"/v1/chat/completions: no choices in {text[:200]}", None, ""
    return True, "/v1/chat/completions answered", None, "the server answered the streamed request with one body"


@dataclass(frozen=True)
class Target:
    """The server to probe: base URL without /v1, served name, key and timeouts."""

    base_url: str
    served_model_name: str
    api_key: str = ""
    timeout: float = 2.0
    chat_timeout: float = 120.0


def probe(target: Target, stage: str) -> tuple[bool, str]:
    """Run one stage; return (passed, what was seen)."""
    base = target.base_url.rstrip("/")
    if stage == "health":
        return probe_health(base, target.api_key, target.timeout)
    if stage == "models":
        return probe_models(base, target.api_key, target.served_model_name, target.timeout)
    if stage == "chat":
        return probe_chat(base, target.api_key, target.served_model_name, target.chat_timeout)
    raise ValueError(f"unknown stage {stage!r}; expected one of {STAGES}")


def container_failed(state: dict[str, Any], baseline_restarts: int | None) -> str | None:
    """Why the container is not (or no longer) starting, from `docker inspect` .State; None if fine.

    state is .State plus the top-level RestartCount.
    """
    status = state.get("Status")
    if status in ("exited", "dead"):
        return f"container {status} with code {state.get('ExitCode')}"
    if status == "restarting":
        return f"container is restarting after exit code {state.get('ExitCode')}"
    if state.get("OOMKilled"):
        return "container was killed by the kernel OOM killer"
    if baseline_restarts is not None and state.get("RestartCount", 0) > baseline_restarts:
        return f"container restarted ({state.get('RestartCount')} restarts) after exit code {state.get('ExitCode')}"
    return None
