"""The vLLM stand-in must parse vLLM's command line, fail like vLLM and speak its API.

The command-line expectations are not written here: generate.py ran each supported release's own
parser (vLLM 0.19.1 and 0.34.0) over every case and recorded the outcome in
vllm-standin/releases/<version>/vllm_serve.json; the stand-in plays one release at a time
(VLLM_STANDIN_RELEASE, default 0.19.1, the release of sparkfleet-sim/vllm-openai:standin).
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.machinery
import importlib.util
import io
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import ModuleType, SimpleNamespace

import openai
import pytest

STANDIN_DIR = Path(__file__).resolve().parent / "vllm-standin"
STANDIN = STANDIN_DIR / "vllm"
RELEASES = ("0.19.1", "0.34.0")
DEFAULT_RELEASE = "0.19.1"
TABLES = {release: json.loads((STANDIN_DIR / "releases" / release / "vllm_serve.json").read_text(encoding="utf-8"))
          for release in RELEASES}
DATA = TABLES[DEFAULT_RELEASE]
CASES = [(release, case) for release in RELEASES for case in TABLES[release]["cases"]]
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

def case_id(release_case: tuple[str, dict]) -> str:
    release, case = release_case
    return f"{release} " + " ".join(case["argv"])[:60]


def exception_lines(output: str) -> list[str]:
    """Output lines without vLLM's process prefix, object addresses made comparable."""
    lines = [re.sub(r"^\((?:APIServer|EngineCore_DP0) pid=\d+\) ", "", line) for line in output.splitlines()]
    return [re.sub(r" at 0x[0-9a-f]+>", " at 0x...>", line) for line in lines]


@pytest.fixture(scope="module")
def plain_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model directory with nothing model-specific to refuse (no length or quantization in
    config.json): the outcomes the generator recorded are those of the command line alone."""
    model = tmp_path_factory.mktemp("plain") / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3_5MoeForConditionalGeneration"]}))
    return model


def load_standin(release: str) -> ModuleType:
    """The stand-in as a module playing `release` (it reads VLLM_STANDIN_RELEASE when imported)."""
    name = "vllm_standin_" + release.replace(".", "_")
    loader = importlib.machinery.SourceFileLoader(name, str(STANDIN))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    saved = os.environ.get("VLLM_STANDIN_RELEASE")
    os.environ["VLLM_STANDIN_RELEASE"] = release
    try:
        loader.exec_module(module)
    finally:
        if saved is None:
            del os.environ["VLLM_STANDIN_RELEASE"]
        else:
            os.environ["VLLM_STANDIN_RELEASE"] = saved
    return module


@pytest.fixture(scope="module")
def standins() -> dict[str, ModuleType]:
    """The stand-in as a module per release: its main() runs each case in-process (300 interpreter
    starts would cost more than the rest of this file)."""
    return {release: load_standin(release) for release in RELEASES}


@pytest.fixture(scope="module")
def standin(standins: dict[str, ModuleType]) -> ModuleType:
    return standins[DEFAULT_RELEASE]


def run_in_process(standin: ModuleType, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    for key in [k for k in os.environ if k.startswith("VLLM_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("VLLM_STANDIN_VALIDATE_ONLY", "1")
    monkeypatch.setattr(standin.signal, "signal", lambda *_: None)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = standin.main(["serve", *argv])
        except SystemExit as exc:
            code = exc.code
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


@pytest.mark.parametrize("release_case", CASES, ids=[case_id(c) for c in CASES])
def test_command_line_fares_as_under_vllms_own_parser(standins: dict[str, ModuleType], plain_model: Path,
                                                      release_case: tuple[str, dict], monkeypatch: pytest.MonkeyPatch):
    release, case = release_case
    argv = [str(plain_model) if a == "/model" else a.replace("=/model", f"={plain_model}") for a in case["argv"]]
    result = run_in_process(standins[release], argv, monkeypatch)
    lines = exception_lines(result.stdout + result.stderr)
    assert result.returncode == case["exit"], result.stdout + result.stderr
    if case["stage"] == "accepted":
        assert "Traceback" not in result.stdout + result.stderr
        return
    assert case["error"] in lines, result.stdout + result.stderr
    if case["stage"] == "argparse":
        # argparse's usage error: no traceback, the error line is the first "error:" line.
        assert "Traceback" not in result.stdout + result.stderr
        assert next(line for line in lines if re.match(r"^vllm(?: serve)?: error: ", line)) == case["error"]
    else:
        assert "Traceback (most recent call last):" in result.stdout + result.stderr or case["error"].startswith(
            "pydantic_core")
    if case.get("detail"):
        # The lines after the error line: pydantic's, one or two per refused field.
        start = lines.index(case["error"]) + 1
        expected = case["detail"].split("\n")
        got = lines[start:start + len(expected)]
        assert len(got) == len(expected) and all(map(same_detail_line, expected, got)), (expected, got)


def same_detail_line(expected: str, got: str) -> bool:
    """A line of vLLM's is the start of the stand-in's (for a model validator's error pydantic adds
    `[type=..., input_value=ArgsKwargs(...)]`, which the generator does not record). A JSON syntax
    error is described in serde_json's words (pydantic's parser), which the stand-in does not
    re-create: for those, the words around it are compared."""
    marker = " [type=json_invalid,"
    if marker in expected:
        head = expected.split("Invalid JSON: ", maxsplit=1)[0] + "Invalid JSON: "
        return got.startswith(head) and got.endswith(expected[expected.index(marker):])
    return got.startswith(expected)


def test_the_cases_cover_what_the_old_stand_in_got_wrong():
    """The command lines a hand-written stand-in judged differently from vLLM 0.19.1, with
    the verdict of vLLM's own parser (from the generated data, not written here)."""
    verdict = {tuple(c["argv"]): c for c in DATA["cases"]}
    refused = {
        ("/model", "--swap-space", "4"): ("argparse", "vllm: error: unrecognized arguments: --swap-space 4"),
        ("/model", "-O", '{"level": 3}'): ("argparse", "vllm: error: unrecognized arguments"),
        # Not refused before the engine starts: --reasoning-parser reaches the config that
        # validate_api_server_args reads only later; the engine's lookup fails after loading.
        ("/model", "--reasoning-parser", "gpt_oss"): ("engine", "KeyError: \"Reasoning parser 'gpt_oss' not found."),
        ("/model", "--structured-outputs-config.reasoning_parser", "gpt_oss"):
            ("startup", "KeyError: 'invalid reasoning parser: gpt_oss"),
        ("/model", "--max-model-len", "16384.0"): ("argparse", "invalid human_readable_int_or_auto value"),
        ("/model", "--max-model-len", "1.5K"): ("argparse", "Decimals are not allowed with binary suffixes"),
        ("/model", "--enable-auto-tool-choice"): ("validate", "TypeError: Error: --enable-auto-tool-choice requires"),
        ("--served-model-name", "x", "/model"): ("cli", "ValueError: `model` should be provided as the first"),
    }
    for argv, (stage, text) in refused.items():
        assert verdict[argv]["stage"] == stage and text in verdict[argv]["error"], argv
    accepted = [
        ("/model", "-cc", '{"mode": 3}'), ("/model", "--max-model-len", "auto"), ("/model", "--max-model-len", "-1"),
        ("/model", "--max-model-len", "1t"), ("/model", "--quantization", "mxfp8"),
        ("/model", "--load-format", "instanttensor"), ("/model", "--limit-mm-per-prompt.image", "0"),
        ("/model", "--skip-mm-profiling"), ("/model", "--mamba-cache-mode", "align"),
        ("/model", "--default-chat-template-kwargs", '{"enable_thinking": false}'),
        ("/model", "--reasoning-parser", "openai_gptoss"), ("/model", "--reasoning-parser", "nemotron_v3"),
        ("/model", "--enable-auto-tool-choice", "--tool-call-parser", "glm47"), ("/model", "-O3"),
        ("/model", "-cc.mode", "3"), ("/model", "--max-model-len", "1.5k"), ("/model", "--no-enable-prefix-caching"),
    ]
    for argv in accepted:
        assert verdict[argv]["stage"] == "accepted", argv
    assert len(DATA["cases"]) >= 60


