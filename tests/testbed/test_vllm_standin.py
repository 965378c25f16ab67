"""The vLLM stand-in must parse vLLM's command line, fail like vLLM and speak its API."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import ModuleType

import pytest

STANDIN = Path(__file__).resolve().parent / "vllm-standin" / "vllm"
SERVED = "qwen3.5-35b"
KEY = "sk-test-key"
STABLE_FLAGS = [
    "--served-model-name", SERVED, "--dtype", "auto", "--max-model-len", "16384",
    "--gpu-memory-utilization", "0.75", "--max-num-seqs", "16", "--max-num-batched-tokens", "16384",
    "--enforce-eager", "--enable-prefix-caching", "--reasoning-parser", "qwen3",
    "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder",
    "--limit-mm-per-prompt", '{"image":0,"video":0}',
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_model(root: Path, arch: str = "Qwen3_5MoeForConditionalGeneration", quant: str = "fp8") -> Path:
    model = root / "model"
    model.mkdir()
    config = {"architectures": [arch], "model_type": "qwen3_5_moe", "quantization_config": {"quant_method": quant}}
    (model / "config.json").write_text(json.dumps(config))
    (model / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 64)
    return model


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}


def run(args: list[str], env: dict[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    full_env = {**clean_env(), "VLLM_STANDIN_STARTUP_SECONDS": "0.2", "VLLM_STANDIN_SHM_MIN_BYTES": "0",
                "VLLM_STANDIN_READY_FILE": os.devnull, **(env or {})}
    return subprocess.run([sys.executable, str(STANDIN), "serve", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, check=False)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return make_model(tmp_path)


class Server:
    def __init__(self, model: Path, extra: list[str], env: dict[str, str]) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        full_env = {**clean_env(), "VLLM_STANDIN_STARTUP_SECONDS": "0.5", "VLLM_STANDIN_SHM_MIN_BYTES": "0",
                    "VLLM_STANDIN_READY_FILE": os.devnull, **env}
        self.proc = subprocess.Popen(
            [sys.executable, str(STANDIN), "serve", str(model), "--host", "127.0.0.1", "--port", str(self.port),
             *STABLE_FLAGS, *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env)

    def wait(self) -> float:
        begin = time.monotonic()
        while time.monotonic() - begin < 20:
            if self.proc.poll() is not None:
                raise AssertionError(self.proc.stdout.read())
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=1) as resp:
                    if resp.status == 200:
                        return time.monotonic() - begin
            except OSError:
                time.sleep(0.05)
        raise AssertionError("stand-in did not become healthy")

    def request(self, path: str, body: dict | None = None, key: str | None = KEY) -> tuple[int, str]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method="POST" if data else "GET")
        req.add_header("content-type", "application/json")
        if key:
            req.add_header("authorization", f"Bearer {key}")
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(timeout=10)


@pytest.fixture
def server(model: Path):
    srv = Server(model, ["--api-key", KEY], {})
    srv.wait()
    yield srv
    srv.stop()


# --- the command line ---------------------------------------------------------------------

def test_unknown_flag_is_rejected_like_argparse(model: Path):
    result = run([str(model), *STABLE_FLAGS, "--gpu-memory-utilisation", "0.7"])
    assert result.returncode == 2
    assert "vllm serve: error: unrecognized arguments: --gpu-memory-utilisation 0.7" in result.stderr


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--dtype", "fp7", "argument --dtype: invalid choice: 'fp7'"),
    ("--gpu-memory-utilization", "most", "argument --gpu-memory-utilization: invalid float value: 'most'"),
    ("--max-num-seqs", "16.5", "argument --max-num-seqs: invalid int value: '16.5'"),
    ("--kv-cache-dtype", "int4", "argument --kv-cache-dtype: invalid choice: 'int4'"),
    ("--tool-call-parser", "qwen4", "argument --tool-call-parser: invalid choice: 'qwen4'"),
    ("--limit-mm-per-prompt", "{image:0}", "argument --limit-mm-per-prompt: invalid JSON"),
])
def test_invalid_values_are_rejected(model: Path, flag: str, value: str, message: str):
    result = run([str(model), flag, value])
    assert result.returncode == 2
    assert message in result.stderr


def test_underscore_spelling_is_accepted_like_flexible_argument_parser(model: Path):
    result = run([str(model), "--max_model_len", "99999999", "--enforce-eager"])
    # Parsed fine, then refused by the KV-cache check: proves the value reached the engine.
    assert result.returncode == 1
    assert "max seq len (99999999)" in result.stdout


def test_only_serve_is_implemented():
    result = subprocess.run([sys.executable, str(STANDIN), "bench"], capture_output=True, text=True, check=False)
    assert result.returncode == 2


# --- failures ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("extra", "expected"), [
    ([], None),  # control: the stable flags start
    (["--no-enforce-eager"], "torch.OutOfMemoryError: CUDA out of memory"),
    (["--gpu-memory-utilization", "0.95"], "CUDA out of memory"),
    (["--kv-cache-dtype", "fp8", "--max-num-batched-tokens", "2048"],
     "block_size (2096) must be <= max_num_batched_tokens (2048)"),
    (["--max-model-len", "65536"], "the estimated maximum model length is 41000"),
])
def test_failures_follow_from_the_arguments(model: Path, extra: list[str], expected: str | None):
    if expected is None:
        srv = Server(model, extra, {})
        srv.wait()
        assert srv.stop() == 0
        return
    result = run([str(model), *STABLE_FLAGS, *extra])
    assert result.returncode != 0
    assert expected in result.stdout


def test_missing_model_files(tmp_path: Path):
    result = run([str(tmp_path), *STABLE_FLAGS])
    assert result.returncode == 1
    assert f"Invalid repository ID or local directory specified: '{tmp_path}'" in result.stdout


def test_nvfp4_checkpoint_crashes(tmp_path: Path):
    model = make_model(tmp_path, quant="modelopt_fp4")
    result = run([str(model), *STABLE_FLAGS])
    assert "cudaErrorIllegalInstruction" in result.stdout
    assert result.returncode == 1


def test_older_image_flavour_lacks_qwen3_5(model: Path):
    result = run([str(model), *STABLE_FLAGS], env={"VLLM_STANDIN_FLAVOR": "ngc-26.01"})
    assert "Model architectures ['Qwen3_5MoeForConditionalGeneration'] are not supported" in result.stdout


def test_small_shm_is_a_bus_error(model: Path):
    result = run([str(model), *STABLE_FLAGS], env={"VLLM_STANDIN_SHM_MIN_BYTES": str(1 << 60)})
    assert result.returncode == 135
    assert "Bus error" in result.stdout


def test_port_in_use_is_detected_for_real(model: Path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = run([str(model), *STABLE_FLAGS, "--host", "127.0.0.1", "--port", str(port)])
    assert result.returncode == 1
    assert "OSError: [Errno 98] Address already in use" in result.stdout


def test_marker_file_forces_a_failure(model: Path):
    (model / ".standin-fail").write_text("oom\n")
    result = run([str(model), *STABLE_FLAGS])
    assert "CUDA out of memory" in result.stdout


# --- the API ------------------------------------------------------------------------------------

def test_health_and_metrics_need_no_key(server: Server):
    assert server.request("/health", key=None)[0] == 200
    status, text = server.request("/metrics", key=None)
    assert status == 200
    for name in ("vllm:num_requests_running", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                 "vllm:time_to_first_token_seconds_bucket"):
        assert name in text


def test_v1_needs_the_key(server: Server):
    assert server.request("/v1/models", key=None) == (401, '{"error": "Unauthorized"}')
    assert server.request("/v1/models", key="wrong")[0] == 401
    status, text = server.request("/v1/models")
    assert status == 200
    assert [m["id"] for m in json.loads(text)["data"]] == [SERVED]


def test_key_from_environment(model: Path):
    srv = Server(model, [], {"VLLM_API_KEY": "from-env"})
    try:
        srv.wait()
        assert srv.request("/v1/models", key=None)[0] == 401
        assert srv.request("/v1/models", key="from-env")[0] == 200
    finally:
        srv.stop()


def test_wrong_model_name_is_404(server: Server):
    request = {"model": "Qwen/Qwen3.5-35B-A3B-FP8", "messages": [{"role": "user", "content": "hi"}]}
    status, text = server.request("/v1/chat/completions", request)
    assert status == 404
    assert json.loads(text)["error"]["type"] == "NotFoundError"


def test_chat_completion_and_counters(server: Server):
    request = {"model": SERVED, "max_tokens": 50, "messages": [{"role": "user", "content": "ping"}]}
    status, text = server.request("/v1/chat/completions", request)
    assert status == 200
    body = json.loads(text)
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"].endswith("ping")
    assert body["usage"]["completion_tokens"] > 0
    metrics = server.request("/metrics")[1]
    generated = float(body["usage"]["completion_tokens"])
    assert f'vllm:generation_tokens_total{{engine="0",model_name="{SERVED}"}} {generated}' in metrics


def test_tool_call_in_openai_shape(server: Server):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    request = {"model": SERVED, "tools": tools, "tool_choice": "auto",
               "messages": [{"role": "user", "content": "weather?"}]}
    status, text = server.request("/v1/chat/completions", request)
    assert status == 200
    choice = json.loads(text)["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    json.loads(call["function"]["arguments"])


def test_streaming_is_server_sent_events(server: Server):
    req = urllib.request.Request(server.base + "/v1/chat/completions", method="POST", data=json.dumps({
        "model": SERVED, "stream": True, "messages": [{"role": "user", "content": "stream me"}]}).encode())
    req.add_header("authorization", f"Bearer {KEY}")
    req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = [line[6:] for line in resp.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text.endswith("stream me")
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_completions(server: Server):
    status, text = server.request("/v1/completions", {"model": SERVED, "prompt": "once upon", "max_tokens": 3})
    assert status == 200
    body = json.loads(text)
    assert body["object"] == "text_completion"
    assert body["choices"][0]["finish_reason"] == "length"


def test_not_listening_while_loading(model: Path):
    srv = Server(model, [], {"VLLM_STANDIN_STARTUP_SECONDS": "3"})
    try:
        time.sleep(0.5)
        with pytest.raises(OSError):
            urllib.request.urlopen(srv.base + "/health", timeout=1)
        assert srv.wait() > 1
    finally:
        assert srv.stop() == 0


# --- the stand-in's failures are what the role's diagnosis recognises -----------------------

def load_diagnosis() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "vllm_diagnosis.py"
    spec = importlib.util.spec_from_file_location("vllm_diagnosis", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["vllm_diagnosis"] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["oom", "mamba-block-size", "unsupported-architecture", "nvfp4-illegal-instruction",
                                  "kv-cache-too-small", "shm", "port-in-use", "model-files-missing"])
def test_forced_failure_is_diagnosed_as_itself(model: Path, name: str):
    result = run([str(model), *STABLE_FLAGS], env={"VLLM_STANDIN_FAIL": name})
    assert result.returncode != 0
    assert load_diagnosis().diagnose(result.stdout)[0]["key"] == name