@pytest.mark.parametrize("release", RELEASES)
def test_unknown_names_have_no_argparse_choices(release: str):
    """Parser, quantization and load-format names are checked at start-up, from registries."""
    options = {row["dest"]: row for row in TABLES[release]["options"]}
    for dest in ("tool_call_parser", "reasoning_parser", "quantization", "load_format"):
        assert options[dest]["choices"] is None, dest
    registries = TABLES[release]["registries"]
    assert "qwen3_coder" in registries["tool_call_parsers"] and "qwen3" in registries["reasoning_parsers"]
    assert "fp8" in registries["quantization"] and "safetensors" in registries["load_formats"]


@pytest.mark.parametrize("release", RELEASES)
def test_every_quoted_message_names_its_upstream_line(release: str):
    for name, spec in TABLES[release]["messages"].items():
        assert spec["file"].startswith("vllm/") and spec["file"].endswith(".py"), name
        assert spec["line"] > 0 and spec["template"], name


SDIST = os.environ.get("VLLM_SDIST", "")


@pytest.mark.skipif(not Path(SDIST).is_file(),
                    reason="set VLLM_SDIST=/path/to/vllm-0.19.1.tar.gz to re-derive the table from vLLM's source "
                           "(needs pydantic; the committed vllm_serve.json is what CI checks against)")
def test_generated_data_is_what_vllms_source_gives():
    result = subprocess.run([sys.executable, str(STANDIN_DIR / "generate.py"), "--sdist", SDIST, "--check"],
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]


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
    (["--gpu-memory-utilization", "0.95"], "on startup is less than desired GPU memory utilization (0.95,"),
    (["--gpu-memory-utilization", "0.9", "--enforce-eager"], None),
    (["--kv-cache-dtype", "fp8", "--max-num-batched-tokens", "2048"],
     "block_size (2096) must be <= max_num_batched_tokens (2048)"),
    (["--kv-cache-dtype", "fp8", "--max-num-batched-tokens", "2048", "--no-enable-prefix-caching"], None),
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


def test_small_shm_is_sigbus_of_the_engine(model: Path):
    result = run([str(model), *STABLE_FLAGS], env={"VLLM_STANDIN_SHM_MIN_BYTES": str(1 << 60)})
    assert result.returncode == 135
    assert "Failed core proc(s): {'EngineCore_DP0': -7}" in result.stdout
    # vLLM never prints "Bus error": the engine process just dies of the signal.
    assert "Bus error" not in result.stdout + result.stderr


def test_prefix_caching_is_tri_state_for_hybrid_models(model: Path):
    """0.19.1: hybrid models default to no prefix caching; asking for it selects Mamba
    "align" mode, the only mode with the block_size <= max_num_batched_tokens assertion."""
    small = ["--kv-cache-dtype", "fp8", "--max-num-batched-tokens", "2048"]
    env = {"VLLM_STANDIN_VALIDATE_ONLY": "1"}
    assert run([str(model), *small], env=env).returncode == 0
    assert run([str(model), *small, "--no-enable-prefix-caching"], env=env).returncode == 0
    refused = run([str(model), *small, "--enable-prefix-caching"], env=env)
    assert refused.returncode == 1
    assert "In Mamba cache align mode, block_size (2096) must be <= max_num_batched_tokens (2048)." in refused.stdout


def test_model_length_above_the_config_is_refused_before_loading(tmp_path: Path):
    model = make_model(tmp_path)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "text_config": {"max_position_embeddings": 262144}}))
    result = run([str(model), "--max-model-len", "1t"], env={"VLLM_STANDIN_VALIDATE_ONLY": "1"})
    assert result.returncode == 1
    assert ("User-specified max_model_len (1000000000000) is greater than the derived max_model_len "
            "(max_position_embeddings=262144 or model_max_length=None in model's config.json).") in result.stdout
    allowed = run([str(model), "--max-model-len", "1t"],
                  env={"VLLM_STANDIN_VALIDATE_ONLY": "1", "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    assert allowed.returncode == 0


def test_a_refused_case_refuses_in_a_real_process_too(plain_model: Path):
    """The in-process runs above see what a container sees: exit code and stream."""
    argparse_error = run([str(plain_model), "--swap-space", "4"], env={"VLLM_STANDIN_VALIDATE_ONLY": "1"})
    assert argparse_error.returncode == 2
    assert argparse_error.stderr.splitlines()[-1] == "vllm: error: unrecognized arguments: --swap-space 4"
    cli_error = run(["--served-model-name", "x", str(plain_model)], env={"VLLM_STANDIN_VALIDATE_ONLY": "1"})
    assert cli_error.returncode == 1
    assert cli_error.stderr.splitlines()[-1].startswith("ValueError: `model` should be provided as the first")


def test_validate_only_exits_before_loading(model: Path):
    env = {"VLLM_STANDIN_VALIDATE_ONLY": "1", "VLLM_STANDIN_STARTUP_SECONDS": "60"}
    result = run([str(model), *STABLE_FLAGS], env=env, timeout=20)
    assert result.returncode == 0
    assert "Loading safetensors checkpoint shards" not in result.stdout


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


def test_refused_request_leaves_the_connection_usable(server: Server):
    """A proxy (vllm-router) keeps connections open: a refused POST's body must not be read
    as the next request on the same connection, as uvicorn does not."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    body = json.dumps({"model": SERVED, "prompt": "hi", "max_tokens": 2})
    for key, expected in (("wrong", 401), (KEY, 200)):
        headers = {"content-type": "application/json", "authorization": f"Bearer {key}"}
        conn.request("POST", "/v1/completions", body, headers)
        response = conn.getresponse()
        response.read()
        assert response.status == expected
    conn.close()


def test_v1_needs_the_key(server: Server):
    assert server.request("/v1/models", key=None) == (401, '{"error": "Unauthorized"}')
    assert server.request("/v1/models", key="wrong")[0] == 401
    status, text = server.request("/v1/models")
    assert status == 200
    assert [m["id"] for m in json.loads(text)["data"]] == [SERVED]


def test_the_responses_and_anthropic_messages_apis_answer_with_the_key(server: Server):
    """vLLM 0.19.1 serves both for a text-generation model (vllm/entrypoints/openai/generate/api_router.py:19-42);
    through the openai and the plain JSON shapes of their protocol classes."""
    client = openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=10)
    reply = client.responses.create(model=SERVED, input="Say OK through the responses API", max_output_tokens=32)
    assert reply.object == "response" and reply.status == "completed" and "responses API" in reply.output_text
    assert reply.usage.output_tokens == len(reply.output_text.split())
    status, text = server.request("/v1/messages", {"model": SERVED, "max_tokens": 32,
                                                   "messages": [{"role": "user", "content": "Hello Anthropic"}]})
    message = json.loads(text)
    assert status == 200 and message["type"] == "message" and message["stop_reason"] == "end_turn"
    # With --reasoning-parser a thinking block comes first (vllm/entrypoints/anthropic/serving.py:459-473).
    assert [b["type"] for b in message["content"]] == ["thinking", "text"]
    assert "Anthropic" in message["content"][1]["text"]
    assert server.request("/v1/responses", {"model": SERVED, "input": "x"}, key=None)[0] == 401
    # Paths vLLM serves elsewhere (/tokenize) or only for other tasks (audio, pooling): its 404.
    for path in ("/v1/tokenize", "/v1/audio/transcriptions", "/v1/embeddings"):
        assert server.request(path, {"model": SERVED, "input": "x"})[0] == 404, path


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


def test_reasoning_is_in_the_reasoning_field(server: Server):
    """vLLM 0.19.1's ChatMessage has `reasoning` (entrypoints/openai/chat_completion/protocol.py)."""
    request = {"model": SERVED, "messages": [{"role": "user", "content": "think"}]}
    message = json.loads(server.request("/v1/chat/completions", request)[1])["choices"][0]["message"]
    assert message["reasoning"]
    assert "reasoning_content" not in message


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


# --- /v1/chat/completions/render, /v1/completions/render, /v1/chat/completions/batch ---------------
# vLLM 0.19.1 serves them to a text-generation model (vllm/entrypoints/serve/render/api_router.py:25-71,
# vllm/entrypoints/openai/chat_completion/api_router.py:77-102). The texts expected below are what vLLM's
# own routes, request classes and handlers answered under FastAPI 0.135.2 and pydantic 2.12.

SITE = "/usr/local/lib/python3.12/dist-packages/"
# GenerateRequest's fields, in order (vllm/entrypoints/serve/disagg/protocol.py:55-108).
GENERATE_REQUEST_KEYS = ["request_id", "token_ids", "features", "sampling_params", "model", "stream", "stream_options",
                         "cache_salt", "priority", "kv_transfer_params"]


def post_raw(server: Server, path: str, data: bytes, content_type: str | None = "application/json",
             key: str | None = KEY) -> tuple[int, object]:
    """(status, JSON body) of a POST whose body and content type are given as they are."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"authorization": f"Bearer {key}"} if key else {}
    if content_type:
        headers["content-type"] = content_type
    conn.request("POST", path, data, headers)
    response = conn.getresponse()
    status, text = response.status, response.read().decode()
    conn.close()
    return status, json.loads(text)


def post(server: Server, path: str, body: object) -> tuple[int, object]:
    return post_raw(server, path, json.dumps(body).encode())


def successes(server: Server) -> float:
    """Requests the engine finished (vllm:request_success_total)."""
    return sum(float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} (\S+)$",
                                            server.request("/metrics", key=None)[1], re.M))


def test_chat_completions_render_gives_the_engine_request_and_generates_nothing(server: Server):
    before = successes(server)
    status, body = post(server, "/v1/chat/completions/render", {
        "model": SERVED, "messages": [{"role": "user", "content": "t5 t6 hello"}], "temperature": 0.5, "max_tokens": 8})
    assert status == 200
    assert list(body) == GENERATE_REQUEST_KEYS
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{16}", body["request_id"])
    # The stand-in's tokenizer: one word one token, t<i> is token i.
    assert body["token_ids"][:2] == [5, 6] and len(body["token_ids"]) == 3
    # SamplingParams as msgspec serializes it: the floats the request class passes on are kept even at their
    # defaults, ints and bools at theirs are left out (vllm/sampling_params.py:156-162).
    assert body["sampling_params"] == {
        "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0, "temperature": 0.5, "top_p": 1.0,
        "min_p": 0.0, "stop": [], "stop_token_ids": [], "max_tokens": 8, "output_kind": 2, "skip_clone": True,
        "bad_words": [], "skip_reading_prefix_cache": False}
    assert {k: body[k] for k in GENERATE_REQUEST_KEYS[4:]} == {
        "model": SERVED, "stream": False, "stream_options": None, "cache_salt": None, "priority": 0,
        "kv_transfer_params": None}
    assert successes(server) == before


def test_completions_render_gives_one_engine_request_per_prompt(server: Server):
    status, body = post(server, "/v1/completions/render", {"model": SERVED, "prompt": [[7, 8, 9], [1]]})
    assert status == 200
    assert [item["token_ids"] for item in body] == [[7, 8, 9], [1]]
    assert all(re.fullmatch(r"cmpl-[0-9a-f]{16}", item["request_id"]) for item in body)
    # max_tokens 16, CompletionRequest's default and SamplingParams' own: left out.
    assert body[0]["sampling_params"] == {
        "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0, "temperature": 1.0, "top_p": 1.0,
        "min_p": 0.0, "stop": [], "stop_token_ids": [], "output_kind": 2, "skip_clone": True, "bad_words": [],
        "skip_reading_prefix_cache": False}


def test_batch_chat_completions_answer_one_choice_per_conversation(server: Server):
    before = successes(server)
    conversations = [[{"role": "user", "content": "first conversation"}],
                     [{"role": "system", "content": "be brief"}, {"role": "user", "content": "second one here"}]]
    status, body = post(server, "/v1/chat/completions/batch", {"model": SERVED, "messages": conversations})
    assert status == 200
    assert list(body) == ["id", "object", "created", "model", "choices", "service_tier", "system_fingerprint", "usage",
                          "prompt_logprobs", "prompt_token_ids", "kv_transfer_params"]
    assert body["object"] == "chat.completion" and body["model"] == SERVED
    assert [choice["index"] for choice in body["choices"]] == [0, 1]
    first, second = (choice["message"] for choice in body["choices"])
    assert first["content"].endswith("first conversation") and second["content"].endswith("second one here")
    assert first["role"] == "assistant" and first["reasoning"]  # the server runs a reasoning parser
    assert body["usage"]["prompt_tokens"] == 2 + 5
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
    assert successes(server) == before + 2  # one engine request per conversation


def test_render_refuses_a_request_without_messages_as_vllm_does(server: Server):
    """FastAPI's RequestValidationError, worded by vLLM's validation_exception_handler
    (vllm/entrypoints/openai/server_utils.py:403-437): the error list, the route's place, the list again."""
    status, body = post(server, "/v1/chat/completions/render", {"model": SERVED})
    error = ("{'type': 'missing', 'loc': ('body', 'messages'), 'msg': 'Field required', "
             "'input': {'model': 'qwen3.5-35b'}}")
    assert status == 400
    assert body == {"error": {
        "message": f"1 validation error:\n  {error}\n\n  File \"{SITE}vllm/entrypoints/serve/render/api_router.py\", "
                   f"line 25, in render_chat_completion\n    POST /v1/chat/completions/render [{error}]",
        "type": "Bad Request", "param": None, "code": 400}}


REFUSALS = [
    # (path, body, status, type, param, the message's start)
    ("/v1/chat/completions/batch", {"model": SERVED, "messages": [[{"role": "user", "content": "x"}]], "n": 2},
     400, "Bad Request", None,
     "1 validation error:\n  {'type': 'value_error', 'loc': ('body',), 'msg': 'Value error, Batch chat completions do "
     "not support `n > 1`. Please set `n` to 1.', 'input': {'model': 'qwen3.5-35b', 'messages': [[{'role': 'user', "
     "'content': 'x'}]], 'n': 2}, 'ctx': {'error': ValueError('Batch chat completions do not support `n > 1`. Please "
     "set `n` to 1.')}}\n\n  File \"" + SITE + "vllm/entrypoints/utils.py\", line 77, in create_batch_chat_completion"),
    ("/v1/chat/completions/batch", {"model": SERVED, "messages": []}, 400, "Bad Request", None,
     "1 validation error:\n  {'type': 'too_short', 'loc': ('body', 'messages'), 'msg': 'List should have at least 1 "
     "item after validation, not 0', 'input': [], 'ctx': {'field_type': 'List', 'min_length': 1, 'actual_length': 0}}"),
    ("/v1/completions/render", {"model": SERVED, "max_tokens": 4}, 400, "Bad Request", None,
     "1 validation error:\n  {'type': 'value_error', 'loc': ('body',), 'msg': 'Value error, Either prompt or "
     "prompt_embeds must be provided and non-empty.', 'input': {'model': 'qwen3.5-35b', 'max_tokens': 4}, 'ctx': "
     "{'error': ValueError('Either prompt or prompt_embeds must be provided and non-empty.')}}\n\n  File \"" + SITE
     + "vllm/entrypoints/serve/render/api_router.py\", line 51, in render_completion"),
    ("/v1/chat/completions/render", {"model": SERVED, "messages": [{"role": "user", "content": "x"}],
                                     "stream_options": {"include_usage": True}}, 400, "Bad Request", "stream_options",
     "1 validation error:\n  {'type': 'value_error', 'loc': ('body',), 'msg': 'Value error, Stream options can only be "
     "defined when `stream=True`. (parameter=stream_options)'"),
    ("/v1/chat/completions/render", {"model": SERVED, "messages": [{"role": "user", "content": "x"}],
                                     "temperature": "hot"}, 400, "Bad Request", None,
     "1 validation error:\n  {'type': 'float_parsing', 'loc': ('body', 'temperature'), 'msg': 'Input should be a valid "
     "number, unable to parse string as a number', 'input': 'hot'}"),
    ("/v1/chat/completions/render", {"model": SERVED, "messages": [{"role": "user", "content": "x"}],
                                     "temperature": -1}, 400, "BadRequestError", "temperature",
     "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)"),
    ("/v1/chat/completions/render", {"model": SERVED, "messages": [{"role": "user", "content": "x"}],
                                     "use_beam_search": True}, 400, "BadRequestError", None,
     "Beam search is not supported by the render endpoint"),
    ("/v1/completions/render", {"model": SERVED, "prompt": "x", "suffix": "y"}, 400, "BadRequestError", None,
     "suffix is not currently supported"),
    ("/v1/completions/render", {"model": SERVED, "prompt": "x", "max_tokens": 20000}, 400, "BadRequestError",
     "max_tokens", "max_tokens=20000cannot be greater than max_model_len=max_total_tokens=16384. Please request fewer "
     "output tokens. (parameter=max_tokens, value=20000)"),
    ("/v1/chat/completions/batch", {"model": SERVED, "messages": [[{"role": "user", "content": "x"}]],
                                    "continue_final_message": True}, 400, "BadRequestError", None,
     "1 validation error for ChatCompletionRequest\n  Value error, Cannot set both `continue_final_message` and "
     "`add_generation_prompt` to True. [type=value_error, "),
    ("/v1/chat/completions/render", {"model": "Qwen/Qwen3.5-35B-A3B-FP8",
                                     "messages": [{"role": "user", "content": "x"}]},
     404, "NotFoundError", "model", "The model `Qwen/Qwen3.5-35B-A3B-FP8` does not exist."),
    ("/v1/chat/completions/batch", {"model": "other", "messages": [[{"role": "user", "content": "x"}]]},
     404, "NotFoundError", "model", "The model `other` does not exist."),
    ("/v1/chat/completions/render", [1, 2], 500, "InternalServerError", None, "'list' object has no attribute 'get'"),
]


@pytest.mark.parametrize("case", REFUSALS, ids=[f"{r[0]} {r[5][:40]}" for r in REFUSALS])
def test_render_and_batch_refuse_what_vllm_refuses(server: Server, case: tuple):
    path, body, status, kind, param, message = case
    answer_status, answer = post(server, path, body)
    assert answer_status == status
    assert set(answer) == {"error"} and answer["error"]["code"] == status
    assert (answer["error"]["type"], answer["error"]["param"]) == (kind, param)
    assert answer["error"]["message"].startswith(message), answer["error"]["message"]


def test_render_and_batch_take_json_only_and_need_the_key(server: Server):
    """vLLM's validate_json_request dependency (vllm/entrypoints/openai/utils.py:43-49), FastAPI's JSON
    decoding, and the API key on every /v1 path."""
    body = json.dumps({"model": SERVED, "prompt": "x"}).encode()
    status, answer = post_raw(server, "/v1/completions/render", body, content_type="text/plain")
    error = "Unsupported Media Type: Only 'application/json' is allowed"
    assert (status, answer["error"]["message"]) == (400, f'1 validation error:\n  {error} ["{error}"]')
    status, answer = post_raw(server, "/v1/chat/completions/batch", b"{bad")
    assert status == 400 and answer["error"]["message"].startswith(
        "1 validation error:\n  {'type': 'json_invalid', 'loc': ('body', 1), 'msg': 'JSON decode error', 'input': {}, "
        "'ctx': {'error': 'Expecting property name enclosed in double quotes'}}")
    for path in ("/v1/chat/completions/render", "/v1/completions/render", "/v1/chat/completions/batch"):
        assert post_raw(server, path, body, key=None) == (401, {"error": "Unauthorized"})


def test_render_takes_the_models_generation_config(tmp_path: Path):
    """The model's generation_config.json sets the defaults (ModelConfig.get_diff_sampling_param,
    vllm/config/model.py:1391-1444), unless --generation-config vllm."""
    model = make_model(tmp_path)
    (model / "generation_config.json").write_text(json.dumps({"do_sample": True, "temperature": 0.7, "top_p": 0.8}))
    for extra, expected in (([], (0.7, 0.8)), (["--generation-config", "vllm"], (1.0, 1.0))):
        srv = Server(model, ["--api-key", KEY, *extra], {})
        try:
            srv.wait()
            status, body = post(srv, "/v1/completions/render", {"prompt": "x"})
            assert status == 200
            assert (body[0]["sampling_params"]["temperature"], body[0]["sampling_params"]["top_p"]) == expected
        finally:
            srv.stop()


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

def load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


RELEASES_MODULE = "ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_releases"
UTILS = Path(__file__).resolve().parents[2] / "plugins" / "module_utils"


def load_releases() -> ModuleType:
    return load_module(UTILS / "vllm_releases.py", RELEASES_MODULE)


def load_diagnosis() -> ModuleType:
    """vllm_diagnosis.py without the collection on the path: its generated table of vLLM's texts
    is registered under the name it imports it by (a module found in sys.modules is used as is)."""
    load_releases()
    return load_module(UTILS / "vllm_diagnosis.py", "vllm_diagnosis")


FORCED = {
    "oom": "torch.OutOfMemoryError: CUDA out of memory.",
    "mamba-block-size": "In Mamba cache align mode, block_size (1056) must be <= max_num_batched_tokens (16384).",
    "unsupported-architecture": "Model architectures ['Qwen3_5MoeForConditionalGeneration'] are not supported",
    "nvfp4-illegal-instruction": "CUDA error: an illegal instruction was encountered",
    "kv-cache-too-small": "To serve at least one request with the models's max seq len (16384)",
    "shm": "Failed core proc(s): {'EngineCore_DP0': -7}",
    "port-in-use": "OSError: [Errno 98] Address already in use",
    "model-files-missing": "Invalid repository ID or local directory specified",
    "free-memory-at-startup": "ValueError: Free memory on device cuda:0 (110.0/119.7 GiB) on startup is less than "
                              "desired GPU memory utilization (0.75, 89.78 GiB).",
    "memory-profiling": "AssertionError: Error in memory profiling. Initial free memory 110.0 GiB, current free "
                        "memory 113.2 GiB.",
    "no-kv-cache-memory": "ValueError: No available memory for the cache blocks. Try increasing "
                          "`gpu_memory_utilization`",
    "max-model-len-above-model": "User-specified max_model_len (16384) is greater than the derived max_model_len",
}


# What 0.34.0 says otherwise (vllm/v1/core/kv_cache_planning.py), and the failures it cannot have: no
# Mamba align-mode block-size assertion any more, NVFP4 kernels that run on GB10 (from 0.28.0).
FORCED_BY_RELEASE = {"0.19.1": FORCED, "0.34.0": {
    **{k: v for k, v in FORCED.items() if k not in ("mamba-block-size", "nvfp4-illegal-instruction")},
    "kv-cache-too-small": "To serve at least one request with the model's max seq len (16384)"}}
FORCED_CASES = [(release, name) for release in RELEASES for name in FORCED_BY_RELEASE[release]]


@pytest.mark.parametrize(("release", "name"), FORCED_CASES)
def test_forced_failure_prints_vllms_text(model: Path, release: str, name: str):
    result = run([str(model), *STABLE_FLAGS], env={"VLLM_STANDIN_FAIL": name, "VLLM_STANDIN_RELEASE": release})
    assert result.returncode == (135 if name == "shm" else 1)
    assert FORCED_BY_RELEASE[release][name] in result.stdout


@pytest.mark.parametrize("name", sorted(set(FORCED) - set(FORCED_BY_RELEASE["0.34.0"])))
def test_a_failure_the_release_cannot_have_is_not_forced(model: Path, name: str):
    result = run([str(model), *STABLE_FLAGS], env={"VLLM_STANDIN_FAIL": name, "VLLM_STANDIN_RELEASE": "0.34.0"})
    assert result.returncode == 1 and f"vLLM 0.34.0 has no failure '{name}'" in result.stdout + result.stderr


@pytest.mark.parametrize("release", RELEASES)
def test_version_is_the_release(release: str):
    result = subprocess.run([sys.executable, str(STANDIN), "--version"], capture_output=True, text=True, timeout=30,
                            env={**clean_env(), "VLLM_STANDIN_RELEASE": release}, check=False)
    assert (result.returncode, result.stdout) == (0, release + "\n")


def test_an_unknown_release_is_refused():
    result = subprocess.run([sys.executable, str(STANDIN), "--version"], capture_output=True, text=True, timeout=30,
                            env={**clean_env(), "VLLM_STANDIN_RELEASE": "0.20.0"}, check=False)
    assert result.returncode != 0 and "run generate.py --version 0.20.0" in result.stderr


def test_every_failure_the_stand_in_knows_is_tested():
    text = STANDIN.read_text(encoding="utf-8")
    names = json.loads("[" + re.search(r"^FAILURES = \[(.*?)\]", text, re.S | re.M).group(1) + "]")
    assert sorted(names) == sorted(FORCED)


@pytest.mark.parametrize(("release", "name"), FORCED_CASES)
def test_forced_failure_is_diagnosed_as_itself(model: Path, release: str, name: str):
    diagnosis = load_diagnosis()
    assert name in {failure.key for failure in diagnosis.known_failures(release)}
    result = run([str(model), *STABLE_FLAGS], env={"VLLM_STANDIN_FAIL": name, "VLLM_STANDIN_RELEASE": release})
    assert result.returncode != 0
    found = diagnosis.diagnose(result.stdout, exit_code=result.returncode, release=release)
    assert found and found[0]["key"] == name


# --- the generated tables ---------------------------------------------------------------------

@pytest.mark.parametrize("release", ["0.19.1", "0.34.0"])
def test_generated_releases_module_matches_the_tables(release: str):
    """plugins/module_utils/vllm_releases.py (the collection's copy) and releases/<version>/vllm_serve.json
    come from one generator run: the same sdist, texts, files, lines, options and names."""
    module = load_releases()
    table = json.loads((STANDIN_DIR / "releases" / release / "vllm_serve.json").read_text(encoding="utf-8"))
    entry = module.RELEASES[release]
    assert release in module.SUPPORTED and table["vllm_version"] == release
    assert (table["sdist_sha256"], table["allow_abbrev"]) == (entry["sdist_sha256"], entry["allow_abbrev"])
    assert {name: (m["file"], m["line"], m["template"]) for name, m in table["messages"].items()} == entry["messages"]
    fields = {key: (f["file"], f["line"], f["messages"]) for key, f in table["field_errors"].items()}
    assert fields == entry["field_errors"]
    assert table["registries"] == entry["registries"]
    declared = {option for row in table["options"] for option in row["options"]}
    assert declared <= set(entry["options"])


def test_stand_in_takes_attention_backends_and_compilation_modes_from_vllms_registry():
    """The names come from vLLM's AttentionBackendEnum and CompilationMode (run by generate.py)."""
    registries = DATA["registries"]
    assert {"FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"} <= set(registries["attention_backends"])
    assert registries["compilation_modes"]["VLLM_COMPILE"] == 3
    spec = DATA["field_errors"]["CacheConfig.gpu_memory_utilization"]
    assert spec["file"] == "vllm/config/cache.py" and spec["bounds"] == {"gt": 0, "le": 1}


# --- what vLLM refuses, the stand-in refuses with vLLM's words, and the diagnosis names the fix ----

REFUSED = {
    "invalid-reasoning-parser": ["{model}", "--reasoning-parser", "qwen3.5"],
    "gpu-memory-utilization-out-of-range": ["{model}", "--gpu-memory-utilization", "0"],
    "unknown-load-format": ["{model}", "--load-format", "tensorstore"],
    "unknown-attention-backend": ["{model}", "--attention-backend", "flashattention"],
    "model-not-first": ["--served-model-name", "x", "{model}"],
    "log-outputs-without-log-requests": ["{model}", "--enable-log-outputs"],
}


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("key", list(REFUSED))
def test_refused_command_line_is_diagnosed(standins: dict[str, ModuleType], plain_model: Path, key: str,
                                           release: str, monkeypatch: pytest.MonkeyPatch):
    argv = [a.format(model=plain_model) for a in REFUSED[key]]
    result = run_in_process(standins[release], argv, monkeypatch)
    assert result.returncode == 1
    found = load_diagnosis().diagnose(result.stdout + result.stderr, exit_code=result.returncode, release=release)
    assert found and found[0]["key"] == key, [f["key"] for f in found]


# --- memory: the KV cache from the model's config.json and its weights ----------------------------
# gpt-oss-120b's attention (https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json): 36 layers
# alternating sliding-window (128 tokens) and full attention, 8 KV heads of 64.
GPT_OSS = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 36,
           "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "hidden_size": 2880,
           "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 18,
           "max_position_embeddings": 131072}


def gpt_oss(root: Path, weights_gib: float = 61) -> Path:
    model = root / "gpt-oss-120b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(GPT_OSS))
    with open(model / "model-00001-of-00001.safetensors", "wb") as handle:
        handle.truncate(int(weights_gib * (1 << 30)))  # sparse: its size, not its bytes
    return model


def kv_tokens_logged(output: str) -> int:
    return int(re.search(r"GPU KV cache size: ([\d,]+) tokens", output).group(1).replace(",", ""))


def serve_and_log(model: Path, extra: list[str]) -> str:
    srv = Server(model, ["--max-num-seqs", "8", "--max-num-batched-tokens", "8192", *extra],
                 {"VLLM_STANDIN_RELEASE": "0.34.0"})
    srv.wait()
    srv.stop()
    return srv.proc.stdout.read()


def test_the_kv_cache_is_sized_from_the_models_geometry_and_weights(tmp_path: Path):
    """gpt-oss-120b at 0.8 of 119.7 GiB: its 61 GiB of weights leave room for its whole 131072-token context."""
    model = gpt_oss(tmp_path)
    bf16 = serve_and_log(model, ["--gpu-memory-utilization", "0.8", "--max-model-len", "131072"])
    assert "Model loading took 61.0 GiB" in bf16
    # 18 full-attention layers x 2 x 8 heads x 64 x 2 bytes = 36 KiB per token.
    tokens = kv_tokens_logged(bf16)
    kv_gib = float(re.search(r"Available KV cache memory: ([\d.]+) GiB", bf16).group(1))
    assert abs(tokens * 36 / (1 << 20) - kv_gib) < 0.05, (tokens, kv_gib)
    assert 131072 <= tokens < (0.8 * 119.7 - 61) * (1 << 20) / 36
    fp8 = serve_and_log(model, ["--gpu-memory-utilization", "0.8", "--max-model-len", "131072",
                                "--kv-cache-dtype", "fp8"])
    assert abs(kv_tokens_logged(fp8) / tokens - 2) < 0.01


def test_a_share_too_small_for_the_weights_and_the_context_is_vllms_kv_error(tmp_path: Path):
    model = gpt_oss(tmp_path)
    result = run([str(model), *STABLE_FLAGS, "--gpu-memory-utilization", "0.55", "--max-model-len", "131072"])
    assert result.returncode != 0
    assert "To serve at least one request with the model" in result.stdout
    assert "max seq len (131072)" in result.stdout


def test_heavier_weights_leave_less_kv_cache(tmp_path: Path):
    (tmp_path / "light").mkdir()
    (tmp_path / "heavy").mkdir()
    light, heavy = gpt_oss(tmp_path / "light", 40), gpt_oss(tmp_path / "heavy", 61)
    args = ["--gpu-memory-utilization", "0.8", "--max-model-len", "8192"]
    assert kv_tokens_logged(serve_and_log(light, args)) > kv_tokens_logged(serve_and_log(heavy, args))


def test_the_registry_is_the_releases_own(standins: dict[str, ModuleType]):
    """Architectures from each sdist's registry.py: gpt-oss and Nemotron-H in both, none hand-added."""
    for release, standin in standins.items():
        table = json.loads((STANDIN_DIR / "releases" / release / "vllm_serve.json").read_text())
        assert table["architectures"]["names"] == standin.ARCHITECTURES
        assert {"GptOssForCausalLM", "NemotronHForCausalLM", "Qwen3_5MoeForConditionalGeneration"} <= set(
            standin.ARCHITECTURES)
